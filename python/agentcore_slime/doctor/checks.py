"""The table of bin/doctor's checks, run all at once; the blocking ones among them are
:mod:`agentcore_slime.preflight`'s, which bin/train runs first (:func:`~agentcore_slime.preflight.gate`).
"""

from __future__ import annotations

from ..preflight.context import Context
from ..preflight.gate import BLOCKING, Check
from ..preflight.gate import run_checks as run_table
from ..preflight.report import Result
from .aws import check_aws
from .environment import check_environment
from .flags import check_flags
from .gpus import check_gpus
from .ray_security import check_ray_security
from .rollout import check_rollout

MODEL, DATA, REACH, DISK = BLOCKING

CHECKS: tuple[Check, ...] = (
    Check("env", check_environment),
    Check("gpus", check_gpus),
    MODEL,
    Check("flags", check_flags),
    DATA,
    Check("rollout", check_rollout),
    REACH,
    Check("aws", check_aws, network=True),
    DISK,
    Check("ray", check_ray_security),
)


def run_checks(ctx: Context, only_blocking: bool = False) -> list[Result]:
    """Run bin/doctor's checks, in parallel, reported in the table's order.

    :param ctx: the check context.
    :param only_blocking: run only the blocking (offline, fast) checks.
    """
    return run_table(CHECKS, ctx, only_blocking)
