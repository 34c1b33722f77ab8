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
