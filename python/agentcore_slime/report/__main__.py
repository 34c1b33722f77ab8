"""``python -m agentcore_slime.report RUN_DIR``: what ``bin/report`` runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentcore_slime.report.page import write_report
from agentcore_slime.report.watch import DEFAULT_INTERVAL, watch

PROG = "bin/report"


def main(argv: list[str] | None = None) -> int:
    """Write RUN_DIR/report.html and print its path (with ``--watch``: again on every change).

    :param argv: the arguments (default: ``sys.argv[1:]``).
    :returns: 0, or 2 when RUN_DIR is not a run directory or ``--interval`` is not a positive number.
    """
    parser = argparse.ArgumentParser(prog=PROG, description="Write RUN_DIR/report.html and print its path.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run directory, runs/<EXP_ID>")
    parser.add_argument("--watch", action="store_true", help="rewrite the page as the run records steps")
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"with --watch: seconds between two looks (default {DEFAULT_INTERVAL:g})",
    )
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir
    if not args.interval > 0:
        print(
            f"{PROG}: --interval {args.interval:g}: must be more than 0 seconds (e.g. --interval 5)",
            file=sys.stderr,
        )
        return 2
    if not run_dir.is_dir():
        print(f"{PROG}: {run_dir}: not a directory (pass a run directory, runs/<EXP_ID>)", file=sys.stderr)
        return 2
    markers = ("metrics.jsonl", "train.sh", "toolkit.yaml", "env", "episodes")
    if not any((run_dir / name).exists() for name in markers):
        print(
            f"{PROG}: {run_dir}: not a run directory (no metrics.jsonl, train.sh or toolkit.yaml; "
            "pass runs/<EXP_ID>, the directory bin/train rendered)",
            file=sys.stderr,
        )
        return 2
    if args.watch:
        return watch(run_dir, args.interval, PROG)
    notes: list[str] = []
    print(write_report(run_dir, notes))
    for note in notes:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
