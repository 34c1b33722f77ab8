"""bin/eval: evaluate a model with the agent, through the same gateway, transport and S3 path as
training.

- :mod:`.launch` (``python -m agentcore_slime.evaluate.launch``, what bin/eval execs) validates
  the env file, renders ``runs/<EXP_ID>/eval.sh`` (:mod:`.render`) and runs it;
- ``python -m agentcore_slime.evaluate`` (:mod:`.cli`) is what eval.sh runs once its SGLang
  server is healthy; it also works against a server you manage: the episodes (:mod:`.episodes`)
  and their summary (:mod:`.summary`);
- ``bin/eval --rehearse`` (:mod:`.rehearse_launch`, then ``python -m agentcore_slime.evaluate.rehearse``:
  :mod:`.rehearse`) tries the wiring on CPU with the stand-in policy of :mod:`.standin`.

The names below are imported when first used: bin/eval's launcher half runs on bin/train's
python (jinja2, pyyaml, python-dotenv), which lacks the gateway's dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli import main
    from .episodes import INFRASTRUCTURE, Episode, EpisodeRunner, classify, run_all
    from .summary import pass_at_k, screen, summarize

#: each public name -> the module that defines it
_HOMES = {
    "main": ".cli",
    "INFRASTRUCTURE": ".episodes",
    "Episode": ".episodes",
    "EpisodeRunner": ".episodes",
    "classify": ".episodes",
    "run_all": ".episodes",
    "pass_at_k": ".summary",
    "screen": ".summary",
    "summarize": ".summary",
}

__all__ = [
    "INFRASTRUCTURE",
    "Episode",
    "EpisodeRunner",
    "classify",
    "main",
    "pass_at_k",
    "run_all",
    "screen",
    "summarize",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module at its first use (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
