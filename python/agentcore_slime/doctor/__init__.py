"""``bin/doctor``: check up front everything that would make a run die later.

Each check prints one PASS / WARN / FAIL line with what it found and how to fix it. The checks
bin/train runs before it stops or starts any process (model, data, disk) are
:mod:`agentcore_slime.preflight`'s; this package adds the others and the command line. The
offline checks need only the standard library and the launcher; boto3 is imported by the AWS
checks only.
"""

from __future__ import annotations

from ..preflight.context import Context
from ..preflight.report import Result, Status
from .checks import CHECKS, run_checks

__all__ = ["CHECKS", "Context", "Result", "Status", "run_checks"]
