"""OpenAI chat-completions wire format: request validation, replies, SSE chunks, errors.

Pure functions (no I/O) so they can be tested on their own. Reference: gateway-contract.md
§3 (request/response shapes, SDK retry rules) and §9 (reply from a parsed completion).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

MAX_STOP_STRINGS = 32  # SGLang 0.5.23's limit (0.5.13 has none)
MAX_DEPTH = 64  # JSON nesting a chat request may use; deeper bodies hit recursion limits downstream


class BadRequest(ValueError):
    """A request the agent must fix: answered 400 with an OpenAI error body."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass
class ChatRequest:
    """The parts of a chat-completions request the gateway uses."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    agent_sampling: dict[str, float | int] = field(default_factory=dict)
    model: str = ""
    #: the request's constraint on the reply's form, as the protocol names it
    #: (``output_config.format``, ``response_format``, ``text.format``); "" when none. Never
    #: honoured on a trained call; with no tools it names an untrained side call (side_calls.py)
    constraint: str = ""
    #: what the protocol's adapter keeps from the request for its reply (e.g. Responses' namespaces)
    extras: dict[str, Any] = field(default_factory=dict)


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{key} must be a positive integer, got {value!r}", param=key)
    return int(value)


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, bool) and isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            number = math.inf
        if math.isfinite(number):
            return number
    raise BadRequest(f"{key} must be a finite number, got {str(value)[:40]}", param=key)


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of message objects", param="messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string role", param=f"messages[{i}]")
        _tool_calls(msg.get("tool_calls"), f"messages[{i}].tool_calls")
    return messages


def _tool_calls(calls: Any, where: str) -> None:
    """An assistant message's ``tool_calls``: null or a list of ``{function: {name, arguments}}``."""
    if calls is None:
        return
    if not isinstance(calls, list):
        raise BadRequest(f"{where} must be a list of tool call objects", param=where)
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f"{where}[{j}] must be {{type: function, function: {{name, arguments}}}}",
                param=f"{where}[{j}]",
            )
        if not isinstance(fn.get("arguments"), str | dict | None):
            raise BadRequest(f"{where}[{j}].function.arguments must be a JSON string", param=f"{where}[{j}]")


def _tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None or tools == []:
        return None  # strands always sends [] when the agent has no tools
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list of {type: function, function: {...}} objects", param="tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f"tools[{i}] must be {{type: function, function: {{name, ...}}}}", param=f"tools[{i}]"
            )
    if body.get("tool_choice") == "none":
        return None  # render without tools: the model cannot call any
    return tools


def _stop(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("stop must be a non-empty string or a list of them", param="stop")
    if len(stops) > MAX_STOP_STRINGS:
        raise BadRequest(f"at most {MAX_STOP_STRINGS} stop strings are supported", param="stop")
    return stops


def _agent_sampling(body: dict[str, Any]) -> dict[str, float | int]:
    """The agent's temperature / top_p / top_k, in the ranges SGLang accepts.

    ``top_k`` goes out as a JSON integer: sglang-router 0.3.2 deserializes it as i32 and
    answers 422 to ``20.0`` (SGLang 0.5.13 itself would take it).
    """
    sampling: dict[str, float | int] = {
        k: v for k in ("temperature", "top_p", "top_k") if (v := _number(body, k)) is not None
    }
    if sampling.get("temperature", 0.0) < 0:
        raise BadRequest("temperature must be >= 0", param="temperature")
    if not 0 < sampling.get("top_p", 1.0) <= 1:
        raise BadRequest("top_p must be in (0, 1]", param="top_p")
    if "top_k" in sampling:
        top_k = sampling["top_k"]
        if top_k != int(top_k) or not (top_k == -1 or top_k >= 1):
            raise BadRequest("top_k must be an integer, -1 (off) or >= 1", param="top_k")
        sampling["top_k"] = int(top_k)
    return sampling


def parse_request(raw: bytes) -> ChatRequest:
    """Validate a chat-completions body.

    :raises BadRequest: with what is wrong and which field.
    """
    body = load_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    n = body.get("n", 1)
    if n != 1:
        raise BadRequest("only n=1 is supported (send one request per sample)", param="n")
    max_tokens = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
    sampling = _agent_sampling(body)
    stream_options = body.get("stream_options") or {}
    return ChatRequest(
        messages=_messages(body),
        tools=_tools(body),
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        max_tokens=max_tokens,
        stop=_stop(body),
        agent_sampling=sampling,
        model=str(body.get("model") or ""),
        constraint=response_format(body.get("response_format")),
    )


def response_format(value: Any) -> str:
    """``response_format`` when it constrains the reply (a JSON schema or JSON object), else ""."""
    kind = value.get("type") if isinstance(value, dict) else None
    return "response_format" if kind in ("json_schema", "json_object") else ""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (send finite numbers)")


ROUNDED_INT = float(2**63)  # orjson reads a longer integer as a float at least this large


def load_json(raw: bytes) -> Any:
    """Strict JSON: no NaN / Infinity (nor numbers that overflow to them), at most
    :data:`MAX_DEPTH` levels of nesting.

    orjson parses a chat body several times faster than the standard parser and refuses
    the same non-finite numbers; a body it refuses (lone surrogate escapes, nesting beyond
    its limit), or that holds a float as large as an integer orjson would have rounded, is
    parsed again by the standard parser, so the result and the errors do not depend on
    which parser ran.

    :raises BadRequest: with what is wrong.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        too_deep, huge = _shape(body, MAX_DEPTH)
        if too_deep:
            raise BadRequest(f"request body is nested deeper than {MAX_DEPTH} levels")
        if not huge:
            return body
    try:
        body = json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # UnicodeDecodeError included
        raise BadRequest(f"request body is not valid JSON: {err}") from None
    if _depth_exceeds(body, MAX_DEPTH):
        raise BadRequest(f"request body is nested deeper than {MAX_DEPTH} levels")
    return body


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (iterative: no recursion)."""
    return _shape(value, limit)[0]


def _shape(value: Any, limit: int) -> tuple[bool, bool]:
    """(nests containers more than ``limit`` deep, holds a float of magnitude >= 2**63), in
    one iterative walk."""
    huge = type(value) is float and not -ROUNDED_INT < value < ROUNDED_INT
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True, huge
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif type(child) is float and not -ROUNDED_INT < child < ROUNDED_INT:
                huge = True
    return False, huge


def dump_json(value: Any) -> bytes:
    """JSON bytes (UTF-8, not ASCII-escaped); what orjson refuses (lone surrogates, integers
    beyond 64 bits) goes through the standard encoder, ASCII-escaped."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value).encode()


def new_id(prefix: str) -> str:
    """A random id such as ``chatcmpl-<24 hex>`` (cheaper than uuid4 on the hot path)."""
    return f"{prefix}{secrets.token_hex(12)}"


def error_body(
    message: str, kind: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An OpenAI error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def finish_reason(engine_finish: str, message: dict[str, Any]) -> str:
    """OpenAI finish_reason: tool calls on a stop win, then length, else stop."""
    if engine_finish == "length":
        return "length"
    return "tool_calls" if message.get("tool_calls") else "stop"


@dataclass
class Reply:
    """Everything needed to write the reply in either mode."""

    model: str
    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    id: str = field(default_factory=lambda: new_id("chatcmpl-"))
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def completion(self) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` object."""
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": self.message, "finish_reason": self.finish_reason, "logprobs": None}
            ],
            "usage": self.usage,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def sse_events(self, include_usage: bool) -> list[bytes]:
        """SSE events for the whole reply (generated in full first, reference §9)."""
        chunks = [self._chunk({"role": "assistant", "content": ""})]
        if self.message.get("reasoning_content"):
            chunks.append(self._chunk({"reasoning_content": self.message["reasoning_content"]}))
        if self.message.get("content"):
            chunks.append(self._chunk({"content": self.message["content"]}))
        calls = self.message.get("tool_calls") or []
        if calls:  # all calls in one chunk: splitting them made some clients merge parallel calls
            chunks.append(self._chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}))
        chunks.append(self._chunk({}, self.finish_reason))
        if include_usage:
            chunks.append({**self._chunk({}), "choices": [], "usage": self.usage})
        events = [b"data: " + dump_json(c) + b"\n\n" for c in chunks]
        return [*events, b"data: [DONE]\n\n"]
