"""The launcher behind ``bin/train``: validate an env file, render runs/<EXP_ID>/, run it.

Run as ``python3 -m agentcore_slime.launch`` with ``PYTHONPATH=<repo>/python``. It needs only
the standard library, jinja2, pyyaml and python-dotenv, and imports nothing else from
agentcore_slime, so it works right after ``git clone`` (Python >= 3.10).
"""

from __future__ import annotations

from .errors import ConfigError

__all__ = ["ConfigError"]
