"""How a table of checks runs, and the blocking ones bin/train and bin/eval run first.

Blocking checks are offline, fast and about what would make the run fail or waste its GPUs
after it started them: model, data, disk, and whether episodes can happen at all (an ACR agent
given a loopback gateway address, no AWS credentials for the workers). GPUs, ports and imports
are not blocking: a stale run of this user may hold them, and train.sh stops it only after the
checks (imports: the job's python is the one that fails clearly, at its first import). bin/doctor's table
(:data:`agentcore_slime.doctor.checks.CHECKS`) lists these same three among all its checks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..settings.validate import Config
from .context import Context
from .data import check_data
from .disk import check_disk
from .model import check_model
from .reach import check_launch_credentials, check_reach
from .report import Result, Status, failed

#: checks run at once (each mostly waits on a subprocess: bash, nvidia-smi, the job's python)
PARALLEL = 4


@dataclass(frozen=True)
class Check:
    """One group of checks.

    :param group: the name before the dot of its results.
    :param run: the function producing its results.
    :param blocking: bin/train runs it before anything starts.
    :param network: it needs the network (skipped with --offline).
    """

    group: str
    run: Callable[[Context], list[Result]]
    blocking: bool = False
    network: bool = False


#: the checks bin/train and bin/eval run before they stop or start any process
BLOCKING: tuple[Check, ...] = (
    Check("model", check_model, blocking=True),
    Check("data", check_data, blocking=True),
    Check("reach", check_reach, blocking=True),
    Check("disk", check_disk, blocking=True),
)
#: blocking checks of the launchers only: bin/doctor's own (online) aws checks cover them
LAUNCH_ONLY: tuple[Check, ...] = (Check("aws", check_launch_credentials, blocking=True),)


def run_checks(checks: Sequence[Check], ctx: Context, only_blocking: bool = False) -> list[Result]:
    """Run the checks, in parallel (most wait on a probe of the job's python), reported in order.

    A check that crashes is a FAIL of its group, not a crash of the doctor.

    :param checks: the table to run.
    :param ctx: the check context.
    :param only_blocking: run only the blocking (offline, fast) checks.
    """
    chosen = [
        check
        for check in checks
        if not (only_blocking and not check.blocking) and not (check.network and ctx.offline)
    ]
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        batches = list(pool.map(lambda check: _run_one(check, ctx), chosen))
    return [result for batch in batches for result in batch]


def _run_one(check: Check, ctx: Context) -> list[Result]:
    try:
        return check.run(ctx)
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        return [
            failed(
                f"{check.group}.error", f"the check crashed: {type(exc).__name__}: {exc}", "report this bug"
            )
        ]


def blocking_checks(config: Config, repo: Path, slime_flags: list[str], variant: str) -> list[Result]:
    """The checks bin/train (and bin/eval) run before they stop or start any process.

    :param config: the resolved env file.
    :param repo: the toolkit checkout.
    :param slime_flags: the flags after ``--``.
    :param variant: the script about to be rendered.
    """
    ctx = Context(config=config, repo=repo, slime_flags=slime_flags, variant=variant, offline=True)
    return run_checks(BLOCKING + LAUNCH_ONLY, ctx, only_blocking=True)


def gate(config: Config, repo: Path, env_file: Path, slime_flags: list[str], variant: str, prog: str) -> bool:
    """Run the blocking checks for a launcher (bin/train, bin/eval); report WARN/FAIL on stderr.

    :param config: the resolved env file.
    :param repo: the toolkit checkout.
    :param env_file: the env file, for the message that points at bin/doctor.
    :param slime_flags: the flags after ``--``.
    :param variant: the script about to be rendered.
    :param prog: the launcher's name, the prefix of every line (``bin/train``).
    :returns: True when no check failed (the launcher may go on).
    """
    results = blocking_checks(config, repo, slime_flags, variant)
    for result in results:
        if result.status is not Status.PASS:
            print(f"{prog}: doctor: {result.line()}", file=sys.stderr, flush=True)
    if any(result.status is Status.FAIL for result in results):
        print(
            f"{prog}: nothing was started (fix the FAIL lines; bin/doctor {env_file} runs every check; "
            "--skip-doctor skips these in an emergency)",
            file=sys.stderr,
            flush=True,
        )
        return False
    return True
