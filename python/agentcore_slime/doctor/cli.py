"""Command line of ``bin/doctor``: validate the env file as bin/train does, then run every check.

Exit status: 0 when no check failed, 1 when one did, 2 for bad usage or an invalid env file
(the messages are bin/train's validation messages).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from ..preflight.context import Context
from ..preflight.estimate import estimate
from ..preflight.report import as_json, exit_status, summary
from ..scripts.render import passthrough_flags
from ..settings.envfile import read_env_file
from ..settings.errors import ConfigError
from ..settings.validate import check_slime_flags, check_variant, parse_overrides, resolve
from ..settings.variants import VARIANTS
from .checks import run_checks

PROG = "bin/doctor"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message, f"see {PROG} --help")


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, add_help=False)
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--variant", default="sync")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("env_file")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run bin/doctor; return its exit status.

    :param argv: arguments (default: ``sys.argv[1:]``).
    """
    words = sys.argv[1:] if argv is None else argv
    own, slime_flags = (
        (words[: words.index("--")], words[words.index("--") + 1 :]) if "--" in words else (words, [])
    )
    try:
        args = _parser().parse_args(own)
        if args.variant not in VARIANTS:
            raise ConfigError(f"unknown --variant {args.variant!r}", f"use one of: {', '.join(VARIANTS)}")
        repo = Path(os.environ.get("TOOLKIT_REPO") or Path(__file__).resolve().parents[3])
        runs_dir = Path(os.environ.get("TOOLKIT_RUNS_DIR") or repo / "runs").absolute()
        env_file = Path(args.env_file)
        config = resolve(read_env_file(env_file), parse_overrides(args.overrides), env_file, runs_dir)
        check_slime_flags(passthrough_flags(config, slime_flags), config)
        check_variant(config, VARIANTS[args.variant])
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"{PROG}: {line}", file=sys.stderr)
        return 2
    ctx = Context(
        config=config, repo=repo, slime_flags=slime_flags, variant=args.variant, offline=args.offline
    )
    results = run_checks(ctx)
    if args.json:
        print(as_json(results))
    else:
        for result in results:
            print(result.line())
    # what the run would cost (docs/cost.md): information, never a verdict
    for line in estimate(config, runs_dir, args.variant).lines():
        print(f"{PROG}: {line}", file=sys.stderr)
    print(f"{PROG}: {summary(results)}", file=sys.stderr)
    return exit_status(results)
