"""OpenAI Responses (``POST /v1/responses``) over the chat core.

Shapes: the ``openai`` SDK's ``types/responses/`` (input items ``message``,
``function_call``, ``function_call_output``, ``reasoning``; the ``Response`` object; the
``ResponseStreamEvent`` union, each event with a ``sequence_number``). Errors are OpenAI's
(the chat path's).

Translation into the chat form the core renders:
- ``instructions`` -> a system message first; ``system`` / ``developer`` / ``user`` messages
  as they are (text parts joined);
- consecutive ``reasoning``, assistant ``message`` and ``function_call`` items -> one
  assistant message (``reasoning_content``, ``content``, ``tool_calls``), as one turn's
  output items are echoed back;
- ``function_call_output`` -> a ``tool`` message;
- function ``tools`` -> chat tools; ``tool_choice`` ``none`` renders without tools, the
  others are accepted and not enforced (as chat's ``required``);
- ``max_output_tokens``, ``temperature``, ``top_p`` as chat's (the trainer's values win).
``store`` is ignored (nothing is stored: the agent sends its whole conversation);
``previous_response_id`` and ``conversation`` get a 400; images, files and built-in tools too.
"""

from __future__ import annotations

import time
from typing import Any

from ..wire import BadRequest, ChatRequest, dump_json, new_id
from .base import Body, Completion, Protocol
from .common import (
    agent_sampling,
    chat_tool,
    expect,
    json_object,
    optional_positive_int,
    suffix_id,
)
from .sse import named_event

SAMPLING_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
TEXT_PARTS = ("input_text", "output_text", "text")
ROLES = ("user", "system", "developer", "assistant")


def _text(content: Any, where: str) -> str:
    """A message's content: a string or a list of text parts (joined, as chat joins them)."""
    if isinstance(content, str):
        return content
    parts = expect(content, list, where, "a string or a list of content parts")
    texts = []
    for i, part in enumerate(parts):
        expect(part, dict, f"{where}[{i}]", "a content part object")
        kind = part.get("type")
        if kind == "refusal":
            texts.append(str(expect(part.get("refusal"), str, f"{where}[{i}].refusal", "a string")))
        elif kind in TEXT_PARTS:
            texts.append(str(expect(part.get("text"), str, f"{where}[{i}].text", "a string")))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise BadRequest(
                f"{where}[{i}]: {kind} parts are not supported (send text)", param=f"{where}[{i}]"
            )
        else:
            raise BadRequest(f"{where}[{i}]: unknown content part type {kind!r}", param=f"{where}[{i}]")
    return "".join(texts)


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """A reasoning item's full text (``content``), else its summary."""
    for key, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key)
        if parts:
            expect(parts, list, f"{where}.{key}", "a list")
            texts = []
            for i, part in enumerate(parts):
                if not isinstance(part, dict) or part.get("type") != kind:
                    raise BadRequest(f"{where}.{key}[{i}] must be a {kind} part", param=f"{where}.{key}[{i}]")
                texts.append(str(expect(part.get("text"), str, f"{where}.{key}[{i}].text", "a string")))
            return "".join(texts)
    return ""


class _Turns:
    """Builds chat messages, folding one turn's assistant items into one message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.assistant: dict[str, Any] | None = None
        self.open_calls: set[str] = set()

    def flush(self) -> None:
        if self.assistant is not None:
            self.messages.append(self.assistant)
            self.assistant = None

    def turn(self) -> dict[str, Any]:
        if self.assistant is None:
            self.assistant = {"role": "assistant", "content": None}
        return self.assistant

    def add(self, item: Any, where: str) -> None:
        expect(item, dict, where, "an input item object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise BadRequest(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", param=where)
            text = _text(item.get("content"), f"{where}.content")
            if role == "assistant":
                if self.assistant is not None and (
                    self.assistant["content"] is not None or "tool_calls" in self.assistant
                ):
                    self.flush()
                self.turn()["content"] = text
                return
            self.flush()
            self.messages.append({"role": role, "content": text})
        elif kind == "reasoning":
            self.flush()
            text = _reasoning_text(item, where)
            if text:
                self.turn()["reasoning_content"] = text
        elif kind == "function_call":
            call_id = expect(item.get("call_id"), str, f"{where}.call_id", "a string")
            name = expect(item.get("name"), str, f"{where}.name", "a string")
            arguments = expect(item.get("arguments"), str, f"{where}.arguments", "a JSON string")
            self.open_calls.add(call_id)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            self.turn().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = expect(item.get("call_id"), str, f"{where}.call_id", "a string")
            if call_id not in self.open_calls:
                raise BadRequest(
                    f"{where}: function_call_output {call_id!r} answers no function_call", param=where
                )
            self.open_calls.discard(call_id)
            self.flush()
            output = _text(item.get("output", ""), f"{where}.output")
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            raise BadRequest(f"{where}: input item type {kind!r} is not supported", param=where)


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    turns = _Turns()
    instructions = body.get("instructions")
    if instructions is not None:
        turns.messages.append(
            {"role": "system", "content": expect(instructions, str, "instructions", "a string")}
        )
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("input must be a string or a non-empty list of input items", param="input")
    for i, item in enumerate(items):
        turns.add(item, f"input[{i}]")
    turns.flush()
    return turns.messages


def chat_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    expect(tools, list, "tools", "a list of tool objects")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        expect(tool, dict, where, "a tool object")
        if tool.get("type") != "function":
            raise BadRequest(
                f"{where}: tool type {tool.get('type')!r} is not supported (use function tools)", param=where
            )
        out.append(
            chat_tool(
                tool.get("name"), tool.get("description"), tool.get("parameters"), where, tool.get("strict")
            )
        )
    choice = body.get("tool_choice")
    if choice == "none":
        return None
    if choice is not None and choice not in ("auto", "required") and not isinstance(choice, dict):
        raise BadRequest(
            f"tool_choice {choice!r} is not auto, none, required or an object", param="tool_choice"
        )
    return out


class Responses(Protocol):
    """``POST /v1/responses``."""

    name = "responses"

    def parse(self, raw: bytes) -> ChatRequest:
        body = json_object(raw)
        for key in ("previous_response_id", "conversation"):
            if body.get(key) is not None:
                raise BadRequest(
                    f"{key} is not supported: the gateway stores no responses (send the whole "
                    "conversation in input, with store false)",
                    param=key,
                )
        return ChatRequest(
            messages=chat_messages(body),
            tools=chat_tools(body),
            stream=bool(expect(body.get("stream", False), bool, "stream", "a boolean")),
            max_tokens=optional_positive_int(body, "max_output_tokens", "max_output_tokens"),
            agent_sampling=agent_sampling(body, SAMPLING_NAMES),
            model=str(body.get("model") or ""),
        )

    def reply(self, request: ChatRequest, completion: Completion) -> Body:
        response = response_object(completion)
        if not request.stream:
            return dump_json(response), "application/json"
        return stream_events(response), "text/event-stream"


def output_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        items.append(
            {
                "type": "reasoning",
                "id": new_id("rs_"),
                "summary": [],
                "content": [{"type": "reasoning_text", "text": message["reasoning_content"]}],
                "status": "completed",
            }
        )
    if message.get("content"):
        part = {"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in message.get("tool_calls") or []:
        items.append(
            {
                "type": "function_call",
                "id": suffix_id(call["id"], "fc_"),
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def response_object(completion: Completion) -> dict[str, Any]:
    """The ``Response`` a non-streaming call returns (``incomplete`` when cut at max tokens)."""
    cut = completion.finish == "length"
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": completion.model,
        "output": output_items(completion.message),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": completion.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": completion.prompt_tokens + completion.completion_tokens,
        },
    }


def _item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """One output item's events: added (empty), its content as one delta, done."""
    ids = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        empty = {**item, "arguments": "", "status": "in_progress"}
        body = [
            {"type": "response.function_call_arguments.delta", **ids, "delta": item["arguments"]},
            {
                "type": "response.function_call_arguments.done",
                **ids,
                "name": item["name"],
                "arguments": item["arguments"],
            },
        ]
    elif item["type"] == "message":
        part = item["content"][0]
        empty = {**item, "content": [], "status": "in_progress"}
        at = {**ids, "content_index": 0}
        body = [
            {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []},
            {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []},
            {"type": "response.content_part.done", **at, "part": part},
        ]
    else:
        text = item["content"][0]["text"]
        empty = {**item, "content": [], "status": "in_progress"}
        at = {**ids, "content_index": 0}
        body = [
            {"type": "response.reasoning_text.delta", **at, "delta": text},
            {"type": "response.reasoning_text.done", **at, "text": text},
        ]
    return [
        {"type": "response.output_item.added", "output_index": index, "item": empty},
        *body,
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def stream_payloads(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream's events for a finished ``Response`` (whole turn, one delta per item)."""
    started = {**response, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(response["output"]):
        events += _item_events(index, item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append({"type": final, "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def stream_events(response: dict[str, Any]) -> list[bytes]:
    return [named_event(event["type"], event) for event in stream_payloads(response)]
