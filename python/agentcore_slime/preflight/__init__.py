"""The checks a launcher runs before it stops or starts any process (model script against
config.json, data rows, disk space), and what every check is made of: the context a check reads
(:mod:`.context`) and the PASS / WARN / FAIL result it returns (:mod:`.report`).

bin/train and bin/eval run them through :func:`gate` (:mod:`.gate`); bin/doctor runs them among
all its checks (:mod:`agentcore_slime.doctor.checks`).
"""

from __future__ import annotations

from .context import Context
from .gate import BLOCKING, Check, blocking_checks, gate, run_checks
from .report import Result, Status

__all__ = ["BLOCKING", "Check", "Context", "Result", "Status", "blocking_checks", "gate", "run_checks"]
