"""``bin/train``'s command: validate an env file, gate on the preflight checks, render
runs/<EXP_ID>/, run it (:mod:`.cli`).

Run as ``python3 -m agentcore_slime.launch`` with ``PYTHONPATH=<repo>/python``. It needs only
the standard library, jinja2, pyyaml and python-dotenv (its rooms below, :mod:`agentcore_slime.settings`,
:mod:`agentcore_slime.scripts`, :mod:`agentcore_slime.preflight` and :mod:`agentcore_slime.rundir`,
import nothing else), so it works right after ``git clone`` (Python >= 3.11).
"""

from __future__ import annotations

from ..settings.errors import ConfigError

__all__ = ["ConfigError"]
