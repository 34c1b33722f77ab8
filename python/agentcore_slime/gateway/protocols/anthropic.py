"""Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``) over the core.

Shapes: the ``anthropic`` SDK's ``types/`` (request params, ``Message``, content blocks) and
``lib/streaming`` (the SSE events its accumulator reads, in order: ``message_start``,
``content_block_start`` / ``_delta`` / ``_stop`` per block, ``message_delta`` with the stop
reason and usage, ``message_stop``). Errors: ``{"type": "error", "error": {"type", "message"}}``.

Translation into the chat form the core renders (every field's fate: docs/agents.md):
- ``system`` (a string or text blocks) -> a system message, blocks joined by a blank line;
  Claude Code's ``x-anthropic-billing-header:`` block (per-call metadata, not prompt) is dropped;
- a ``system`` message inside ``messages`` (Claude Code's mid-conversation system messages) ->
  rendered where it arrives, by the rule every protocol shares (common.place_system_messages);
- a user turn's ``tool_result`` blocks -> ``tool`` messages (in order; ``is_error`` marks the
  text), its text -> a user message;
- an assistant turn's text -> ``content``, ``tool_use`` -> ``tool_calls`` (arguments
  ``json.dumps(input)``), ``thinking`` -> ``reasoning_content``;
- ``tools`` -> OpenAI function tools; server tools (``web_search_...``: the node cannot run
  them) are not offered and are counted; ``tool_choice`` ``none`` renders without tools,
  ``auto`` / ``any`` / ``tool`` are accepted and not enforced (as chat's ``required``);
- ``output_config.format`` names the call's constraint (not honoured; without tools: a side call);
- ``stop_sequences``, ``max_tokens``, ``temperature`` / ``top_p`` / ``top_k`` as chat's
  ``stop``, ``max_tokens`` and sampling (the trainer's values win).
``cache_control``, ``thinking``, ``context_management``, ``metadata`` and
``output_config.effort`` are accepted and ignored; images and documents get a 400.
"""

from __future__ import annotations

from typing import Any

from ..wire import BadRequest, ChatRequest, dump_json, new_id
from .base import Body, Completion, Protocol
from .common import (
    agent_sampling,
    chat_tool,
    dump_arguments,
    expect,
    json_object,
    optional_positive_int,
    place_system_messages,
    stop_strings,
    suffix_id,
    tool_arguments,
    tool_error_text,
)
from .sse import named_event

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
SAMPLING_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
IGNORED_BLOCKS = {"redacted_thinking"}  # the model's hidden reasoning: nothing to render
#: the first line of the block Claude Code puts first in ``system`` (unless
#: CLAUDE_CODE_ATTRIBUTION_HEADER=0): Anthropic's billing metadata, whose hash changes per call
BILLING_HEADER = "x-anthropic-billing-header:"
SYSTEM_SEPARATOR = "\n\n"  # between system blocks: separate paragraphs (Anthropic documents no join)


def without_billing_header(text: str) -> str:
    """``text`` without a leading billing-header line: metadata for Anthropic's billing, never
    prompt; it changes per call and would fork every call."""
    if not text.startswith(BILLING_HEADER):
        return text
    return text.split("\n", 1)[1] if "\n" in text else ""


def system_text(system: Any, where: str = "system") -> str | None:
    """``system``: a string or a list of text blocks (joined by a blank line), without the
    billing header (None: no system text)."""
    if system is None:
        return None
    if isinstance(system, str):
        return without_billing_header(system)
    blocks = expect(system, list, where, "a string or a list of text blocks")
    texts = [without_billing_header(_text_block(block, f"{where}[{i}]")) for i, block in enumerate(blocks)]
    return SYSTEM_SEPARATOR.join(text for text in texts if text)


def _text_block(block: Any, where: str) -> str:
    expect(block, dict, where, "a content block object")
    if block.get("type") != "text":
        raise BadRequest(f"{where} must be a text block, got type {block.get('type')!r}", param=where)
    return str(expect(block.get("text"), str, f"{where}.text", "a string"))


def _unsupported(kind: Any, where: str) -> BadRequest:
    if kind in ("image", "document", "search_result", "container_upload"):
        return BadRequest(f"{where}: {kind} blocks are not supported (send text)", param=where)
    return BadRequest(f"{where}: unknown content block type {kind!r}", param=where)


def _tool_result_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    blocks = expect(content, list, where, "a string or a list of text blocks")
    texts = []
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind != "text":
            raise _unsupported(kind, f"{where}[{i}]")
        texts.append(_text_block(block, f"{where}[{i}]"))
    return "".join(texts)


def _user_turn(content: Any, where: str, open_calls: set[str]) -> list[dict[str, Any]]:
    """A user turn: its tool results as tool messages, its text as a user message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    blocks = expect(content, list, f"{where}.content", "a string or a list of content blocks")
    out: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        at = f"{where}.content[{i}]"
        expect(block, dict, at, "a content block object")
        kind = block.get("type")
        if kind == "text":
            texts.append({"type": "text", "text": _text_block(block, at)})
        elif kind == "tool_result":
            call_id = expect(block.get("tool_use_id"), str, f"{at}.tool_use_id", "a string")
            if call_id not in open_calls:
                raise BadRequest(
                    f"{at}: tool_result {call_id!r} answers no tool_use of the previous assistant turn",
                    param=at,
                )
            open_calls.discard(call_id)
            if texts:  # text before a tool result stays before it
                out.append({"role": "user", "content": texts})
                texts = []
            text = _tool_result_text(block.get("content"), f"{at}.content")
            if expect(block.get("is_error", False), (bool, type(None)), f"{at}.is_error", "a boolean"):
                text = tool_error_text(text)
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise _unsupported(kind, at)
    if texts or not out:
        out.append({"role": "user", "content": texts})
    return out


def _assistant_turn(content: Any, where: str, open_calls: set[str]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    blocks = expect(content, list, f"{where}.content", "a string or a list of content blocks")
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        at = f"{where}.content[{i}]"
        expect(block, dict, at, "a content block object")
        kind = block.get("type")
        if kind == "text":
            texts.append(_text_block(block, at))
        elif kind == "thinking":
            reasoning.append(str(expect(block.get("thinking"), str, f"{at}.thinking", "a string")))
        elif kind == "tool_use":
            call_id = expect(block.get("id"), str, f"{at}.id", "a string")
            name = expect(block.get("name"), str, f"{at}.name", "a string")
            arguments = expect(block.get("input", {}), dict, f"{at}.input", "an object")
            open_calls.add(call_id)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": dump_arguments(arguments)},
                }
            )
        elif kind not in IGNORED_BLOCKS:
            raise _unsupported(kind, at)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's ``system`` and ``messages`` as chat messages."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of message objects", param="messages")
    out: list[dict[str, Any]] = []
    system = system_text(body.get("system"))
    if system is not None:
        out.append({"role": "system", "content": system})
    open_calls: set[str] = set()
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        expect(msg, dict, where, "a message object")
        role = msg.get("role")
        if role == "user":
            out.extend(_user_turn(msg.get("content"), where, open_calls))
        elif role == "system":  # Claude Code's mid-conversation system messages
            text = system_text(msg.get("content"), f"{where}.content") or ""
            out.append({"role": "system", "content": text})
        elif role == "assistant":
            open_calls = set()  # a tool_result answers the assistant turn just before it
            out.append(_assistant_turn(msg.get("content"), where, open_calls))
        else:
            raise BadRequest(
                f"{where}.role must be user, assistant or system, got {role!r}", param=f"{where}.role"
            )
    return place_system_messages(out)


def chat_tools(body: dict[str, Any], dropped: list[str]) -> list[dict[str, Any]] | None:
    """The tools the model is offered; server tools (run by Anthropic's servers, which the node
    cannot run) are not offered: their names go to ``dropped``."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    expect(tools, list, "tools", "a list of tool objects")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        expect(tool, dict, where, "a tool object")
        if tool.get("type", "custom") not in ("custom", None):
            dropped.append(str(tool.get("name") or tool.get("type")))
            continue
        out.append(
            chat_tool(
                tool.get("name"), tool.get("description"), tool.get("input_schema"), where, tool.get("strict")
            )
        )
    choice = body.get("tool_choice")
    if choice is not None:
        kind = expect(choice, dict, "tool_choice", "an object").get("type")
        if kind not in ("auto", "any", "tool", "none"):
            raise BadRequest(f"tool_choice.type {kind!r} is not auto, any, tool or none", param="tool_choice")
        if kind == "none":
            return None  # render without tools: the model cannot call any
    return out or None


def output_format(body: dict[str, Any]) -> str:
    """``output_config.format`` when the request constrains the reply's form, else ""."""
    config = body.get("output_config")
    if config is None:
        return ""
    config = expect(config, dict, "output_config", "an object")
    return "output_config.format" if config.get("format") is not None else ""


class Messages(Protocol):
    """``POST /v1/messages`` (and ``count_tokens``)."""

    name = "anthropic"

    def parse(self, raw: bytes) -> ChatRequest:
        body = json_object(raw)
        dropped: list[str] = []
        return ChatRequest(
            messages=chat_messages(body),
            tools=chat_tools(body, dropped),
            stream=bool(expect(body.get("stream", False), bool, "stream", "a boolean")),
            max_tokens=optional_positive_int(body, "max_tokens", "max_tokens"),
            stop=stop_strings(body.get("stop_sequences"), "stop_sequences"),
            agent_sampling=agent_sampling(body, SAMPLING_NAMES),
            model=str(body.get("model") or ""),
            constraint=output_format(body),
            extras={"dropped_tools": dropped} if dropped else {},
        )

    def reply(self, request: ChatRequest, completion: Completion) -> Body:
        message = message_object(completion)
        if not request.stream:
            return dump_json(message), "application/json"
        return stream_events(message), "text/event-stream"

    def error_body(
        self, status: int, message: str, kind: str, *, code: str | None, param: str | None
    ) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type(status), "message": message}}

    def count_reply(self, tokens: int) -> bytes:
        return dump_json({"input_tokens": tokens})


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def stop_reason(completion: Completion) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``): a length cut wins, as chat's ``length`` does."""
    if completion.finish == "length":
        return "max_tokens", None
    if completion.message.get("tool_calls"):
        return "tool_use", None
    if completion.matched is not None:
        return "stop_sequence", completion.matched
    return "end_turn", None


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": suffix_id(call["id"], "toolu_"),
                "name": call["function"]["name"],
                "input": tool_arguments(call["function"]["arguments"]),
            }
        )
    return blocks


def message_object(completion: Completion, message_id: str | None = None) -> dict[str, Any]:
    """The ``Message`` a non-streaming call returns."""
    reason, sequence = stop_reason(completion)
    return {
        "id": message_id or new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": completion.model,
        "content": content_blocks(completion.message),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {"input_tokens": completion.prompt_tokens, "output_tokens": completion.completion_tokens},
    }


def stream_payloads(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream's events (whole turn, one delta per block) for a finished ``Message``."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**message["usage"], "output_tokens": 0}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        empty: dict[str, Any]
        delta: dict[str, Any]
        if block["type"] == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        elif block["type"] == "text":
            empty, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": dump_json(block["input"]).decode()}
        events += [
            {"type": "content_block_start", "index": index, "content_block": empty},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def stream_events(message: dict[str, Any]) -> list[bytes]:
    return [named_event(event["type"], event) for event in stream_payloads(message)]
