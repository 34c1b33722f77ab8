"""Render the run directory: the bash script (train.sh), toolkit.yaml and the resolved env.

The slime command line is built here as data (groups of flag lines), so the rendered
script, ``--dry-run``'s printout and the tests all see the same flags. Every value that
reaches the script goes through the ``q`` filter (:func:`shlex.quote`); JSON is built with
:func:`json.dumps` (at run time, by the script, where it depends on the environment).
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ..settings.schema import AUTO, KEYS, NONE, Kind, Value, is_secret, rollout_keys
from ..settings.validate import Config, global_batch_size
from ..settings.variants import TEMPLATE, VARIANTS, Variant
from . import library

logger = logging.getLogger(__name__)

ROLLOUT_FUNCTION = "agentcore_slime.rollout.generate_rollout"
REWARD_POST_PROCESS = "agentcore_slime.rewards.normalize_episode_rewards"
SGLANG_CUDA_GRAPH_MAX_BS = 32
#: passed as --megatron-to-hf-mode only to a slime that has the flag (fa3c990: bridge mode is what
#: loads the HF --ref-load; later slimes removed the flag and load it natively)
MEGATRON_TO_HF_MODE = "bridge"

#: placeholders in :attr:`Rendered.slime_argv` for the flags the script computes at run time;
#: STACK_ARGS are the flags whose name or presence depends on the slime and SGLang installed
#: (templates/lib/slime.sh)
RUNTIME_WORDS = (
    "${MODEL_ARGS[@]}",
    "${STACK_ARGS[@]}",
    "${WANDB_ARGS[@]}",
    "${RESUME_ARGS[@]}",
    "${TRAIN_ENV_ARGS[@]}",
)


@dataclass
class RunPaths:
    """Where the run's files live and what the script needs to know about this checkout.

    :param repo: the toolkit checkout (its python/ goes on the job's PYTHONPATH).
    :param run_dir: runs/<EXP_ID>/ (or a temporary directory for --dry-run).
    :param env_file: the env file as the user named it.
    :param command: the bin/train command line that rendered the files (for the header).
    """

    repo: Path
    run_dir: Path
    env_file: str
    command: str


@dataclass
class Rendered:
    """The rendered files (name -> text) and the slime command line they run.

    :param files: file name inside the run directory -> content.
    :param slime_argv: python3 train.py and its flags; MODEL_ARGS is a placeholder word.
    """

    files: dict[str, str]
    slime_argv: list[str] = field(default_factory=list)


def shell_quote(value: object) -> str:
    """Quote ``value`` as one bash word that expands to exactly its text.

    :func:`shlex.quote` does the work; text with a newline, control character, ``$`` or
    backtick is written as ANSI-C ``$'...'`` instead, so it stays on one line and ShellCheck
    does not mistake the literal for an expansion.

    :param value: any value; ``str()`` of it is quoted.
    """
    text = str(value)
    if not any(ch in text for ch in "$`") and all(ch.isprintable() for ch in text):
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch in _ANSI_C:
            out.append(_ANSI_C[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


_ANSI_C = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _yaml_scalar(value: Value) -> str:
    """One YAML scalar on one line: strings double-quoted, the rest typed."""
    style = '"' if isinstance(value, str) else None
    text = yaml.safe_dump(value, default_style=style, allow_unicode=True, width=2**31)
    return text.removesuffix("\n").removesuffix("\n...")


def _environment(templates: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = shell_quote
    env.filters["yaml"] = _yaml_scalar
    # where scripts/library.py puts the library's functions (never parsed as Jinja: bash's
    # ${#a[@]} is Jinja syntax) and the names of the script's Python helpers
    env.globals["library_marker"] = library.MARKER
    env.globals["helpers_marker"] = library.HELPERS_MARKER.removesuffix("\n")
    return env


def script_files(name: str, text: str, templates: Path) -> dict[str, str]:
    """A rendered template as the files of the run directory: the script (the library's
    functions it calls linked in) and the Python helpers it runs, written beside it.

    :param name: the script's file name (train.sh, join.sh, eval.sh).
    :param text: the rendered template.
    :param templates: the templates/ directory.
    """
    script, helpers = library.finish(text, templates / "lib")
    return {name: script, **helpers}


def _num(value: Value) -> str:
    """A number as slime's argparse expects it (floats keep their exponent form)."""
    return repr(value) if isinstance(value, float) else str(value)


def flag_groups(config: Config, run_dir: Path, variant: Variant) -> list[tuple[str, list[list[str]]]]:
    """The static slime flags, grouped as in slime's own scripts; one inner list per line.

    Run-time groups (MODEL_ARGS, the slime stack's flags, wandb, --train-env-vars) are added by
    the script itself.

    :param config: the resolved configuration.
    :param run_dir: the run directory (for --custom-config-path).
    :param variant: the script being rendered (colocated or split GPUs).
    """
    c = config.values
    save_dir = str(c["SAVE_DIR"])
    ckpt = [
        ["--hf-checkpoint", str(c["MODEL_DIR"])],
        ["--ref-load", str(c["MODEL_DIR"])],
        ["--save", save_dir],
        ["--save-interval", _num(c["SAVE_INTERVAL"])],
    ]
    if c["SAVE_HF"]:
        ckpt.append(["--save-hf", f"{save_dir}/hf/{{rollout_id}}"])
    rollout = [
        ["--prompt-data", str(c["DATA_PATH"])],
        ["--input-key", "prompt"],
        ["--num-rollout", _num(c["NUM_ROLLOUT"])],
        ["--rollout-batch-size", _num(c["ROLLOUT_BATCH_SIZE"])],
        ["--n-samples-per-prompt", _num(c["N_SAMPLES_PER_PROMPT"])],
        ["--global-batch-size", str(global_batch_size(c))],
        ["--rollout-max-response-len", _num(c["ROLLOUT_MAX_RESPONSE_LEN"])],
        ["--rollout-temperature", _num(c["ROLLOUT_TEMPERATURE"])],
    ]
    if c["OVER_SAMPLING_BATCH_SIZE"] is not None:
        rollout.append(["--over-sampling-batch-size", _num(c["OVER_SAMPLING_BATCH_SIZE"])])
    groups: list[tuple[str, list[list[str]]]] = [("CKPT_ARGS", ckpt), ("ROLLOUT_ARGS", rollout)]
    if c["VAL_DATA_PATH"] is not None:
        val = Path(str(c["VAL_DATA_PATH"]))
        groups.append(
            (
                "EVAL_ARGS",
                [
                    ["--eval-prompt-data", val.stem or "val", str(val)],
                    ["--eval-interval", _num(c["EVAL_INTERVAL"])],
                    ["--eval-input-key", "prompt"],
                    ["--n-samples-per-eval-prompt", _num(c["N_SAMPLES_PER_EVAL_PROMPT"])],
                    ["--eval-temperature", _num(c["EVAL_TEMPERATURE"])],
                    ["--eval-max-response-len", _num(c["EVAL_MAX_RESPONSE_LEN"])],
                ],
            )
        )
    groups += [
        (
            "PERF_ARGS",
            [
                ["--tensor-model-parallel-size", _num(c["TP_SIZE"])],
                ["--sequence-parallel"],
                ["--use-dynamic-batch-size"],
                ["--max-tokens-per-gpu", _num(c["MAX_TOKENS_PER_GPU"])],
            ],
        ),
        (
            "GRPO_ARGS",
            [
                ["--advantage-estimator", "grpo"],
                ["--use-kl-loss"],
                ["--kl-loss-coef", "0.00"],
                ["--kl-loss-type", "low_var_kl"],
                ["--entropy-coef", "0.00"],
                ["--eps-clip", _num(c["EPS_CLIP"])],
                ["--eps-clip-high", _num(c["EPS_CLIP_HIGH"])],
            ],
        ),
        (
            "OPTIMIZER_ARGS",
            [
                ["--optimizer", "adam"],
                ["--lr", _num(c["LR"])],
                ["--lr-decay-style", "constant"],
                ["--weight-decay", _num(c["WEIGHT_DECAY"])],
                ["--adam-beta1", "0.9"],
                ["--adam-beta2", _num(c["ADAM_BETA2"])],
                ["--optimizer-cpu-offload"],
                ["--overlap-cpu-optimizer-d2h-h2d"],
                ["--use-precision-aware-optimizer"],
            ],
        ),
        ("SGLANG_ARGS", _sglang_flags(c)),
        ("MISC_ARGS", _misc_flags(c, variant)),
        (
            "TOOLKIT_ARGS",
            [
                ["--rollout-function-path", ROLLOUT_FUNCTION],
                ["--custom-reward-post-process-path", REWARD_POST_PROCESS],
                ["--custom-config-path", str(run_dir / "toolkit.yaml")],
            ],
        ),
    ]
    return groups


def _misc_flags(c: dict[str, Value], variant: Variant) -> list[list[str]]:
    gpus = int(str(c["NUM_GPUS"]))
    nodes = int(str(c["NUM_NODES"]))
    flags = [
        ["--attention-dropout", "0.0"],
        ["--hidden-dropout", "0.0"],
        ["--accumulate-allreduce-grads-in-fp32"],
        ["--attention-softmax-in-fp32"],
        ["--attention-backend", "flash"],
        ["--num-gpus-per-node", str(gpus)],
        ["--actor-num-nodes", str(nodes)],
    ]
    if variant.colocate:
        flags += [["--actor-num-gpus-per-node", str(gpus)], ["--colocate"]]
        if nodes > 1:
            # every GPU of every node serves rollouts too (slime's default is the same count;
            # explicit so that the multi-node layout is visible in train.sh)
            flags.append(["--rollout-num-gpus", str(nodes * gpus)])
    else:
        rollout = int(str(c["ROLLOUT_NUM_GPUS"]))
        flags += [["--actor-num-gpus-per-node", str(gpus - rollout)], ["--rollout-num-gpus", str(rollout)]]
    # after --rollout-num-gpus, never before: slime's pre-parser of the engine size (a parser of
    # --rollout-num-gpus-per-engine alone, argparse's allow_abbrev on) reads --rollout-num-gpus
    # as an abbreviation of it; placed last, the exact flag's value is the one that stays
    # (tests/python/scripts/test_slime_prefixes.py)
    flags.append(["--rollout-num-gpus-per-engine", _num(c["ROLLOUT_GPUS_PER_ENGINE"])])
    return flags


def _sglang_flags(c: dict[str, Value]) -> list[list[str]]:
    flags = [
        ["--sglang-data-parallel-size", _num(c["SGLANG_DATA_PARALLEL_SIZE"])],
        ["--sglang-mem-fraction-static", _num(c["SGLANG_MEM_FRACTION_STATIC"])],
        ["--sglang-log-level", "error"],
    ]
    for name, flag in (
        ("SGLANG_TOOL_CALL_PARSER", "--sglang-tool-call-parser"),
        ("SGLANG_REASONING_PARSER", "--sglang-reasoning-parser"),
    ):
        if c[name] not in (None, NONE, AUTO):  # auto: the gateway chooses from the model; it parses,
            flags.append([flag, str(c[name])])  # SGLang's /generate does not
    if c["SGLANG_CONTEXT_LENGTH"] is not None:
        flags.append(["--sglang-context-length", _num(c["SGLANG_CONTEXT_LENGTH"])])
    return flags


def passthrough_flags(config: Config, cli_flags: list[str]) -> list[str]:
    """The flags appended verbatim to slime's command line: EXTRA_FLAGS, then those after ``--``.

    :param config: the resolved configuration.
    :param cli_flags: the flags after ``--`` on the bin/train command line.
    """
    extra = config["EXTRA_FLAGS"]
    return (list(extra) if isinstance(extra, list) else []) + list(cli_flags)


def env_text(config: Config) -> str:
    """``runs/<EXP_ID>/env``: every resolved value as a dotenv file (secrets never appear).

    Values are single-quoted for python-dotenv, so ``bin/train runs/<EXP_ID>/env`` reproduces
    the run. Unset optional keys are written as comments.

    :param config: the resolved configuration.
    """
    lines = ["# Every value bin/train resolved for this run (defaults included). Secrets never appear here."]
    for key in KEYS:
        if is_secret(key.name):
            continue
        value = config[key.name]
        if value is None:
            lines.append(f"# {key.name}=  (unset)")
            continue
        if key.kind is Kind.WORDS:
            text = shlex.join(value) if isinstance(value, list) else str(value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = _num(value)
        escaped = text.replace("\\", "\\\\").replace("'", "\\'")
        lines.append(f"{key.name}='{escaped}'")
    return "\n".join(lines) + "\n"


def render(config: Config, paths: RunPaths, variant: str, cli_flags: list[str], templates: Path) -> Rendered:
    """Render every file of the run directory.

    :param config: the resolved configuration.
    :param paths: run directory, repo and provenance.
    :param variant: a key of :data:`VARIANTS`.
    :param cli_flags: flags after ``--`` on the bin/train command line (appended last).
    :param templates: the templates/ directory.
    """
    env = _environment(templates)
    chosen = VARIANTS[variant]
    groups = flag_groups(config, paths.run_dir, chosen)
    extra = passthrough_flags(config, cli_flags)
    c = config.values
    context = {
        "c": c,
        "groups": groups,
        "extra": extra,
        "paths": paths,
        "template": f"templates/{TEMPLATE}",
        "multi_node": int(str(c["NUM_NODES"])) > 1,
        "uses_ray": True,
        "variant": chosen,
        "summary": chosen.summary.format(exp_id=c["EXP_ID"]),
        "script_name": chosen.script,
        "usage_args": "[--print-command]",
        "prints_command": True,
        "log_name": chosen.script.removesuffix(".sh") + ".log",
        "job_pythonpath": f"{c['MEGATRON_DIR']}:{paths.repo / 'python'}",
        "wandb_group": c["WANDB_GROUP"] if c["WANDB_GROUP"] is not None else c["EXP_ID"],
        "yaml_keys": [(key.yaml_key, c[key.name]) for key in rollout_keys()],
        "megatron_to_hf_mode": MEGATRON_TO_HF_MODE,
        "sglang_cuda_graph_max_bs": SGLANG_CUDA_GRAPH_MAX_BS,
    }
    files = {
        **script_files(chosen.script, env.get_template(TEMPLATE).render(context), templates),
        "toolkit.yaml": env.get_template("toolkit.yaml.j2").render(context),
        "env": env_text(config),
    }
    if context["multi_node"]:
        join = env.get_template("join.sh.j2").render(
            context,
            template="templates/join.sh.j2",
            script_name="join.sh",
            usage_args="HEAD_IP:PORT",
            prints_command=False,
            summary=f"join the Ray head of {c['EXP_ID']} as a worker node (NUM_NODES={c['NUM_NODES']})",
        )
        files.update(script_files("join.sh", join, templates))
    argv = ["python3", f"{c['SLIME_DIR']}/{chosen.entry}", RUNTIME_WORDS[0]]
    for _, lines in groups:
        for line in lines:
            argv += line
    argv += RUNTIME_WORDS[1:]
    return Rendered(files, argv + extra)
