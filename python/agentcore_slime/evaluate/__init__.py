"""Evaluate a model with the agent, through the same gateway, transport and S3 path as training.

``python -m agentcore_slime.evaluate`` (see :mod:`.cli`) is what ``runs/<EXP_ID>/eval.sh``
runs once its SGLang server is healthy; it also works against a server you manage.
"""

from __future__ import annotations

from .cli import main
from .episodes import INFRASTRUCTURE, Episode, EpisodeRunner, classify, run_all
from .summary import pass_at_k, screen, summarize

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
