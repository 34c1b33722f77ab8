"""Command line of ``bin/eval``: validate the env file, render runs/<EXP_ID>/eval.sh, exec it.

The same env file, validation and error messages as ``bin/train``; ``--checkpoint`` picks the
HF model directory to serve (default ``MODEL_DIR``), ``--limit`` the first N validation rows,
``--dry-run`` renders in memory, writes nothing (no run directory, no temporary one) and prints
the server and evaluation commands a real run would execute.
Progress goes to stderr as ``bin/eval: ...``; stdout carries only paths and commands.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from ..launch.cli import run_script
from ..rundir import write_run_dir
from ..scripts.render import RunPaths, shell_quote
from ..settings.envfile import read_env_file
from ..settings.errors import ConfigError
from ..settings.validate import Config, parse_overrides, resolve
from .rehearse_launch import DEFAULT_ENV, default_overrides
from .render import SCRIPT, EvalRequest, commands, eval_engines, explicit_engines, plan_line, render_eval

PROG = os.environ.get("TOOLKIT_LAUNCHER") or "bin/eval"  # bin/train --rehearse runs this too
#: external commands eval.sh needs in a real run
REQUIRED_TOOLS = ("bash", "python3", "pkill", "pgrep", "tee")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message, f"see {PROG} --help")


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, add_help=False)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--rehearse", action="store_true")
    parser.add_argument("--checkpoint")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("env_file", nargs="?")
    return parser


def say(message: str) -> None:
    """One progress line on stderr (``bin/eval: ...``)."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run bin/eval; return its exit status (or exec the rendered script).

    :param argv: arguments (default: ``sys.argv[1:]``).
    """
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            say(line)
        return int(getattr(exc, "status", 2))


def check_eval(config: Config, limit: int | None) -> None:
    """What bin/eval needs beyond the schema.

    :raises ConfigError: no VAL_DATA_PATH, a server larger than the node, a bad --limit.
    """
    if config["VAL_DATA_PATH"] is None:
        raise ConfigError(
            "VAL_DATA_PATH is not set: bin/eval evaluates on the validation JSONL",
            "set VAL_DATA_PATH to the validation JSONL in the env file, or pass --set VAL_DATA_PATH=...",
        )
    tp, gpus = int(str(config["EVAL_TP_SIZE"])), int(str(config["NUM_GPUS"]))
    if tp > gpus:
        raise ConfigError(
            f"EVAL_TP_SIZE={tp} is more than the node's NUM_GPUS={gpus}",
            "the evaluation server runs on this node: choose EVAL_TP_SIZE <= NUM_GPUS",
        )
    engines = eval_engines(config)
    if explicit_engines(config) and engines * tp > gpus:
        raise ConfigError(
            f"SGLANG_DATA_PARALLEL_SIZE={engines} engines x EVAL_TP_SIZE={tp} GPUs "
            f"is more than the node's NUM_GPUS={gpus}",
            f"bin/eval runs its engines on this node: choose SGLANG_DATA_PARALLEL_SIZE <= {gpus // tp}, "
            "or leave it unset to use every GPU",
        )
    if limit is not None and limit < 1:
        raise ConfigError(
            f"--limit {limit} must be at least 1",
            "pass --limit N with N >= 1, or leave it out"
        )


def missing_inputs(config: Config, checkpoint: Path) -> list[str]:
    """The files a real evaluation needs that do not exist, as messages."""
    problems = []
    if re.fullmatch(r"iter_\d+", checkpoint.name) and not (checkpoint / "config.json").is_file():
        exports = checkpoint.parent / "hf"
        where = f"its HF exports are in {exports}" if exports.is_dir() else (
            f"none was written ({exports} does not exist): SAVE_HF=true writes one per save"
        )
        problems.append(
            f"{checkpoint} is a Megatron checkpoint, not an HF model directory: bin/eval serves HF "
            f"weights, and {where}"
        )
    elif not (checkpoint / "config.json").is_file():
        problems.append(
            f"{checkpoint} is not an HF model directory (no config.json): check --checkpoint / MODEL_DIR"
        )
    if not Path(str(config["VAL_DATA_PATH"])).is_file():
        problems.append(f"VAL_DATA_PATH {config['VAL_DATA_PATH']} does not exist (the validation JSONL)")
    return problems


def _check_inputs(config: Config, checkpoint: Path, real_run: bool) -> None:
    problems = missing_inputs(config, checkpoint)
    if problems and real_run:
        raise ConfigError("; ".join(problems), "fix the path, or use --dry-run to see what would run")
    for problem in problems:
        say(f"warning: {problem}")


def _check_tools() -> None:
    for tool in REQUIRED_TOOLS:
        if shutil.which(tool) is None:
            say(f"{tool} not found on PATH (activate the environment that has SGLang)")
            raise SystemExit(127)


def _check_gpus(argv: list[str]) -> None:
    """A machine without NVIDIA's driver tools has no GPU for SGLang: say so before anything
    starts (its servers would die one by one), and how to try the wiring here instead."""
    if shutil.which("nvidia-smi") is None:
        words, given = [], list(argv)
        while given:  # the same command, less what a rehearsal has no use for
            word = given.pop(0)
            if word in ("--limit", "--checkpoint") and given:
                given.pop(0)
            elif not word.startswith(("--limit=", "--checkpoint=")):
                words.append(word)
        rehearse = shlex.join([PROG, "--rehearse", *words])
        raise ConfigError(
            "no GPU on this machine (nvidia-smi is not on PATH): bin/eval serves the checkpoint "
            "with SGLang on GPUs",
            f"run it on a GPU node; to try the wiring here on CPU: {rehearse}",
        )


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    repo = Path(os.environ.get("TOOLKIT_REPO") or Path(__file__).resolve().parents[3])
    runs_dir = Path(os.environ.get("TOOLKIT_RUNS_DIR") or repo / "runs").absolute()
    stand_ins = args.rehearse and args.env_file is None
    if args.env_file is None and not args.rehearse:
        raise ConfigError("ENV_FILE is missing", f"{PROG} [options] ENV_FILE; or {PROG} --rehearse alone "
                          "rehearses a training step with the toolkit's own example")
    env_file = repo / DEFAULT_ENV if stand_ins else Path(args.env_file)
    overrides = [*default_overrides(repo), *args.overrides] if stand_ins else args.overrides
    config = resolve(read_env_file(env_file), parse_overrides(overrides), env_file, runs_dir)
    if args.rehearse:  # the wiring on CPU: no server, no checkpoint (evaluate/rehearse_launch.py)
        return _rehearse(config, repo, runs_dir, env_file, argv, args, stand_ins)
    check_eval(config, args.limit)
    checkpoint = Path(args.checkpoint or str(config["MODEL_DIR"])).expanduser().absolute()
    request = EvalRequest(checkpoint, args.limit)
    _check_inputs(config, checkpoint, real_run=not args.dry_run)
    if not args.dry_run:
        _check_tools()
        _check_gpus(argv)
    run_dir = runs_dir / str(config["EXP_ID"])
    command = " ".join(shell_quote(word) for word in [PROG, *argv])
    paths = RunPaths(repo=repo, run_dir=run_dir, env_file=str(env_file), command=command)
    rendered = render_eval(config, paths, request, repo / "templates")
    script = run_dir / SCRIPT
    if args.dry_run:
        _print_dry_run(config, request, run_dir, argv)
        return 0
    write_run_dir(run_dir, rendered.files, also_checked=["eval.log"])
    say(f"plan: {plan_line(config)}")
    say(f"running {script} (log: {run_dir / 'eval.log'})")
    return run_script(script)


def _rehearse(
    config: Config, repo: Path, runs_dir: Path, env_file: Path, argv: list[str], args: argparse.Namespace,
    stand_ins: bool,
) -> int:
    from .rehearse_launch import run_rehearsal

    if args.checkpoint:
        raise ConfigError("--checkpoint has no use with --rehearse", "a rehearsal serves no model: drop it")
    command = " ".join(shell_quote(word) for word in [PROG, *argv])
    run_dir = runs_dir / str(config["EXP_ID"])
    paths = RunPaths(repo=repo, run_dir=run_dir, env_file=str(env_file), command=command)
    return run_rehearsal(config, paths, args.limit, args.dry_run, say, stand_ins)


def _print_dry_run(config: Config, request: EvalRequest, run_dir: Path, argv: list[str]) -> None:
    """What a real run would execute, with the paths it would use; nothing is written (a dry
    run used to leave a /tmp/toolkit-<EXP_ID>-eval-* directory behind on every call)."""
    again = " ".join(shell_quote(word) for word in [PROG, *(a for a in argv if a != "--dry-run")])
    lines = commands(config, request, run_dir)
    say(f"plan: {plan_line(config)}")
    say(f"dry run: nothing written; {again} writes {run_dir / SCRIPT} and runs these {len(lines)} commands:")
    for line in lines:
        print(line)


if __name__ == "__main__":  # bin/eval: python -m agentcore_slime.evaluate.launch
    raise SystemExit(main())
