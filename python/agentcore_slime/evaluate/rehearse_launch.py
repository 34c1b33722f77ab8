"""``bin/eval --rehearse``'s launcher half: check the inputs, make the results directory, exec.

Runs on bin/train's python (jinja2, pyyaml, python-dotenv) after the env file is validated like
any bin/eval's: the data and the model's tokenizer must exist (exit 2 otherwise, before anything
starts); ``runs/<EXP_ID>/rehearsal/<UTC time>[-N]/`` is made (mode 0700, never shared) with the
run's ``toolkit.yaml`` and ``env`` in it; then ``python3 -m agentcore_slime.evaluate.rehearse``
(:mod:`.rehearse`, which needs the gateway's packages: the training environment's python3)
replaces this process. No SGLang, no GPU: nothing is locked, no process is stopped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from ..launch.cli import _restore_caller_pythonpath
from ..rundir import PRIVATE_FILE_MODE, new_results_dir, private_dir, write_atomic
from ..scripts.render import RunPaths, shell_quote
from ..settings.errors import ConfigError
from ..settings.validate import Config
from .render import EvalRequest, render_eval

REHEARSE_MODULE = "agentcore_slime.evaluate.rehearse"
#: rows a rehearsal runs when --limit is not given
DEFAULT_ROWS = 2
#: what a model directory needs for the rehearsal (the tokenizer; weights are not read)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def check_rehearsal(config: Config, limit: int | None) -> None:
    """The rehearsal's inputs: its rows and the model's tokenizer.

    :raises ConfigError: DATA_PATH missing, MODEL_DIR without a tokenizer, a bad --limit.
    """
    data = Path(str(config["DATA_PATH"]))
    if not data.is_file():
        raise ConfigError(
            f"DATA_PATH {data} does not exist: the rehearsal runs its first rows",
            "point DATA_PATH at the training JSONL (one row per prompt, metadata = the agent's payload)",
        )
    model = Path(str(config["MODEL_DIR"]))
    if not any((model / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"MODEL_DIR {model} has no tokenizer ({', '.join(TOKENIZER_FILES)}): the gateway renders with it",
            "point MODEL_DIR at the model's HF directory (its weights are not read)",
        )
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit} must be at least 1", "pass --limit N with N >= 1, or drop it")


def command(config: Config, limit: int | None, out_dir: Path | str) -> list[str]:
    """The rehearsal's command line (what runs, and what --dry-run prints)."""
    return [
        "python3", "-m", REHEARSE_MODULE,
        "--config", f"{out_dir}/toolkit.yaml",
        "--model-dir", str(config["MODEL_DIR"]),
        "--data", str(config["DATA_PATH"]),
        "--limit", str(limit or DEFAULT_ROWS),
        "--out-dir", str(out_dir),
    ]


def run_rehearsal(
    config: Config, paths: RunPaths, limit: int | None, dry_run: bool, say: Callable[[str], None]
) -> int:
    """Check, make the results directory, exec the rehearsal (or print it with ``dry_run``).

    :param config: the validated configuration.
    :param paths: the run's paths (repo, run directory, provenance).
    :param limit: rows to run (default :data:`DEFAULT_ROWS`).
    :param dry_run: print the command, write nothing.
    :param say: bin/eval's progress printer.
    """
    check_rehearsal(config, limit)
    rehearsals = paths.run_dir / "rehearsal"
    if dry_run:
        say(f"dry run: nothing written; the rehearsal writes {rehearsals}/<UTC time>/ and runs:")
        print(" ".join(shell_quote(w) for w in command(config, limit, f"{rehearsals}/<UTC time>")))
        return 0
    rendered = render_eval(config, paths, EvalRequest(Path(str(config["MODEL_DIR"])), limit),
                           paths.repo / "templates")
    try:
        paths.run_dir.parent.mkdir(parents=True, exist_ok=True)
        private_dir(paths.run_dir, follow=True)
        out_dir = new_results_dir(rehearsals)
    except OSError as exc:
        raise ConfigError(f"cannot make {rehearsals}/<UTC time>: {exc}", "fix the run directory") from None
    for name in ("toolkit.yaml", "env"):
        write_atomic(out_dir / name, rendered.files[name].encode(), PRIVATE_FILE_MODE)
    words = command(config, limit, out_dir)
    say(f"rehearsing the wiring on CPU (stand-in policy, no GPU): {' '.join(map(shell_quote, words))}")
    sys.stdout.flush()
    _restore_caller_pythonpath()
    python_dir = str(paths.repo / "python")
    caller = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = python_dir + (f":{caller}" if caller else "")
    os.execvp(words[0], words)
    return 1  # not reached
