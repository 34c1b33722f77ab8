"""Agent-facing protocols beyond OpenAI chat completions, as thin adapters over one core.

:data:`ROUTES` lists each route the gateway serves per session besides chat completions;
:func:`for_path` picks the protocol whose error shape a path's errors take.
"""

from __future__ import annotations

from dataclasses import dataclass

from .anthropic import Messages
from .base import CHAT, Protocol
from .bedrock import Converse, Invoke
from .responses import Responses

MESSAGES = Messages()
RESPONSES = Responses()
CONVERSE = Converse(stream=False)
MODEL = "/sessions/{sid}/model/{model:.+}"  # botocore escapes the id's ':' and '/' (an ARN has one)


@dataclass(frozen=True)
class Route:
    path: str
    protocol: Protocol
    counts_tokens: bool = False  # answers the prompt's length; no engine call, nothing recorded


ROUTES = [
    Route("/sessions/{sid}/v1/messages", MESSAGES),
    Route("/sessions/{sid}/v1/messages/count_tokens", MESSAGES, counts_tokens=True),
    Route("/sessions/{sid}/v1/responses", RESPONSES),
    Route(f"{MODEL}/converse", CONVERSE),
    Route(f"{MODEL}/converse-stream", Converse(stream=True)),
    Route(f"{MODEL}/invoke", Invoke(stream=False)),
    Route(f"{MODEL}/invoke-with-response-stream", Invoke(stream=True)),
]


def for_path(path: str) -> Protocol:
    """The protocol whose clients use ``path`` (chat's for any other path)."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[1] == "sessions" and parts[3] == "v1" and parts[4] == "messages":
        return MESSAGES
    if len(parts) >= 4 and parts[1] == "sessions" and parts[3] == "model":
        return CONVERSE
    return CHAT


__all__ = ["CHAT", "ROUTES", "Protocol", "Route", "for_path"]
