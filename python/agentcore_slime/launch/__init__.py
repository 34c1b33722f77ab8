"""The launcher behind ``bin/train``: validate an env file, render runs/<EXP_ID>/, run it.

Run as ``python3 -m agentcore_slime.launch`` with ``PYTHONPATH=<repo>/python``. It needs only
the standard library, jinja2, pyyaml and python-dotenv, and imports nothing from agentcore_slime
but the stdlib-only :mod:`agentcore_slime.errors` (the package ``__init__`` is stdlib-only too),
so it works right after ``git clone`` (Python >= 3.10). Its :mod:`.schema` and :mod:`.checks`
are stdlib-only as well: the rollout and the gateway import them for the shared settings.
"""

from __future__ import annotations

from ..settings.errors import ConfigError

__all__ = ["ConfigError"]
