"""Command line of ``bin/train``: parse, validate, render into the run directory, exec the script.

Modes: default (render into runs/<EXP_ID>/ and exec train.sh, which tees its output to
train.log), ``--render-only`` (render and print how to run it) and ``--dry-run`` (render into
a temporary directory, print the slime command line a real run would execute as the rendered
script's own ``--print-command`` builds it, run nothing else, remove the directory).
Progress goes to stderr as ``bin/train: ...``; stdout carries only paths and commands.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from ..preflight.estimate import check_budget, estimate
from ..rundir import LOCK_FD_ENV, RENDERING, RunDirBusy, lock_run_dir, unlock_run_dir, write_run_dir
from ..scripts.render import RUNTIME_WORDS, Rendered, RunPaths, passthrough_flags, render, shell_quote
from ..settings.envfile import read_env_file
from ..settings.errors import ConfigError, raise_all
from ..settings.validate import (
    Config,
    check_variant,
    missing_paths,
    node_local_paths,
    parse_overrides,
    resolve,
    slime_flag_problems,
)
from ..settings.variants import REPLACED, VARIANTS, Variant
from .reproduce import (
    INVOCATION,
    MANIFEST,
    Invocation,
    build_manifest,
    manifest_changes,
    manifest_json,
    read_invocation,
    read_manifest,
    repeat_command,
    run_dir_of,
)

PROG = "bin/train"
#: external commands the rendered script needs in a real run
REQUIRED_TOOLS = ("bash", "ray", "pkill", "pgrep", "ps", "timeout", "tee")


class _Parser(argparse.ArgumentParser):
    """argparse with our error format: ``bin/train: <what> (<how>)`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message, f"see {PROG} --help")


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, add_help=False)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true")
    mode.add_argument("--render-only", action="store_true")
    parser.add_argument("--variant", default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--skip-doctor", action="store_true")
    parser.add_argument("env_file")
    return parser


def say(message: str) -> None:
    """One progress line on stderr.

    :param message: the text after the ``bin/train:`` prefix.
    """
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split at the first ``--``: bin/train's own arguments, then slime flags (verbatim).

    :param argv: the arguments after the program name.
    """
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    """Run bin/train; return its exit status (or exec the rendered script).

    :param argv: arguments (default: ``sys.argv[1:]``).
    """
    args_list = sys.argv[1:] if argv is None else argv
    try:
        return _run(args_list)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            say(line)
        return 2


def _run(argv: list[str]) -> int:
    own, given_flags = split_argv(argv)
    _refuse_split_set(own)
    args, unknown = _parser().parse_known_args(own)
    if unknown:
        _refuse_misspelled_option(unknown)
        moved = [word for word in own if word not in unknown]
        fixed = shlex.join([PROG, *moved, "--", *unknown, *given_flags])
        raise ConfigError(
            f"unrecognized arguments: {shlex.join(unknown)}",
            f"flags for slime go after `--`: {fixed}; bin/train's own options: {PROG} --help",
        )
    env_file = Path(args.env_file)
    recorded_dir = run_dir_of(env_file)
    recorded = read_invocation(recorded_dir) if recorded_dir else None
    if recorded_dir is not None:
        env_file = recorded_dir / "env"
    invocation = _invocation(argv, args, given_flags, env_file, recorded)
    if invocation.variant in REPLACED:
        raise ConfigError(f"--variant {invocation.variant} was removed", REPLACED[invocation.variant])
    if invocation.variant not in VARIANTS:
        raise ConfigError(f"unknown --variant {invocation.variant!r}", f"use one of: {', '.join(VARIANTS)}")
    slime_flags = invocation.slime_flags
    repo = Path(os.environ.get("TOOLKIT_REPO") or Path(__file__).resolve().parents[3])
    runs_dir = Path(os.environ.get("TOOLKIT_RUNS_DIR") or repo / "runs").absolute()
    variant = VARIANTS[invocation.variant]
    real_run = not (args.dry_run or args.render_only)
    config = _validate(env_file, args.overrides, runs_dir, variant, slime_flags, real_run)
    if real_run:
        _check_tools()
        from ..preflight import gate  # imported here: --dry-run and --render-only never need it

        if not args.skip_doctor and not gate(config, repo, env_file, slime_flags, invocation.variant, PROG):
            return 1
    run_dir = runs_dir / str(config["EXP_ID"])
    for warning in node_local_paths(config, repo, run_dir):
        say(f"warning: {warning}")
    paths = RunPaths(repo=repo, run_dir=run_dir, env_file=invocation.env_file, command=invocation.command)
    rendered = render(config, paths, invocation.variant, slime_flags, repo / "templates")
    manifest = build_manifest(config, repo, rendered.slime_argv)
    # the run directory's lock, before its record is read or a file of it written: a live run
    # of this experiment (its train.sh holds the lock) refuses us with its files untouched
    lock = None if args.dry_run else _lock_run_dir(run_dir, str(config["EXP_ID"]))
    _compare_with_recorded(run_dir, manifest, rendered, variant.script, recorded is not None)
    if "join.sh" in rendered.files:
        say(
            f"NUM_NODES={config['NUM_NODES']}: each worker runs {run_dir / 'join.sh'} HEAD_IP:PORT "
            "(the head prints the exact command and waits for the workers' GPUs)"
        )
    if args.dry_run:
        passed = args.skip_doctor or _dry_run_checks(config, repo, slime_flags, invocation.variant)
        # the script's own stop (an unusable checkpoint directory) comes before the cost lines
        status = print_slime_command(rendered, variant.script)
        for line in estimate(config, runs_dir, "sync" if variant.colocate else "async").lines():
            say(line)
        # nothing is written under runs/: the command line is what a real run would execute
        render_only = repeat_command(PROG, own, given_flags, "--dry-run", "--render-only")
        say(f"dry run: nothing written; to read the whole script: {render_only}")
        say(f"dry run: {NOT_CHECKED}: bin/doctor {shell_quote(str(env_file))} checks them")
        return status or (0 if passed else 1)
    script = run_dir / variant.script
    log = script.with_suffix(".log")
    files = {**rendered.files, INVOCATION: invocation.to_json(), MANIFEST: manifest_json(manifest)}
    write_run_dir(run_dir, files, also_checked=[log.name])
    assert lock is not None
    if args.render_only:
        unlock_run_dir(lock)
        say(f"rendered {run_dir}; run it with:")
        print(shlex.join(["bash", str(script)]))
        return 0
    say(f"running {script} (log: {log})")
    return run_script(script, lock)


#: what --dry-run (and a run's gate) does not check, said after a dry run
NOT_CHECKED = ("not checked here: the GPUs, the job's python and its slime stack, slime's flags, "
               "ports and AWS access")


def _dry_run_checks(config: Config, repo: Path, slime_flags: list[str], variant: str) -> bool:
    """The checks a real run makes before it starts anything (bin/doctor's blocking ones:
    model, data, the gateway's address, disk, AWS credentials), their WARN and FAIL lines on
    stderr; whether none failed."""
    from ..preflight import Status, blocking_checks  # imported here: --render-only never needs them

    results = blocking_checks(config, repo, slime_flags, variant)
    for result in results:
        if result.status is not Status.PASS:
            say(f"doctor: {result.line()}")
    if any(result.status is Status.FAIL for result in results):
        say("dry run: a real run stops at the FAIL lines above, before it starts anything")
        return False
    say(f"doctor: {len(results)} checks a real run makes first passed (model, data, gateway address, disk, "
        "AWS credentials)")
    return True


#: bin/train's own options, for "did you mean" (a near miss is a typo, not a slime flag)
OWN_OPTIONS = ("--dry-run", "--render-only", "--variant", "--set", "--skip-doctor", "--help")


def _refuse_split_set(own: list[str]) -> None:
    """``--set KEY VALUE`` (two words) followed by the env file: say to join them, before
    argparse takes VALUE for the env file and the env file for a slime flag. (``--set KEY
    FILE`` with nothing after is a KEY without a value: argparse's own message says so.)"""
    for at, word in enumerate(own[:-3]):
        key, value = own[at + 1], own[at + 2]
        if word == "--set" and "=" not in key and not value.startswith("-"):
            fixed = shlex.join([PROG, *own[:at], "--set", f"{key}={value}", *own[at + 3 :]])
            raise ConfigError(
                f"--set {key} {value}: --set takes KEY=VALUE as one word",
                f"write --set {key}={value}: {fixed}",
            )


def _refuse_misspelled_option(unknown: list[str]) -> None:
    for word in unknown:
        close = difflib.get_close_matches(word.split("=", 1)[0], OWN_OPTIONS, n=1, cutoff=0.75)
        if word.startswith("-") and close:
            raise ConfigError(f"unknown option {word}", f"did you mean {close[0]}? see {PROG} --help")


def _invocation(
    argv: list[str],
    args: argparse.Namespace,
    given_flags: list[str],
    env_file: Path,
    recorded: Invocation | None,
) -> Invocation:
    """What this call renders: as the user gave it, or, for a run's own record
    (``bin/train runs/<EXP_ID>/env``), the recorded variant and flags after ``--`` unless given
    anew, and the recorded header lines when nothing was changed (so the script is the same)."""
    # one line even when an argument holds a newline: it goes into comments of the rendered files
    command = " ".join(shell_quote(word) for word in [PROG, *argv])
    if recorded is None:
        return Invocation(args.variant or "sync", given_flags, command, str(env_file))
    variant = args.variant or recorded.variant
    flags = given_flags if "--" in argv else recorded.slime_flags
    if variant == recorded.variant and flags == recorded.slime_flags and not args.overrides:
        say(f"re-rendering the recorded run: {recorded.command}")
        return recorded
    say(f"re-rendering from {env_file} with changes to the recorded run ({recorded.command})")
    return Invocation(variant, flags, command, str(env_file))


def _compare_with_recorded(
    run_dir: Path, manifest: dict[str, object], rendered: Rendered, script: str, again: bool
) -> None:
    """Name what changed since the run directory was last rendered (commits, data and model
    hashes, seeds, agent) and, for a re-render of a recorded run, whether its script differs."""
    before = read_manifest(run_dir)
    if before is None:
        return
    changes = manifest_changes(before, manifest)
    for change in changes:
        say(f"warning: changed since {run_dir} was rendered: {change}")
    if not again:
        return
    try:
        previous = (run_dir / script).read_text(encoding="utf-8")
    except OSError:
        return
    if previous != rendered.files[script]:
        toolkit_moved = any(change.startswith("toolkit_commit") for change in changes)
        why = "the toolkit's commit changed" if toolkit_moved else "see above"
        say(f"warning: {script} differs from the one recorded in {run_dir} ({why})")


def _lock_run_dir(run_dir: Path, exp_id: str) -> int:
    """Take the run directory's lock (rundir.py): wait for another bin/train's render of it;
    refuse a live run's, saying which process holds it."""
    wait = float(os.environ.get("TOOLKIT_LOCK_WAIT") or 1)
    try:
        return lock_run_dir(run_dir, f"{os.getpid()} {exp_id} {RENDERING}", wait)
    except RunDirBusy as busy:
        pid, _, what = (busy.holder.split(maxsplit=2) + ["?", "?", "?"])[:3]
        who = "a run of this experiment" if what != RENDERING else "another bin/train rendering it"
        say(
            f"{run_dir} is in use by {who}: PID {pid} ({what}); nothing was written, its files are "
            f"as they were (wait for it to end, or stop it with 'kill {pid}'; "
            "to run beside it, give this run another EXP_ID)"
        )
        raise SystemExit(1) from None


def run_script(script: Path, lock: int | None = None) -> int:
    """Replace this process with ``bash script``, as the user would run it (bin/train, bin/eval).

    :param lock: the run directory's lock, handed to the script (which holds it while it runs).
    """
    sys.stdout.flush()
    _restore_caller_pythonpath()
    if lock is not None:
        os.set_inheritable(lock, True)
        os.environ[LOCK_FD_ENV] = str(lock)
    try:
        os.execvp("bash", ["bash", str(script)])
    finally:  # reached only when exec failed (or a test replaced it)
        if lock is not None:
            os.close(lock)
            os.environ.pop(LOCK_FD_ENV, None)
    return 1  # not reached


def _restore_caller_pythonpath() -> None:
    """Give the rendered script the PYTHONPATH the user had (bin/train prepended python/)."""
    caller = _caller_environment()
    for name in set(os.environ) - set(caller):
        del os.environ[name]
    os.environ.update(caller)


def print_slime_command(rendered: Rendered, script_name: str) -> int:
    """Print slime's command line as ``bash <script> --print-command`` builds it (the model
    script's arguments and every array expanded by the script's own code), the script rendered
    into a temporary directory that is removed afterwards. Returns the script's status; when
    it fails (its reason on stderr) the line keeps the run-time arrays as ``${NAME[@]}``."""
    sys.stdout.flush()
    with tempfile.TemporaryDirectory(prefix="toolkit-dry-run-") as tmp:
        script = Path(tmp) / script_name
        for name, text in rendered.files.items():  # the script and the Python helpers it runs
            if name == script_name or name.endswith(".py"):
                (Path(tmp) / name).write_text(text, encoding="utf-8")
        built = subprocess.run(
            ["bash", str(script), "--print-command"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env=_caller_environment(),
            check=False,
        )
    if built.returncode == 0:
        print(built.stdout, end="")
        return 0
    arrays = ", ".join(RUNTIME_WORDS[:-1]) + f" and {RUNTIME_WORDS[-1]}"
    say(f"{script_name} --print-command stopped (status {built.returncode}, the reason above): "
        f"{arrays} stay unexpanded below")
    print(_command_line(rendered))
    return built.returncode


def _caller_environment() -> dict[str, str]:
    """The environment for a rendered script: the PYTHONPATH the user had (bin/train prepended
    python/), without bin/train's own variables."""
    environment = dict(os.environ)
    saved = environment.pop("TOOLKIT_SAVED_PYTHONPATH", None)
    environment.pop("TOOLKIT_REPO", None)
    if saved == "unset":
        environment.pop("PYTHONPATH", None)
    elif saved is not None and saved.startswith("set:"):
        environment["PYTHONPATH"] = saved.removeprefix("set:")
    return environment


def _validate(
    env_file: Path,
    overrides: list[str],
    runs_dir: Path,
    variant: Variant,
    slime_flags: list[str],
    real_run: bool,
) -> Config:
    """Every check of the env file, --set and the slime flags in one pass.

    :raises ConfigError: all the problems found, one line each (missing paths are problems
        in a real run and warnings otherwise).
    """
    problems: list[ConfigError] = []
    config = resolve(
        read_env_file(env_file, problems), parse_overrides(overrides), env_file, runs_dir, problems
    )
    problems += slime_flag_problems(passthrough_flags(config, slime_flags), config)
    warnings: list[str] = []
    try:
        warnings += check_variant(config, variant)
    except ConfigError as exc:
        problems.append(exc)
    if not problems:  # the projection reads the settings, so they must be valid first
        try:
            check_budget(config, runs_dir, "sync" if variant.colocate else "async")
        except ConfigError as exc:
            problems.append(exc)
    for missing in missing_paths(config):
        if real_run:
            how = f"{missing.how}: fix the path, or use --render-only to render on a machine without it"
            problems.append(ConfigError(missing.what, how))
        else:
            warnings.append(str(missing))
    raise_all(problems)
    for warning in warnings:
        say(f"warning: {warning}")
    return config


def _check_tools() -> None:
    for tool in REQUIRED_TOOLS:
        if shutil.which(tool) is None:
            say(f"{tool} not found on PATH (activate the environment that has slime and Ray)")
            raise SystemExit(127)


def _command_line(rendered: Rendered) -> str:
    words = [w if w in RUNTIME_WORDS else shell_quote(w) for w in rendered.slime_argv]
    return " ".join(words)
