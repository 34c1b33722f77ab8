"""Checks and conversions the protocol adapters share (pure functions, no I/O)."""

from __future__ import annotations

import json
from typing import Any

from ..wire import MAX_STOP_STRINGS, BadRequest, _agent_sampling, load_json


def json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object (strict JSON, as the chat path parses it).

    :raises BadRequest: not JSON, or not an object.
    """
    body = load_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` when it is a ``kind`` (booleans are not numbers); else a 400 naming ``where``."""
    if isinstance(value, kind) and not (isinstance(value, bool) and bool not in _kinds(kind)):
        return value
    raise BadRequest(f"{where} must be {what}, got {_show(value)}", param=where)


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def optional_positive_int(body: dict[str, Any], key: str, where: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{where} must be a positive integer, got {_show(value)}", param=where)
    return int(value)


def stop_strings(value: Any, where: str) -> list[str]:
    """A list of non-empty stop strings (at most the engine's limit)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise BadRequest(f"{where} must be a list of non-empty strings", param=where)
    if len(value) > MAX_STOP_STRINGS:
        raise BadRequest(f"at most {MAX_STOP_STRINGS} stop sequences are supported", param=where)
    return list(value)


def agent_sampling(values: dict[str, Any], names: dict[str, str]) -> dict[str, float | int]:
    """The agent's temperature / top_p / top_k under the chat path's rules.

    :param values: the protocol's settings, e.g. ``{"topP": 0.9}``.
    :param names: the protocol's name of each chat key, e.g. ``{"top_p": "topP"}``.
    """
    chat = {key: values.get(name) for key, name in names.items()}
    try:
        return _agent_sampling(chat)
    except BadRequest as err:
        where = names.get(err.param or "", err.param)
        raise BadRequest(str(err).replace(err.param or "", where or ""), param=where) from None


def chat_tool(name: Any, description: Any, schema: Any, where: str, strict: Any = None) -> dict[str, Any]:
    """A tool in the chat form the core renders, keys in the order chat clients send them
    (``description`` and ``strict`` only when the agent gave them: the template renders them)."""
    expect(name, str, f"{where}.name", "a string")
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = expect(description, str, f"{where}.description", "a string")
    function["parameters"] = expect(schema if schema is not None else {}, dict, where, "a JSON schema object")
    if strict is not None:
        function["strict"] = expect(strict, bool, f"{where}.strict", "a boolean")
    return {"type": "function", "function": function}


def tool_arguments(arguments: Any) -> dict[str, Any]:
    """A parsed completion's JSON-string arguments as an object (what these protocols carry)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def dump_arguments(value: Any) -> str:
    """Tool input as the chat form's ``arguments`` string (what strands' OpenAIModel sends)."""
    return json.dumps(value, ensure_ascii=False)


def suffix_id(call_id: str, prefix: str) -> str:
    """A chat tool-call id (``call_<hex>``) spelled with another protocol's prefix."""
    return prefix + call_id.removeprefix("call_")


# ---------------------------------------------------------------- rules every protocol shares

#: how a system or developer message that arrives after the conversation started is rendered: a
#: user turn in place, wrapped as Claude Code's own fallback wraps such a message (docs/agents.md)
REMINDER_OPEN, REMINDER_CLOSE = "<system-reminder>\n", "\n</system-reminder>"
SYSTEM_ROLES = ("system", "developer")
LEADING_SEPARATOR = "\n\n"  # between the texts of the system/developer messages that open a conversation


def message_text(content: Any) -> str:
    """A chat message's text: a string, or its text parts joined (as chat joins them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def place_system_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The one rule for system and developer messages, whatever the protocol.

    Those that open the conversation (before any other message) become one system message, their
    texts joined by a blank line: every chat template takes one, some (Qwen3.5/3.6) no more. One
    that arrives later is rendered where it arrived, as a user turn wrapped in
    ``<system-reminder>`` (what Claude Code itself sends when a server refuses a mid-conversation
    system message): never folded into an earlier message, so the history an earlier call
    rendered is never rewritten, and never a second system turn a template may refuse. Prefix
    stable: a message's rendering depends only on the messages before it.
    """
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in SYSTEM_ROLES:
        lead += 1
    out: list[dict[str, Any]] = []
    if lead == 1:
        out.append(messages[0])
    elif lead > 1:
        texts = [message_text(m.get("content")) for m in messages[:lead]]
        out.append({"role": "system", "content": LEADING_SEPARATOR.join(texts)})
    for message in messages[lead:]:
        if message.get("role") in SYSTEM_ROLES:
            text = message_text(message.get("content"))
            message = {"role": "user", "content": REMINDER_OPEN + text + REMINDER_CLOSE}
        out.append(message)
    return out


ERROR_PREFIX = "Error: "  # a tool result the agent marked as an error (Anthropic is_error, Bedrock status)


def tool_error_text(text: str) -> str:
    """A failed tool's result as the model reads it: marked, so the error reaches the model."""
    return ERROR_PREFIX + text
