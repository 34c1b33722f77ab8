"""``bin/eval --rehearse``'s launcher half: check the inputs, make the results directory, exec.

Runs on bin/train's python (jinja2, pyyaml, python-dotenv) after the env file is validated like
any bin/eval's. Without an env file the rehearsal's own (``examples/rehearsal.env``) is used,
with the parts it has no real one for stood in by the rehearsal (:mod:`.rehearse_parts`): the
example agent started here on a free port, S3 on loopback, the toolkit's tokenizer, the prepared
offline GSM8K sample as data. Before anything is written, the toolkit's python (the one bin/eval
runs on) must have the rehearsal's packages (else one line with the install command, exit 127);
the data must exist (exit 2). Then ``runs/<EXP_ID>/rehearsal/<UTC time>[-N]/`` is made (mode
0700, never shared) with the run's ``toolkit.yaml`` and ``env`` in it, and ``<that python> -m
agentcore_slime.evaluate.rehearse`` (:mod:`.rehearse`) replaces this process. No SGLang, no GPU:
nothing is locked, no process is stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
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
#: the env file a rehearsal uses when it is given none (relative to the checkout)
DEFAULT_ENV = Path("examples") / "rehearsal.env"
#: its rows: examples/prepare_gsm8k.py's output for the offline sample examples/data/gsm8k_sample.jsonl
DEFAULT_DATA = Path("examples") / "data" / "gsm8k_sample_prepared.jsonl"
#: the install command the rehearsal's packages come with
INSTALL = 'pip install -e "python/[rehearse]"'
#: modules the rehearsal imports: the gateway's, the report's; the loopback store's and the
#: example agent's when they stand in
MODULES = ("aiohttp", "httpx", "orjson", "boto3", "yaml", "renderers", "transformers", "jinja2", "matplotlib")
STAND_IN_MODULES = ("moto", "flask", "agentcore_rl_toolkit", "strands", "pydantic")


def default_overrides(repo: Path) -> list[str]:
    """``--set`` values of the default env file: absolute paths in this checkout; the example
    agent's port is 0 (it binds a free one and names it, the rehearsal takes it from there)."""
    return [f"DATA_PATH={repo / DEFAULT_DATA}", f"MODEL_DIR={repo / 'examples' / 'no-model'}",
            "AGENT_URL=http://127.0.0.1:0"]


def missing_modules(python: str, modules: tuple[str, ...]) -> list[str] | None:
    """The modules ``python`` cannot import (None: ``python`` does not run)."""
    probe = ("import importlib.util as u, sys; "
             "print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))")
    try:
        done = subprocess.run([python, "-c", probe, *modules], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.split() if done.returncode == 0 else None


def check_packages(python: str, stand_ins: bool) -> None:
    """Refuse a ``python`` that cannot run the rehearsal, with the install command.

    :raises ConfigError: (status 127) naming the missing modules and the command that brings them.
    """
    modules = MODULES + (STAND_IN_MODULES if stand_ins else ())
    missing = missing_modules(python, modules)
    if missing is None:
        raise MissingPackages(f"{python} does not run: the rehearsal needs python3 >= 3.11 with its packages "
                              f"({INSTALL}, in a virtual environment; then activate it)")
    if missing:
        raise MissingPackages(f"{python} lacks {', '.join(missing)}: {INSTALL} (in a virtual environment, "
                              "then activate it) brings what the rehearsal runs")


class MissingPackages(ConfigError):
    """The rehearsal's python lacks its packages: exit status 127 (a missing tool)."""

    status = 127


def check_rehearsal(config: Config, limit: int | None) -> None:
    """The rehearsal's inputs: its rows (the model's tokenizer is stood in for when missing).

    :raises ConfigError: DATA_PATH missing, a bad --limit.
    """
    data = Path(str(config["DATA_PATH"]))
    if not data.is_file():
        raise ConfigError(
            f"DATA_PATH {data} does not exist: the rehearsal runs its first rows",
            "point DATA_PATH at the training JSONL (one row per prompt, metadata = the agent's payload)",
        )
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit} must be at least 1", "pass --limit N with N >= 1, or drop it")


def command(config: Config, limit: int | None, out_dir: Path | str, stand_ins: bool = False) -> list[str]:
    """The rehearsal's command line (what runs, and what --dry-run prints): the toolkit's python."""
    layout = {"actor_num_gpus_per_node": config["NUM_GPUS"], "tensor_model_parallel_size": config["TP_SIZE"]}
    words = [
        sys.executable, "-m", REHEARSE_MODULE, "--layout", json.dumps(layout),
        "--config", f"{out_dir}/toolkit.yaml",
        "--model-dir", str(config["MODEL_DIR"]),
        "--data", str(config["DATA_PATH"]),
        "--limit", str(limit or DEFAULT_ROWS),
        "--out-dir", str(out_dir),
    ]
    return words + (["--s3", "loopback", "--example-agent"] if stand_ins else [])


def run_rehearsal(
    config: Config, paths: RunPaths, limit: int | None, dry_run: bool, say: Callable[[str], None],
    stand_ins: bool = False,
) -> int:
    """Check, make the results directory, exec the rehearsal (or print it with ``dry_run``).

    :param config: the validated configuration.
    :param paths: the run's paths (repo, run directory, provenance).
    :param limit: rows to run (default :data:`DEFAULT_ROWS`).
    :param dry_run: print the command, write nothing.
    :param say: bin/eval's progress printer.
    :param stand_ins: no env file was given: S3 on loopback and the example agent started here.
    """
    check_rehearsal(config, limit)
    rehearsals = paths.run_dir / "rehearsal"
    if dry_run:
        say(f"dry run: nothing written; the rehearsal writes {rehearsals}/<UTC time>/ and runs:")
        print(" ".join(shell_quote(w) for w in command(config, limit, f"{rehearsals}/<UTC time>", stand_ins)))
        return 0
    check_packages(sys.executable, stand_ins)
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
    words = command(config, limit, out_dir, stand_ins)
    say(f"rehearsing a training step on CPU (stand-in policy, no GPU): {' '.join(map(shell_quote, words))}")
    sys.stdout.flush()
    _restore_caller_pythonpath()
    python_dir = str(paths.repo / "python")
    caller = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = python_dir + (f":{caller}" if caller else "")
    os.environ["TOOLKIT_REPO"] = str(paths.repo)
    os.execvp(words[0], words)
    return 1  # not reached
