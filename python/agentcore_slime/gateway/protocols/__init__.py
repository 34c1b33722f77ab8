"""Agent-facing protocols beyond OpenAI chat completions, as thin adapters over one core.

:data:`ROUTES` lists each route the gateway serves per session besides chat completions;
:func:`for_path` picks the protocol whose error shape a path's errors take.
"""

from __future__ import annotations

from dataclasses import dataclass

from .anthropic import Messages
from .base import CHAT, Protocol
from .responses import Responses

MESSAGES = Messages()
RESPONSES = Responses()


@dataclass(frozen=True)
class Route:
    path: str
    protocol: Protocol
    counts_tokens: bool = False  # answers the prompt's length; no engine call, nothing recorded


ROUTES = [
    Route("/sessions/{sid}/v1/messages", MESSAGES),
    Route("/sessions/{sid}/v1/messages/count_tokens", MESSAGES, counts_tokens=True),
    Route("/sessions/{sid}/v1/responses", RESPONSES),
]


def for_path(path: str) -> Protocol:
    """The protocol whose clients use ``path`` (chat's for any other path)."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[1] == "sessions" and parts[3] == "v1" and parts[4] == "messages":
        return MESSAGES
    return CHAT


__all__ = ["CHAT", "ROUTES", "Protocol", "Route", "for_path"]
