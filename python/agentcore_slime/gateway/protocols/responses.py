"""OpenAI Responses (``POST /v1/responses``) over the chat core.

Shapes: the ``openai`` SDK's ``types/responses/`` (input items ``message``,
``function_call``, ``function_call_output``, ``reasoning``; the ``Response`` object; the
``ResponseStreamEvent`` union, each event with a ``sequence_number``). Errors are OpenAI's
(the chat path's).

Translation into the chat form the core renders (every field's fate: docs/agents.md):
- ``instructions`` -> a system message first; ``system`` / ``developer`` / ``user`` messages
  as they are (text parts joined), then the rule every protocol shares for system and
  developer messages (common.place_system_messages: the opening ones one system message, a
  later one a user turn in place);
- consecutive ``reasoning``, assistant ``message`` and ``function_call`` (``custom_tool_call``,
  ``local_shell_call``) items -> one assistant message (``reasoning_content``, ``content``,
  ``tool_calls``), as one turn's output items are echoed back;
- ``function_call_output`` (``custom_tool_call_output``, ``local_shell_call_output``) -> a
  ``tool`` message;
- function ``tools`` -> chat tools; a ``namespace`` tool's function tools are offered under
  their own names (a call of one goes back with its ``namespace``); a ``custom`` (freeform)
  tool -> a function of one string ``input``; ``local_shell`` -> a function ``local_shell``
  of its ``exec`` action; hosted tools (``web_search``, ``file_search``...: the node cannot
  run them) are not offered, and counted; ``tool_choice`` ``none`` renders without tools, the
  others are accepted and not enforced (as chat's ``required``);
- ``text.format`` (a JSON schema or object) names the call's constraint (not honoured);
- ``max_output_tokens``, ``temperature``, ``top_p`` as chat's (the trainer's values win).
``store`` is ignored (nothing is stored: the agent sends its whole conversation);
``previous_response_id`` and ``conversation`` get a 400; images and files too.
"""

from __future__ import annotations

import time
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
    suffix_id,
    tool_arguments,
)
from .sse import named_event

SAMPLING_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
#: tools OpenAI's servers run (the node cannot): not offered to the model, counted per call
HOSTED_TOOLS = (
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
    "file_search", "code_interpreter", "image_generation", "computer_use_preview", "computer",
    "mcp", "tool_search",
)
LOCAL_SHELL = "local_shell"
#: the function a ``local_shell`` tool is offered as: its ``exec`` action's fields
LOCAL_SHELL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "Command and arguments."},
        "workdir": {"type": "string", "description": "The working directory."},
        "timeout_ms": {"type": "integer", "description": "Time limit in milliseconds."},
    },
    "required": ["command"],
}
CUSTOM_INPUT = "input"  # the one string argument a custom (freeform) tool is offered with
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

    def _call(self, call_id: str, name: str, arguments: str) -> None:
        self.open_calls.add(call_id)
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        self.turn().setdefault("tool_calls", []).append(call)

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
            self._call(call_id, name, arguments)
        elif kind == "custom_tool_call":
            call_id = expect(item.get("call_id"), str, f"{where}.call_id", "a string")
            name = expect(item.get("name"), str, f"{where}.name", "a string")
            text = expect(item.get("input", ""), str, f"{where}.input", "a string")
            self._call(call_id, name, dump_arguments({CUSTOM_INPUT: text}))
        elif kind == "local_shell_call":
            call_id = expect(item.get("call_id"), str, f"{where}.call_id", "a string")
            action = expect(item.get("action"), dict, f"{where}.action", "an object")
            arguments = {k: action[k] for k in LOCAL_SHELL_PARAMETERS["properties"] if k in action}
            self._call(call_id, LOCAL_SHELL, dump_arguments(arguments))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
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
    return place_system_messages(turns.messages)


class _Tools:
    """The request's tools as chat tools, and what the reply needs to name a call as the agent
    expects it back (``extras``): each namespaced function's namespace, the custom tools, the
    local shell; the hosted tools not offered (``dropped_tools``)."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.namespaces: dict[str, str] = {}
        self.custom: list[str] = []
        self.dropped: list[str] = []
        self.local_shell = False

    def add(self, tool: Any, where: str, namespace: str | None = None) -> None:
        expect(tool, dict, where, "a tool object")
        kind = tool.get("type")
        if kind == "function":
            function = chat_tool(
                tool.get("name"), tool.get("description"), tool.get("parameters"), where, tool.get("strict")
            )
            self._offer(function, namespace)
        elif kind == "custom":
            name = tool.get("name")
            schema = {
                "type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}}, "required": [CUSTOM_INPUT]
            }
            self._offer(chat_tool(name, tool.get("description"), schema, where), namespace)
            self.custom.append(str(name))
        elif kind == "namespace" and namespace is None:
            name = expect(tool.get("name"), str, f"{where}.name", "a string")
            for j, inner in enumerate(expect(tool.get("tools"), list, f"{where}.tools", "a list of tools")):
                self.add(inner, f"{where}.tools[{j}]", name)
        elif kind == LOCAL_SHELL and namespace is None:
            self.local_shell = True
            self._offer(chat_tool(LOCAL_SHELL, "Runs a shell command.", LOCAL_SHELL_PARAMETERS, where), None)
        elif kind in HOSTED_TOOLS and namespace is None:
            self.dropped.append(str(kind))
        else:
            raise BadRequest(f"{where}: tool type {kind!r} is not supported", param=where)

    def _offer(self, tool: dict[str, Any], namespace: str | None) -> None:
        if namespace is not None:
            self.namespaces[tool["function"]["name"]] = namespace
        self.out.append(tool)

    def extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        if self.namespaces:
            extras["namespaces"] = self.namespaces
        if self.custom:
            extras["custom_tools"] = self.custom
        if self.local_shell:
            extras["local_shell"] = True
        if self.dropped:
            extras["dropped_tools"] = self.dropped
        return extras


def chat_tools(body: dict[str, Any], extras: dict[str, Any] | None = None) -> list[dict[str, Any]] | None:
    """The tools the model is offered (``extras`` gets what the reply needs, see :class:`_Tools`)."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    expect(tools, list, "tools", "a list of tool objects")
    found = _Tools()
    for i, tool in enumerate(tools):
        found.add(tool, f"tools[{i}]")
    if extras is not None:
        extras.update(found.extras())
    choice = body.get("tool_choice")
    if choice == "none":
        return None
    if choice is not None and choice not in ("auto", "required") and not isinstance(choice, dict):
        raise BadRequest(
            f"tool_choice {choice!r} is not auto, none, required or an object", param="tool_choice"
        )
    return found.out or None


def text_format(body: dict[str, Any]) -> str:
    """``text.format`` when it constrains the reply (a JSON schema or object), else ""."""
    text = body.get("text")
    form = text.get("format") if isinstance(text, dict) else None
    kind = form.get("type") if isinstance(form, dict) else None
    return "text.format" if kind in ("json_schema", "json_object") else ""


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
        extras: dict[str, Any] = {}
        return ChatRequest(
            messages=chat_messages(body),
            tools=chat_tools(body, extras),
            stream=bool(expect(body.get("stream", False), bool, "stream", "a boolean")),
            max_tokens=optional_positive_int(body, "max_output_tokens", "max_output_tokens"),
            agent_sampling=agent_sampling(body, SAMPLING_NAMES),
            model=str(body.get("model") or ""),
            constraint=text_format(body),
            extras=extras,
        )

    def reply(self, request: ChatRequest, completion: Completion) -> Body:
        response = response_object(completion, request.extras)
        if not request.stream:
            return dump_json(response), "application/json"
        return stream_events(response), "text/event-stream"


def call_item(call: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    """A tool call as the output item the agent expects for its tool: a ``function_call`` (with
    its ``namespace`` when the function came in one), a ``custom_tool_call``, a ``local_shell_call``."""
    name, arguments = call["function"]["name"], call["function"]["arguments"]
    item_id = suffix_id(call["id"], "fc_")
    if name in extras.get("custom_tools", ()):
        text = tool_arguments(arguments).get(CUSTOM_INPUT)
        return {
            "type": "custom_tool_call", "id": item_id, "call_id": call["id"], "name": name,
            "input": text if isinstance(text, str) else arguments, "status": "completed",
        }
    if name == LOCAL_SHELL and extras.get("local_shell"):
        action = {"type": "exec", "env": {}, **tool_arguments(arguments)}
        return {
            "type": "local_shell_call", "id": item_id, "call_id": call["id"], "action": action,
            "status": "completed",
        }
    item = {
        "type": "function_call", "id": item_id, "call_id": call["id"], "name": name,
        "arguments": arguments, "status": "completed",
    }
    namespace = extras.get("namespaces", {}).get(name)
    if namespace is not None:
        item["namespace"] = namespace
    return item


def output_items(message: dict[str, Any], extras: dict[str, Any] | None = None) -> list[dict[str, Any]]:
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
        items.append(call_item(call, extras or {}))
    return items


def response_object(completion: Completion, extras: dict[str, Any] | None = None) -> dict[str, Any]:
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
        "output": output_items(completion.message, extras),
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
    if item["type"] in ("custom_tool_call", "local_shell_call"):
        body = []  # added, then done whole (no delta event the clients need)
        empty = {**item, "status": "in_progress"}
    elif item["type"] == "function_call":
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
