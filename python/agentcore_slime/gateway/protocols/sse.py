"""Server-sent events, as the anthropic and openai SDKs read them."""

from __future__ import annotations

from typing import Any

from ..wire import dump_json


def named_event(name: str, data: dict[str, Any]) -> bytes:
    """One ``event: <name>`` / ``data: <json>`` event."""
    return b"event: " + name.encode() + b"\ndata: " + dump_json(data) + b"\n\n"
