"""Helpers shared by the gateway tests: a reply script for the scripted engine, tool fixtures."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Script:
    """Replies the scripted engine gives, in order (a callable gets the prompt text)."""

    replies: list[str | Callable[[str], str]] = field(default_factory=list)

    def respond(self, prompt: str) -> str:
        if not self.replies:
            raise AssertionError(
                "the engine was called more often than the test scripted"
            )
        reply = self.replies.pop(0)
        return reply(prompt) if callable(reply) else reply


def tool_call_text(name: str, arguments: dict[str, Any], content: str = "") -> str:
    """What a Qwen2.5 model samples for a tool call (the chat template's own format)."""
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return (
        f"{content}\n<tool_call>\n{call}\n</tool_call>"
        if content
        else f"<tool_call>\n{call}\n</tool_call>"
    )


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def json_values(text: Any, max_int: int = 2**100, max_leaves: int = 12) -> Any:
    """A hypothesis strategy for JSON values (finite floats, integers up to ``max_int`` in
    magnitude: beyond 64 bits included) with strings drawn from ``text``."""
    from hypothesis import strategies as st

    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-max_int, max_value=max_int)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=max_leaves,
    )


def admin_client(gateway: Any, secret: bool = True) -> Any:
    """An httpx client of a gateway child's admin routes, over its private Unix socket (the only
    place they answer), with its secret unless ``secret`` is False."""
    import httpx
    from agentcore_slime.gateway.child import ADMIN_ORIGIN

    return httpx.Client(
        base_url=ADMIN_ORIGIN,
        transport=httpx.HTTPTransport(uds=gateway.admin_socket),
        headers=gateway.admin_headers if secret else {},
        trust_env=False,
        timeout=30,
    )
