"""``bin/doctor``: check up front everything that would make a run die later.

Each check prints one PASS / WARN / FAIL line with what it found and how to fix it. bin/train
(and bin/eval) call :func:`gate` before they stop or start any process. The offline
checks need only the standard library and the launcher; boto3 is imported by the AWS checks only.
"""

from __future__ import annotations

from ..preflight.context import Context
from ..preflight.report import Result, Status
from .checks import CHECKS, blocking_checks, gate, run_checks

__all__ = ["CHECKS", "Context", "Result", "Status", "blocking_checks", "gate", "run_checks"]
