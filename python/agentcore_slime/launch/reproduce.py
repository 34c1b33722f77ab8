"""What reproduces a run: the whole bin/train invocation, and a manifest of what else decides it.

bin/train writes two records into ``runs/<EXP_ID>/`` beside the rendered script:

- ``invocation.json``: the variant, the flags after ``--``, the command line and the env file as
  the user named them. Given back the run's own ``env`` (``bin/train runs/<EXP_ID>/env``, or the
  run directory itself), bin/train takes the variant and the flags from here, and the header
  lines too, so the script it renders is the one that ran, byte for byte, while the toolkit's
  commit is the same.
- ``manifest.json``: the toolkit's, slime's and Megatron-LM's commits, the slime stack this node
  has (slime, SGLang, and the flags train.sh chooses for them: :mod:`..scripts.stack`), content
  hashes of the data files and of the model's config and tokenizer files, the seeds slime is
  given and the agent. A re-render compares it with what it finds now and names every difference.

Only the standard library: this runs in bin/train before anything else is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..scripts.stack import read_stack
from ..settings.errors import ConfigError
from ..settings.validate import Config

INVOCATION = "invocation.json"
MANIFEST = "manifest.json"
#: files of a Hugging Face model directory that decide its tokens and its shape
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)
#: a commit or a content hash (what :func:`_short` cuts)
_HASH = re.compile(r"[0-9a-f]{40,}")
#: slime's seed flags and the defaults slime uses when they are not given (arguments.py)
SEED_FLAGS = {"--seed": "1234", "--rollout-seed": "42"}


@dataclass(frozen=True)
class Invocation:
    """How bin/train was called, as far as it decides the rendered files.

    :param variant: the ``--variant`` (a key of VARIANTS).
    :param slime_flags: the flags after ``--``, verbatim.
    :param command: the whole command line, shell-quoted (the scripts' header shows it).
    :param env_file: the env file as the user named it (the header shows it).
    """

    variant: str
    slime_flags: list[str]
    command: str
    env_file: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def run_dir_of(env_file: Path) -> Path | None:
    """The run directory ``env_file`` names, when it is a run's own record of its settings:
    the run directory itself, or its ``env``, beside an ``invocation.json``."""
    candidate = env_file if env_file.is_dir() else env_file.parent
    if env_file.is_dir() or env_file.name == "env":
        if (candidate / INVOCATION).is_file() and (candidate / "env").is_file():
            return candidate
    return None


def read_invocation(run_dir: Path) -> Invocation:
    """The recorded invocation of a run.

    :raises ConfigError: the record is unreadable or malformed.
    """
    path = run_dir / INVOCATION
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Invocation(
            variant=str(data["variant"]),
            slime_flags=[str(flag) for flag in data["slime_flags"]],
            command=str(data["command"]),
            env_file=str(data["env_file"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot read {path}: {exc}",
            f"restore it, or render from the original env file instead of {run_dir / 'env'}",
        ) from exc


def _sha256(path: Path) -> str | None:
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


def _git_commit(directory: object) -> str | None:
    """The checkout's HEAD, with ``+dirty`` when tracked files have changes; None if not a checkout."""
    if not directory or not Path(str(directory)).is_dir():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _seeds(slime_argv: list[str]) -> dict[str, str]:
    """slime's seeds: the last value given on the command line, or slime's default."""
    seeds = {flag: f"{default} (slime's default)" for flag, default in SEED_FLAGS.items()}
    for index, word in enumerate(slime_argv):
        flag, _, inline = word.partition("=")
        if flag in SEED_FLAGS:
            value = inline if inline else (slime_argv[index + 1] if index + 1 < len(slime_argv) else "")
            seeds[flag] = value
    return seeds


def slime_stack(config: Config, repo: Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The slime stack as train.sh will find it on this node: slime's commit (or version), the
    SGLang version of python3 and the flags chosen for them (``flags``, as train.sh adds them);
    ``error`` instead when it cannot be read here (train.sh then stops before anything starts).

    :param config: the resolved configuration (SLIME_DIR).
    :param repo: the toolkit's checkout (templates/lib/slime.sh).
    :param environ: the environment train.sh will have (default: this process's).
    """
    found = read_stack(repo, str(config["SLIME_DIR"]), os.environ if environ is None else environ)
    if found.error:
        return {"error": found.error}
    return {"slime": found.slime, "sglang": found.sglang, "flags": shlex.join(found.args)}


def build_manifest(
    config: Config, repo: Path, slime_argv: list[str], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Everything besides the settings that decides what a run does, as found now.

    :param config: the resolved configuration.
    :param repo: the toolkit's checkout.
    :param slime_argv: slime's whole command line (the seeds are read from it).
    :param environ: the environment train.sh will have (default: this process's).
    """
    model_dir = Path(str(config["MODEL_DIR"]))
    data = {key: _sha256(Path(str(config[key]))) for key in ("DATA_PATH", "VAL_DATA_PATH") if config[key]}
    return {
        "toolkit_commit": _git_commit(repo),
        "slime_commit": _git_commit(config["SLIME_DIR"]),
        "megatron_commit": _git_commit(config["MEGATRON_DIR"]),
        "slime_stack": slime_stack(config, repo, environ),
        "data_sha256": data,
        "model_sha256": {
            name: _sha256(model_dir / name) for name in MODEL_FILES if (model_dir / name).is_file()
        },
        "seeds": _seeds(slime_argv),
        "agent": config["AGENT_RUNTIME_ARN"] or config["AGENT_URL"],
    }


def manifest_json(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The manifest recorded for a run (None when there is none or it is unreadable)."""
    try:
        data = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def manifest_changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """One line per field that differs between the recorded manifest and today's, e.g.
    ``toolkit_commit: 1a2b... -> 3c4d...`` (``none`` where a value is missing)."""
    before, after = _flatten(dict(recorded)), _flatten(dict(now))
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old != new:
            lines.append(f"{key}: {_short(old)} -> {_short(new)}")
    return lines


def _short(value: Any) -> str:
    """A value for one line: hashes and commits cut to 12 characters (keeping ``+dirty``)."""
    if value is None:
        return "none"
    text = str(value)
    head, plus, rest = text.partition("+")
    if not _HASH.fullmatch(head):  # text such as the stack's flags or an agent ARN stays whole
        return text
    return head[:12] + plus + rest


def repeat_command(prog: str, own_argv: list[str], slime_flags: list[str], drop: str, add: str) -> str:
    """The invocation again, with the mode flag ``drop`` replaced by ``add`` (for hints).

    :param own_argv: bin/train's own arguments as given (before ``--``).
    :param slime_flags: the flags after ``--``.
    """
    words = [add if word == drop else word for word in own_argv]
    if add not in words:
        words.insert(0, add)
    tail = ["--", *slime_flags] if slime_flags else []
    return shlex.join([prog, *words, *tail])
