"""Check an env file against the schema and resolve every value to its type.

Everything here runs before anything is rendered, started, killed or deleted. Each problem
is a :class:`~.errors.ConfigError` that says what is wrong and how to fix it.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from .checks import LOG_PASSRATE_HOW, check_agent, check_bucket, check_exp_id, check_global_batch_divides
from .config import MAX_AUTO_PROCESSES
from .credentials import refuse_secret_flags, secret_flag
from .envfile import EnvEntry
from .errors import ConfigError, raise_all
from .schema import KEYS, KEYS_BY_NAME, Key, Kind, Value, expected, is_secret, parse_text
from .variants import Variant

logger = logging.getLogger(__name__)

_MODEL_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass
class Config:
    """The resolved configuration: every schema key with its typed value (``None`` = unset).

    :param values: key name -> typed value, in schema order.
    :param source: where each explicitly set key came from (``file:line`` or ``--set``).
    :param relative: the path keys given as relative paths (made absolute from the current
        directory: a missing one's message says so).
    """

    values: dict[str, Value]
    source: dict[str, str]
    relative: frozenset[str] = frozenset()

    def __getitem__(self, name: str) -> Value:
        return self.values[name]

    def path(self, name: str) -> Path | None:
        """The value of a path key, or ``None`` when unset.

        :param name: a :attr:`Kind.PATH` key.
        """
        value = self.values[name]
        return Path(str(value)) if value is not None else None


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """Turn ``--set KEY=VALUE`` arguments into a dict (values are taken literally).

    :param pairs: the raw ``KEY=VALUE`` strings, in command-line order (later wins).
    """
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"--set {pair!r} is not KEY=VALUE", "write it as --set KEY=VALUE, e.g. --set NUM_ROLLOUT=10"
            )
        result[key.strip()] = value
    return result


def resolve(
    entries: dict[str, EnvEntry],
    overrides: dict[str, str],
    env_file: Path,
    runs_dir: Path,
    problems: list[ConfigError] | None = None,
) -> Config:
    """Validate the env file plus overrides and return the typed configuration.

    Every check runs in one pass: names, values, required keys and the checks that relate
    keys to each other (each on the values that converted), so one run of bin/train lists
    every problem of the file, one line each.

    :param entries: the parsed env file.
    :param overrides: ``--set`` values, applied on top of the file.
    :param env_file: the file's path, for messages.
    :param runs_dir: the directory holding runs/<EXP_ID>/ (for the SAVE_DIR default).
    :param problems: where to add the problems found; when ``None`` they are raised here.
    :raises ConfigError: (only when ``problems`` is ``None``) every problem found, a
        :class:`~.errors.ConfigErrors` when there are several.
    :returns: the configuration; a value that did not convert is ``None`` (and reported).
    """
    found: list[ConfigError] = []
    raw: dict[str, str] = {}
    source: dict[str, str] = {}
    reported = {name for name, entry in entries.items() if entry.broken}
    if not entries and not overrides:
        found.append(
            ConfigError(f"{env_file} sets no keys", "start from examples/gsm8k.env and fill in your values")
        )
    for name, entry in entries.items():
        where = f"{env_file}:{entry.line}"
        if entry.broken:
            continue
        if not _collect(found, _check_name, name, where):
            reported.add(suggest_key(name) or name)  # no "X is required" beside "did you mean X?"
            continue
        if entry.value is None:
            found.append(ConfigError(f"{where}: {name} has no value", f"write {name}=VALUE"))
            reported.add(name)
        else:
            raw[name], source[name] = entry.value, where
    for name, value in overrides.items():
        if _collect(found, _check_name, name, "--set"):
            raw[name], source[name] = value, "--set"
            reported.discard(name)
    values: dict[str, Value] = {}
    for key in KEYS:
        values[key.name] = None
        where = source.get(key.name, "default")
        if not _collect(found, _set_converted, values, key, raw.get(key.name, ""), where):
            reported.add(key.name)
    for key in KEYS:
        if key.required and values[key.name] is None and key.name not in reported:
            found.append(
                ConfigError(f"{key.name} is required", f"add {key.name}=... to {env_file} ({key.help})")
            )
    for check in _CONSTRAINTS:
        _collect(found, check, values)
    relative = _apply_defaults(values, runs_dir)
    if problems is None:
        raise_all(found)
    else:
        problems.extend(found)
    return Config(values, source, relative)


def _collect(problems: list[ConfigError], check: Callable[..., object], *args: object) -> bool:
    """Run ``check``; on a ConfigError record it and return False."""
    try:
        check(*args)
    except ConfigError as exc:
        problems.append(exc)
        return False
    return True


def _set_converted(values: dict[str, Value], key: Key, text: str, where: str) -> None:
    values[key.name] = _convert(key, text, where)


def _check_name(name: str, where: str) -> None:
    if is_secret(name):
        raise ConfigError(
            f"{where}: {name} is a secret and must not be in the env file",
            f"remove it and export it in the shell that runs bin/train: export {name}=...",
        )
    if name in KEYS_BY_NAME:
        return
    if secret_flag(f"--{name}") and not suggest_key(name):  # HF_TOKEN: a credential, not a typo of ours
        raise ConfigError(
            f"{where}: {name} is a secret (not a key of the env file) and must not be in it",
            f"remove it and export it in the shell that runs bin/train: export {name}=...",
        )
    invisible = [f"U+{ord(char):04X}" for char in name if not (char.isascii() and char.isprintable())]
    if invisible:
        raise ConfigError(
            f"{where}: unknown key {name!r}: it contains the invisible or non-ASCII character(s) "
            + ", ".join(invisible),
            "retype the key name; some editors add such characters",
        )
    close = suggest_key(name)
    hint = f"did you mean {close}?" if close else "see docs/launcher.md for the keys"
    raise ConfigError(f"{where}: unknown key {name}", hint)


def suggest_key(name: str) -> str | None:
    """The schema key a mistyped ``name`` most likely meant, or ``None``.

    In order: the same name in another case (``num_gpus``); a key that contains the name's
    words in order (``AGENT_ARN`` -> ``AGENT_RUNTIME_ARN``), the shortest such; a key whose
    words the name contains in order (``TOTAL_NUM_GPUS`` -> ``NUM_GPUS``), the longest;
    else the closest spelling (``NUMGPUS`` -> ``NUM_GPUS``).

    :param name: a key that is not in the schema.
    """
    upper = name.strip().upper().replace("-", "_")
    if upper in KEYS_BY_NAME:
        return upper
    words = [word for word in upper.split("_") if word]
    longer = [key for key in KEYS_BY_NAME if _in_order(words, key.split("_"))]
    if words and longer:
        return min(longer, key=lambda key: key.count("_"))  # ties: the first in the schema
    shorter = [key for key in KEYS_BY_NAME if _in_order(key.split("_"), words)]
    if shorter:
        return max(shorter, key=lambda key: key.count("_"))
    close = difflib.get_close_matches(upper, list(KEYS_BY_NAME), n=1, cutoff=0.6)
    return close[0] if close else None


def _in_order(part: list[str], whole: list[str]) -> bool:
    """Whether the words of ``part`` appear in ``whole`` in the same order."""
    rest = iter(whole)
    return all(word in rest for word in part)


def _convert(key: Key, text: str, where: str) -> Value:
    """Convert one value; empty text means unset (then the schema default applies)."""
    if not text.strip() and key.default is not None:
        text, where = key.default, "default"
    try:
        return parse_text(key, text)
    except ValueError as exc:
        shown = text if key.kind is Kind.WORDS else text.strip()
        if str(exc) in ("out of range", "not allowed"):  # the value parsed: show it as a number
            value = parse_text(replace(key, minimum=None, maximum=None, choices=()), text)
            shown_value = f"{value:g}" if isinstance(value, int | float) else repr(shown)
            raise ConfigError(f"{key.name}={shown_value} ({where}) is {exc}", expected(key)) from exc
        raise ConfigError(f"{key.name}={shown!r} ({where}): {exc}", expected(key)) from exc


def _apply_defaults(values: dict[str, Value], runs_dir: Path) -> frozenset[str]:
    """Fill the defaults that depend on other keys, and make paths absolute; returns the path
    keys that were relative."""
    for key in KEYS:
        if key.default_from and values[key.name] is None:
            values[key.name] = values[key.default_from]
    if values["SAVE_DIR"] is None and _is_safe_exp_id(values["EXP_ID"]):
        values["SAVE_DIR"] = str(runs_dir / str(values["EXP_ID"]) / "checkpoints")
    relative = set()
    for key in KEYS:
        if key.kind is Kind.PATH and values[key.name] is not None:
            given = Path(str(values[key.name])).expanduser()
            if not given.is_absolute():
                relative.add(key.name)
            values[key.name] = str(given.absolute())
    return frozenset(relative)


def _is_safe_exp_id(exp_id: Value) -> bool:
    """Whether EXP_ID is set and safe as a path (a bad one was reported by the constraints)."""
    try:
        check_exp_id(str(exp_id))
    except ConfigError:
        return False
    return exp_id is not None


def _check_model_type(values: dict[str, Value]) -> None:
    if values["MODEL_TYPE"] is not None and not _MODEL_TYPE.fullmatch(str(values["MODEL_TYPE"])):
        raise ConfigError(
            f"MODEL_TYPE={values['MODEL_TYPE']!r} is not a model script name",
            "use the file name without .sh from $SLIME_DIR/scripts/models/, e.g. qwen2.5-3B",
        )


#: the values check_variant computes with (each was reported if it did not convert)
_VARIANT_INPUTS = (
    "NUM_GPUS",
    "TP_SIZE",
    "ROLLOUT_GPUS_PER_ENGINE",
    "ROLLOUT_BATCH_SIZE",
    "N_SAMPLES_PER_PROMPT",
)


def check_variant(config: Config, variant: Variant) -> list[str]:
    """Check what one variant needs beyond the schema; fill ROLLOUT_NUM_GPUS for split GPUs.

    :param config: the resolved configuration (updated in place).
    :param variant: the script about to be rendered.
    :returns: warnings (keys the variant ignores).
    :raises ConfigError: the configuration cannot work with this variant.
    """
    c = config.values
    warnings: list[str] = []
    if any(c[name] is None for name in _VARIANT_INPUTS):
        return warnings  # a value that did not convert, already reported
    gpus = int(str(c["NUM_GPUS"]))
    nodes = int(str(c["NUM_NODES"]))
    if nodes > 1 and not variant.colocate:
        raise ConfigError(
            f"NUM_NODES={nodes} works with the colocated variants only (this one splits the GPUs)",
            "use --variant sync (colocated) for a multi-node run, or NUM_NODES=1",
        )
    if variant.colocate:
        for name in ("TP_SIZE", "ROLLOUT_GPUS_PER_ENGINE"):
            if gpus % int(str(c[name])):
                raise ConfigError(
                    f"NUM_GPUS={gpus} is not divisible by {name}={c[name]}",
                    f"choose a {name} that divides NUM_GPUS (e.g. 1, 2, 4 or 8 on an 8-GPU node)",
                )
        if c["ROLLOUT_NUM_GPUS"] is not None:
            warnings.append(
                "ROLLOUT_NUM_GPUS is ignored: this variant colocates training and rollout on all GPUs"
            )
        _check_global_batch(c, gpus * nodes)
        return warnings
    if c["ROLLOUT_NUM_GPUS"] is None:
        c["ROLLOUT_NUM_GPUS"] = max(gpus // 2, 1)
    rollout = int(str(c["ROLLOUT_NUM_GPUS"]))
    actor = gpus - rollout
    if actor < 1:
        raise ConfigError(
            f"ROLLOUT_NUM_GPUS={rollout} leaves no GPU for training (NUM_GPUS={gpus})",
            "train_async.py splits the GPUs: make ROLLOUT_NUM_GPUS smaller than NUM_GPUS",
        )
    parts = (
        ("training GPUs (NUM_GPUS - ROLLOUT_NUM_GPUS)", actor, "TP_SIZE"),
        ("ROLLOUT_NUM_GPUS", rollout, "ROLLOUT_GPUS_PER_ENGINE"),
    )
    for what, count, size in parts:
        if count % int(str(c[size])):
            raise ConfigError(
                f"{what}={count} is not divisible by {size}={c[size]}",
                "choose ROLLOUT_NUM_GPUS so that both parts divide evenly",
            )
    _check_global_batch(c, actor)
    return warnings


def global_batch_size(values: dict[str, Value]) -> int:
    """``--global-batch-size``: every episode of a rollout in one optimizer step.

    slime's split counts *rollouts* (episodes, ``Sample.rollout_id``) per optimizer step
    (``slime/utils/dp_schedule.py:100-104,135`` at fa3c990). Without the flag Megatron uses
    ``micro_batch_size * dp`` (``megatron/training/arguments.py:497-498`` at 1dcf0da), which
    would turn one rollout of ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT episodes into that
    many / dp optimizer steps instead of one GRPO update.

    :param values: the resolved configuration values.
    """
    return int(str(values["ROLLOUT_BATCH_SIZE"])) * int(str(values["N_SAMPLES_PER_PROMPT"]))


def _check_global_batch(c: dict[str, Value], actor_gpus: int) -> None:
    """Megatron asserts ``global_batch_size % (micro_batch_size * dp) == 0`` at start-up
    (slime ``megatron_utils/initialize.py:79-86`` at fa3c990 ->
    ``megatron/core/num_microbatches_calculator.py:340`` at 1dcf0da; micro batch size 1)."""
    dp = max(1, actor_gpus // int(str(c["TP_SIZE"])))
    episodes = global_batch_size(c)
    if episodes % dp:
        raise ConfigError(
            f"ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT = {episodes} episodes per rollout is not a "
            f"multiple of the data-parallel size {dp} (training GPUs {actor_gpus} / TP_SIZE {c['TP_SIZE']})",
            "Megatron needs --global-batch-size (one optimizer step per rollout) divisible by the "
            "data-parallel size: change ROLLOUT_BATCH_SIZE, N_SAMPLES_PER_PROMPT or TP_SIZE",
        )


def _unless_unset(check: Callable[[str], None], value: Value) -> None:
    """Run ``check`` on a value that is set (an unset required one is reported already)."""
    if value is not None:
        check(str(value))


def _check_over_sampling(c: dict[str, Value]) -> None:
    """slime asserts ``over_sampling_batch_size >= rollout_batch_size``; the cap must allow the
    extra groups the first fetch starts (the rollout refuses both at its first call, too late)."""
    if c["ROLLOUT_BATCH_SIZE"] is None:
        return  # its own problem is reported already
    target = int(str(c["ROLLOUT_BATCH_SIZE"]))
    fetch = int(str(c["OVER_SAMPLING_BATCH_SIZE"])) if c["OVER_SAMPLING_BATCH_SIZE"] is not None else target
    if fetch < target:
        raise ConfigError(
            f"OVER_SAMPLING_BATCH_SIZE={fetch} is below ROLLOUT_BATCH_SIZE={target}",
            "set OVER_SAMPLING_BATCH_SIZE to at least ROLLOUT_BATCH_SIZE (e.g. 25% more), or leave it unset",
        )
    cap = c["MAX_EXTRA_GROUPS"]
    if cap is not None and int(str(cap)) < fetch - target:
        raise ConfigError(
            f"MAX_EXTRA_GROUPS={cap} is below the {fetch - target} extra groups "
            f"OVER_SAMPLING_BATCH_SIZE={fetch} starts",
            "raise MAX_EXTRA_GROUPS or lower OVER_SAMPLING_BATCH_SIZE",
        )


def check_ray_tls_files_set(values: dict[str, Value]) -> None:
    """RAY_TLS needs its three files (Ray refuses to start without them, after a long wait).

    :param values: the converted settings.
    """
    names = ("RAY_TLS_CA_CERT", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY")
    missing = [name for name in names if values.get(name) is None]
    if values.get("RAY_TLS") and missing:
        raise ConfigError(
            f"RAY_TLS=true needs {', '.join(missing)}",
            "set each to a PEM file (docs/launcher.md, 'Ray security: tokens and TLS'), or RAY_TLS=false",
        )


def check_gateway_tls_pair(values: dict[str, Value]) -> None:
    """GATEWAY_TLS_CERT and GATEWAY_TLS_KEY go together (the gateway serves HTTPS with both).

    :param values: the converted settings.
    """
    cert, key = values.get("GATEWAY_TLS_CERT"), values.get("GATEWAY_TLS_KEY")
    if (cert is None) != (key is None):
        missing = "GATEWAY_TLS_KEY" if key is None else "GATEWAY_TLS_CERT"
        raise ConfigError(
            f"{'GATEWAY_TLS_CERT' if key is None else 'GATEWAY_TLS_KEY'} is set without {missing}",
            "set both (the certificate chain and its private key, PEM), or neither for plain HTTP",
        )


#: checks that relate keys to each other, run once every value converted
#: Ray's default worker ports (`ray start --min-worker-port/--max-worker-port`): a Ray port
#: inside them collides with a worker's port, and `ray start` fails with a traceback
RAY_WORKER_PORTS = range(10002, 20000)
_RAY_PORT_KEYS = ("RAY_PORT", "RAY_DASHBOARD_PORT", "RAY_CLIENT_SERVER_PORT", "RAY_DASHBOARD_AGENT_PORT")
_UNEXPANDED = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def _check_ray_ports(values: dict[str, Value]) -> None:
    inside = [
        f"{name}={values[name]}"
        for name in _RAY_PORT_KEYS
        if isinstance(values.get(name), int) and values[name] in RAY_WORKER_PORTS
    ]
    if inside:
        raise ConfigError(
            f"{', '.join(inside)} is inside Ray's worker port range "
            f"{RAY_WORKER_PORTS.start}-{RAY_WORKER_PORTS.stop - 1}: `ray start` would fail",
            "choose a port below 10002 or above 19999 (the defaults are 6379, 8265, 10001, 52365)",
        )


def _check_gateway_ports(values: dict[str, Value]) -> None:
    """Process i of the gateway listens on GATEWAY_PORT + i: the last one must be a port."""
    first, setting = values.get("GATEWAY_PORT"), values.get("GATEWAY_PROCESSES")
    if not isinstance(first, int) or not first or not isinstance(setting, int):
        return
    processes = setting or MAX_AUTO_PROCESSES  # auto: at most this many, decided on the node
    if first + processes - 1 > 65535:
        raise ConfigError(
            f"GATEWAY_PORT={first} with {processes} gateway processes (GATEWAY_PROCESSES={setting}) "
            f"would need ports up to {first + processes - 1}",
            "choose a GATEWAY_PORT that leaves room for one port per process, or GATEWAY_PORT=0",
        )


def _check_unexpanded(values: dict[str, Value]) -> None:
    """A path holding ``$HOME`` or ``${VAR}`` of the process environment: values are data."""
    for key in KEYS:
        value = values.get(key.name)
        if key.kind is Kind.PATH and isinstance(value, str) and (found := _UNEXPANDED.search(value)):
            raise ConfigError(
                f"{key.name}={value!r}: {found.group(0)} is not expanded: env-file values are data, and "
                "${NAME} refers only to a key set earlier in the same file",
                f"write the path out ({found.group(0)} -> its value), or use ~ for your home directory",
            )


_CONSTRAINTS: tuple[Callable[[dict[str, Value]], None], ...] = (
    lambda values: _unless_unset(check_exp_id, values["EXP_ID"]),
    lambda values: _unless_unset(check_bucket, values["S3_BUCKET"]),
    lambda values: check_agent(values["AGENT_RUNTIME_ARN"], values["AGENT_URL"]),
    _check_model_type,
    _check_over_sampling,
    check_ray_tls_files_set,
    check_gateway_tls_pair,
    _check_ray_ports,
    _check_gateway_ports,
    _check_unexpanded,
)


#: folders whose content one node cannot share with another
_NODE_LOCAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def node_local_paths(config: Config, repo: Path, run_dir: Path) -> list[str]:
    """Multi-node runs: the paths every worker must see that look node-local, as warnings.

    :param config: the resolved configuration.
    :param repo: the toolkit checkout (the job's PYTHONPATH and join.sh's home).
    :param run_dir: runs/<EXP_ID>/ (join.sh and toolkit.yaml live there).
    """
    if int(str(config["NUM_NODES"])) < 2:
        return []
    paths = [(name, config[name]) for name in ("MODEL_DIR", "DATA_PATH", "VAL_DATA_PATH", "SAVE_DIR")]
    paths += [("the toolkit", str(repo)), ("the run directory", str(run_dir))]
    return [
        f"{name} {path} looks node-local (under {top}); every node must see it at the same path "
        "(use a shared file system, or copy it to every worker)"
        for name, path in paths
        if path is not None
        for top in _NODE_LOCAL_DIRS
        if str(path) == top or str(path).startswith(top + "/")
    ]


def missing_paths(config: Config) -> list[ConfigError]:
    """The files and directories a real run needs that do not exist.

    :param config: the resolved configuration.
    """
    slime = Path(str(config["SLIME_DIR"]))
    needed: list[tuple[str, Path, str]] = [
        ("MODEL_DIR", Path("config.json"), "an HF model directory"),
        ("DATA_PATH", Path(), "the training JSONL"),
        ("SLIME_DIR", Path("train.py"), "a slime checkout"),
        ("MODEL_TYPE", Path(), "a slime model script"),
        ("MEGATRON_DIR", Path(), "a Megatron-LM checkout"),
        ("VAL_DATA_PATH", Path(), "the validation JSONL"),
        ("CUDA_HOME", Path(), "a CUDA toolkit directory"),
    ]
    problems = []
    for name, inside, what in needed:
        if config[name] is None:
            continue  # unset, or a bad value reported already
        if name == "MODEL_TYPE":
            base = slime / "scripts" / "models" / f"{config[name]}.sh"
        else:
            base = Path(str(config[name]))
        path = base / inside
        if name in ("DATA_PATH", "VAL_DATA_PATH") and path.is_dir():
            jsonl = sorted(p.name for p in path.glob("*.jsonl"))[:3]
            hint = f" (it holds {', '.join(jsonl)})" if jsonl else ""
            problems.append(
                ConfigError(f"{name}: {path} is a directory, not a file", f"name {what} itself{hint}")
            )
        elif name == "MODEL_DIR" and base.is_file():
            problems.append(ConfigError(f"MODEL_DIR: {base} is a file, not the model's folder",
                                        f"name the folder that holds it: MODEL_DIR={base.parent}"))
        elif not path.exists():
            if name == "MODEL_TYPE":
                what += _closest_model_script(slime / "scripts" / "models", str(config[name]))
            if name == "MODEL_DIR":
                what += _hf_cache_hint(base)
            if name in config.relative:
                what += (
                    f"; {name} was a relative path, taken from the current directory {Path.cwd()}, "
                    "not the env file's folder: write it absolute, or run from that folder"
                )
            problems.append(ConfigError(f"{name}: {path} does not exist", f"expected {what}"))
    return problems


def _hf_cache_hint(model_dir: Path) -> str:
    """``; this is a Hugging Face cache entry: use <snapshot>`` when ``model_dir`` is the
    ``models--org--name`` folder (or its ``snapshots``) of an HF cache, whose files live in
    ``snapshots/<commit hash>/``."""
    snapshots = model_dir / "snapshots" if (model_dir / "snapshots").is_dir() else model_dir
    if snapshots.name != "snapshots":
        return ""
    found = sorted(p for p in snapshots.glob("*") if (p / "config.json").exists())
    if not found:
        return "; this is a Hugging Face cache folder: MODEL_DIR is its snapshots/<commit hash> folder"
    return f"; this is a Hugging Face cache folder: use MODEL_DIR={found[-1]}"


def _closest_model_script(models: Path, model_type: str) -> str:
    """``: did you mean X?`` for the slime model script nearest to ``model_type`` (a different
    case counts as nearest), or nothing when there is none or no models directory."""
    try:
        names = sorted(p.name.removesuffix(".sh") for p in models.glob("*.sh"))
    except OSError:
        return ""
    same_but_case = [name for name in names if name.lower() == model_type.lower()]
    close = same_but_case or difflib.get_close_matches(model_type, names, n=1, cutoff=0.6)
    return f"; did you mean MODEL_TYPE={close[0]}?" if close else ""


#: slime flags that EXTRA_FLAGS and the flags after ``--`` must not carry, and why. Each one
#: would be silently overridden by toolkit.yaml (applied after slime parses its flags), or
#: would make the rollout fail only after Ray and SGLang are up.
_FLAGS_OWNED_ELSEWHERE = {
    "--sglang-tool-call-parser": (
        "set SGLANG_TOOL_CALL_PARSER in the env file instead: toolkit.yaml carries it to both SGLang "
        "and the gateway and would override this flag"
    ),
    "--sglang-reasoning-parser": (
        "set SGLANG_REASONING_PARSER in the env file instead: toolkit.yaml carries it to both SGLang "
        "and the gateway and would override this flag"
    ),
    "--custom-config-path": (
        "bin/train passes runs/<EXP_ID>/toolkit.yaml; the rollout reads its settings there"
    ),
    "--rollout-function-path": "the toolkit's rollout function is what runs the agents; remove the flag",
    "--custom-reward-post-process-path": (
        "the toolkit normalizes one reward per episode; use REWARD_POSTPROCESSING=identity for raw rewards"
    ),
    "--reward-key": "the rollout reads the agent's numeric `rewards`; a reward key is not supported",
    "--over-sampling-batch-size": (
        "set OVER_SAMPLING_BATCH_SIZE in the env file instead "
        "(it is checked against ROLLOUT_BATCH_SIZE and MAX_EXTRA_GROUPS)"
    ),
    "--custom-generate-function-path": (
        "the agent talks to the policy itself; the rollout has no generate function"
    ),
    "--custom-rm-path": "the reward is the one the agent writes to S3; remove the flag",
    "--rm-type": "the reward is the one the agent writes to S3; remove the flag",
    "--group-rm": "the reward is the one the agent writes to S3; remove the flag",
    "--rollout-sample-filter-path": "not called by the agent rollout; use --dynamic-sampling-filter-path",
    "--rollout-all-samples-process-path": "not called by the agent rollout; remove the flag",
    "--rollout-sample-hook-path": (
        "slime (v0.3.1 on) applies sample hooks only in its default rollout: the agent rollout "
        "would skip them silently; remove the flag"
    ),
    "--mask-offpolicy-in-partial-rollout": (
        "aborted agent episodes restart from their prompt, nothing off-policy is kept: remove the flag"
    ),
    "--sglang-enable-return-routed-experts": (
        "slime owns this engine flag and ignores it here: --use-rollout-routing-replay starts every "
        "engine with --enable-return-routed-experts (and the gateway asks for the routed experts)"
    ),
}


#: slime's --advantage-estimator choices at fa3c990 (slime/utils/arguments.py:908-918); the
#: reward hook computes slime's own reward normalization for each (rewards.py)
ADVANTAGE_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")


#: slime flags the toolkit renders from an env key: a second copy in EXTRA_FLAGS or after
#: ``--`` would silently win (argparse keeps the last), so the env key is the one place to set
#: it. tests/python/settings/test_validate.py checks this table against the render.
FLAGS_OWNED_BY_KEYS = {
    "--hf-checkpoint": "MODEL_DIR",
    "--ref-load": "MODEL_DIR",
    "--save": "SAVE_DIR",
    "--save-interval": "SAVE_INTERVAL",
    "--save-hf": "SAVE_HF",
    "--prompt-data": "DATA_PATH",
    "--num-rollout": "NUM_ROLLOUT",
    "--rollout-batch-size": "ROLLOUT_BATCH_SIZE",
    "--n-samples-per-prompt": "N_SAMPLES_PER_PROMPT",
    "--rollout-max-response-len": "ROLLOUT_MAX_RESPONSE_LEN",
    "--rollout-temperature": "ROLLOUT_TEMPERATURE",
    "--eval-prompt-data": "VAL_DATA_PATH",
    "--eval-interval": "EVAL_INTERVAL",
    "--n-samples-per-eval-prompt": "N_SAMPLES_PER_EVAL_PROMPT",
    "--eval-temperature": "EVAL_TEMPERATURE",
    "--eval-max-response-len": "EVAL_MAX_RESPONSE_LEN",
    "--tensor-model-parallel-size": "TP_SIZE",
    "--max-tokens-per-gpu": "MAX_TOKENS_PER_GPU",
    "--eps-clip": "EPS_CLIP",
    "--eps-clip-high": "EPS_CLIP_HIGH",
    "--lr": "LR",
    "--weight-decay": "WEIGHT_DECAY",
    "--adam-beta2": "ADAM_BETA2",
    "--rollout-num-gpus-per-engine": "ROLLOUT_GPUS_PER_ENGINE",
    "--sglang-data-parallel-size": "SGLANG_DATA_PARALLEL_SIZE",
    "--sglang-mem-fraction-static": "SGLANG_MEM_FRACTION_STATIC",
    "--sglang-context-length": "SGLANG_CONTEXT_LENGTH",
    "--num-gpus-per-node": "NUM_GPUS",
    "--actor-num-gpus-per-node": "NUM_GPUS",
    "--actor-num-nodes": "NUM_NODES",
    "--rollout-num-gpus": "ROLLOUT_NUM_GPUS",
    "--wandb-project": "WANDB_PROJECT",
    "--wandb-group": "WANDB_GROUP",
}


def check_slime_flags(words: list[str], config: Config | None = None) -> None:
    """Raise every problem :func:`slime_flag_problems` finds.

    :param words: the pass-through flags, in order.
    :param config: the resolved configuration (see :func:`slime_flag_problems`).
    """
    raise_all(slime_flag_problems(words, config))


def slime_flag_problems(words: list[str], config: Config | None = None) -> list[ConfigError]:
    """The pass-through slime flags (EXTRA_FLAGS, flags after ``--``) that cannot work.

    :param words: the pass-through flags, in order.
    :param config: the resolved configuration (the rollout's episode count; without it the
        ``--global-batch-size`` check is skipped).
    :returns: one problem for a flag that carries a secret, and one per flag the toolkit owns,
        per flag an env key sets (named with that key), per ``--rollout-top-p`` other than 1
        (the rollout does not replay SGLang's top-p token sets, which slime's loss then
        needs), ``--log-passrate``, an ``--advantage-estimator`` slime does not know, and a
        ``--global-batch-size`` that does not divide the rollout.
    """
    problems: list[ConfigError] = []
    _collect(problems, refuse_secret_flags, words)
    for position, word in enumerate(words):
        _collect(problems, _check_one_flag, words, position, word, config)
    return problems


def _check_one_flag(words: list[str], position: int, word: str, config: Config | None) -> None:
    flag, _, inline = word.partition("=")
    value = inline if inline else (words[position + 1] if position + 1 < len(words) else "")
    if flag in _FLAGS_OWNED_ELSEWHERE:
        raise ConfigError(f"{flag} in EXTRA_FLAGS or after --", _FLAGS_OWNED_ELSEWHERE[flag])
    if flag in FLAGS_OWNED_BY_KEYS:
        key = FLAGS_OWNED_BY_KEYS[flag]
        raise ConfigError(
            f"{flag} in EXTRA_FLAGS or after -- duplicates the env key {key}",
            f"set {key} in the env file (or --set {key}=...) and remove the flag: bin/train "
            f"renders {flag} from {key}, and a second copy would silently win",
        )
    if flag == "--log-passrate":
        raise ConfigError("--log-passrate in EXTRA_FLAGS or after -- is not supported", LOG_PASSRATE_HOW)
    if flag == "--rollout-top-p":
        _check_top_p(value)
    if flag == "--advantage-estimator" and value not in ADVANTAGE_ESTIMATORS:
        raise ConfigError(
            f"--advantage-estimator {value} in EXTRA_FLAGS or after --",
            f"slime knows {', '.join(ADVANTAGE_ESTIMATORS)}",
        )
    if flag == "--global-batch-size" and config is not None and None not in _batch_inputs(config):
        check_global_batch_divides(_to_int_or_zero(value), global_batch_size(config.values))


def _batch_inputs(config: Config) -> tuple[Value, Value]:
    return config["ROLLOUT_BATCH_SIZE"], config["N_SAMPLES_PER_PROMPT"]


def _to_int_or_zero(text: str) -> int:
    return int(text) if re.fullmatch(r"\d+", text) else 0


def _check_top_p(value: str) -> None:
    try:
        top_p = float(value)
    except ValueError:
        top_p = math.nan
    if top_p != 1.0:
        raise ConfigError(
            f"--rollout-top-p {value} in EXTRA_FLAGS or after --",
            "the rollout does not replay SGLang's top-p token sets, which slime's loss needs "
            "when top-p is not 1: keep --rollout-top-p 1.0",
        )
