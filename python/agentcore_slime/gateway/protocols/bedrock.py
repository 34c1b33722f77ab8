"""Amazon Bedrock runtime over the chat core: Converse / ConverseStream, and InvokeModel
(and its response stream) with the Anthropic Messages body.

Shapes: botocore's ``data/bedrock-runtime/2023-09-30/service-2.json`` (``Converse``,
``ConverseStream``, ``InvokeModel``, ``InvokeModelWithResponseStream``); the streams are
AWS event-stream frames (:mod:`.eventstream`). Errors: the HTTP status, an
``x-amzn-errortype`` header naming the exception (``ValidationException``...) and a JSON
``message``, which is what botocore turns into ``ClientError``.

The request's SigV4 signature is not checked (the gateway is not AWS: any credentials
do), and no header of the request is logged. botocore sends one ``amz-sdk-invocation-id``
for all the attempts of a call: it is the idempotency key, so a retried call whose reply
was delivered gets the same reply and is traced once.

Converse translation into the chat form the core renders:
- ``system`` text blocks -> a system message (joined by a blank line);
- a user turn's ``toolResult`` blocks -> ``tool`` messages (``text`` kept, ``json``
  written as ``json.dumps``; ``status: error`` marks the text), its text blocks -> a user message;
- an assistant turn's ``text`` -> ``content``, ``toolUse`` -> ``tool_calls``,
  ``reasoningContent`` -> ``reasoning_content``;
- ``toolConfig.tools`` ``toolSpec``s -> chat tools; ``toolChoice`` (``auto``, ``any``,
  ``tool``) is accepted and not enforced (as chat's ``required``);
- ``inferenceConfig`` ``maxTokens`` / ``temperature`` / ``topP`` / ``stopSequences`` and
  ``additionalModelRequestFields.top_k`` as chat's (the trainer's values win).
``cachePoint`` blocks are accepted and ignored; images, documents, videos and guard content
get a ``ValidationException``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from ..wire import BadRequest, ChatRequest, dump_json
from .anthropic import SYSTEM_SEPARATOR, Messages, message_object, stream_payloads
from .base import Body, Completion, Protocol
from .common import (
    agent_sampling,
    chat_tool,
    dump_arguments,
    expect,
    json_object,
    optional_positive_int,
    stop_strings,
    suffix_id,
    tool_arguments,
    tool_error_text,
)
from .eventstream import CONTENT_TYPE, event_message

INVOCATION_ID = "amz-sdk-invocation-id"  # one per botocore call, the same on each of its retries
EXCEPTIONS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    413: "ValidationException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}
UNSUPPORTED = ("image", "document", "video", "guardContent", "citationsContent", "searchResult", "audio")


class BedrockCalls(Protocol):
    """What Bedrock's routes share whatever their body: Bedrock's errors, and botocore's
    invocation id as the idempotency key, and streaming said by the route (the body has no
    stream key). Listed first among a route's bases."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream

    def error_body(
        self, status: int, message: str, kind: str, *, code: str | None, param: str | None
    ) -> dict[str, Any]:
        return {"message": message}

    def error_headers(self, status: int, retry: bool) -> dict[str, str]:
        """The exception's name, which botocore reads as the error code and retries by."""
        name = EXCEPTIONS.get(status, "InternalServerException" if status >= 500 else "ValidationException")
        return {"x-amzn-errortype": f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"}

    def idempotency_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get(INVOCATION_ID) or headers.get("Idempotency-Key") or None


def _block(block: Any, where: str) -> tuple[str, Any]:
    """A content block's one member: (its name, its value)."""
    expect(block, dict, where, "a content block object")
    keys = [key for key in block if block[key] is not None]
    if len(keys) != 1:
        raise BadRequest(f"{where} must have exactly one member, got {sorted(block)}", param=where)
    kind = keys[0]
    if kind in UNSUPPORTED:
        raise BadRequest(f"{where}: {kind} blocks are not supported (send text)", param=where)
    return kind, block[kind]


def _tool_result_text(content: Any, where: str) -> str:
    texts = []
    for i, block in enumerate(expect(content or [], list, where, "a list of tool result blocks")):
        kind, value = _block(block, f"{where}[{i}]")
        if kind == "text":
            texts.append(str(expect(value, str, f"{where}[{i}].text", "a string")))
        elif kind == "json":
            texts.append(json.dumps(value, ensure_ascii=False))
        else:
            raise BadRequest(f"{where}[{i}]: unknown tool result block {kind!r}", param=f"{where}[{i}]")
    return "".join(texts)


def _user_turn(content: list[Any], where: str, open_calls: set[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind, value = _block(block, at)
        if kind == "text":
            texts.append({"type": "text", "text": expect(value, str, f"{at}.text", "a string")})
        elif kind == "toolResult":
            expect(value, dict, f"{at}.toolResult", "an object")
            call_id = expect(value.get("toolUseId"), str, f"{at}.toolResult.toolUseId", "a string")
            if call_id not in open_calls:
                raise BadRequest(
                    f"{at}: toolResult {call_id!r} answers no toolUse of the previous assistant turn",
                    param=at,
                )
            open_calls.discard(call_id)
            if texts:
                out.append({"role": "user", "content": texts})
                texts = []
            text = _tool_result_text(value.get("content"), f"{at}.toolResult.content")
            if value.get("status") == "error":
                text = tool_error_text(text)
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind != "cachePoint":
            raise BadRequest(f"{at}: unknown content block {kind!r} in a user turn", param=at)
    if texts or not out:
        out.append({"role": "user", "content": texts})
    return out


def _assistant_turn(content: list[Any], where: str, open_calls: set[str]) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind, value = _block(block, at)
        if kind == "text":
            texts.append(str(expect(value, str, f"{at}.text", "a string")))
        elif kind == "toolUse":
            expect(value, dict, f"{at}.toolUse", "an object")
            call_id = expect(value.get("toolUseId"), str, f"{at}.toolUse.toolUseId", "a string")
            name = expect(value.get("name"), str, f"{at}.toolUse.name", "a string")
            open_calls.add(call_id)
            arguments = dump_arguments(value.get("input", {}))
            calls.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            )
        elif kind == "reasoningContent":
            text = (
                expect(value, dict, f"{at}.reasoningContent", "an object").get("reasoningText") or {}
            ).get("text")
            if text:
                reasoning.append(str(text))
        elif kind != "cachePoint":
            raise BadRequest(f"{at}: unknown content block {kind!r} in an assistant turn", param=at)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        texts = []
        for i, block in enumerate(expect(system, list, "system", "a list of system blocks")):
            kind, value = _block(block, f"system[{i}]")
            if kind == "text":
                texts.append(str(expect(value, str, f"system[{i}].text", "a string")))
            elif kind != "cachePoint":
                raise BadRequest(f"system[{i}]: unknown system block {kind!r}", param=f"system[{i}]")
        out.append({"role": "system", "content": SYSTEM_SEPARATOR.join(texts)})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of message objects", param="messages")
    open_calls: set[str] = set()
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        expect(msg, dict, where, "a message object")
        content = expect(msg.get("content"), list, f"{where}.content", "a list of content blocks")
        role = msg.get("role")
        if role == "user":
            out.extend(_user_turn(content, where, open_calls))
        elif role == "assistant":
            open_calls = set()
            out.append(_assistant_turn(content, where, open_calls))
        else:
            raise BadRequest(f"{where}.role must be user or assistant, got {role!r}", param=f"{where}.role")
    return out


def chat_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    config = body.get("toolConfig")
    if config is None:
        return None
    expect(config, dict, "toolConfig", "an object")
    out = []
    for i, tool in enumerate(expect(config.get("tools") or [], list, "toolConfig.tools", "a list")):
        where = f"toolConfig.tools[{i}]"
        kind, spec = _block(tool, where)
        if kind == "cachePoint":
            continue
        if kind != "toolSpec":
            raise BadRequest(f"{where}: tool {kind!r} is not supported (define a toolSpec)", param=where)
        expect(spec, dict, f"{where}.toolSpec", "an object")
        schema = expect(spec.get("inputSchema") or {}, dict, f"{where}.toolSpec.inputSchema", "an object")
        out.append(
            chat_tool(spec.get("name"), spec.get("description"), schema.get("json"), f"{where}.toolSpec")
        )
    choice = config.get("toolChoice")
    if choice is not None:
        kind, _ = _block(choice, "toolConfig.toolChoice")
        if kind not in ("auto", "any", "tool"):
            raise BadRequest(
                f"toolConfig.toolChoice {kind!r} is not auto, any or tool", param="toolConfig.toolChoice"
            )
    return out or None


def stop_reason(completion: Completion) -> str:
    if completion.finish == "length":
        return "max_tokens"
    if completion.message.get("tool_calls"):
        return "tool_use"
    return "stop_sequence" if completion.matched is not None else "end_turn"


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        blocks.append({"reasoningContent": {"reasoningText": {"text": message["reasoning_content"]}}})
    if message.get("content"):
        blocks.append({"text": message["content"]})
    for call in message.get("tool_calls") or []:
        use = {
            "toolUseId": suffix_id(call["id"], "tooluse_"),
            "name": call["function"]["name"],
            "input": tool_arguments(call["function"]["arguments"]),
        }
        blocks.append({"toolUse": use})
    return blocks


def usage(completion: Completion) -> dict[str, int]:
    return {
        "inputTokens": completion.prompt_tokens,
        "outputTokens": completion.completion_tokens,
        "totalTokens": completion.prompt_tokens + completion.completion_tokens,
    }


def stream_events(completion: Completion) -> list[bytes]:
    """ConverseStream's events for the whole turn: one delta per block."""
    events = [event_message("messageStart", {"role": "assistant"})]
    for index, block in enumerate(content_blocks(completion.message)):
        at = {"contentBlockIndex": index}
        if "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            events.append(event_message("contentBlockStart", {**at, "start": start}))
            delta: dict[str, Any] = {"toolUse": {"input": dump_json(use["input"]).decode()}}
        elif "text" in block:
            delta = {"text": block["text"]}
        else:
            delta = {"reasoningContent": {"text": block["reasoningContent"]["reasoningText"]["text"]}}
        events.append(event_message("contentBlockDelta", {**at, "delta": delta}))
        events.append(event_message("contentBlockStop", at))
    events.append(event_message("messageStop", {"stopReason": stop_reason(completion)}))
    events.append(event_message("metadata", {"usage": usage(completion), "metrics": {"latencyMs": 0}}))
    return events


class Converse(BedrockCalls):
    """``POST /model/{modelId}/converse`` and (``stream``) ``/converse-stream``."""

    name = "bedrock"

    def parse(self, raw: bytes) -> ChatRequest:
        body = json_object(raw)
        config = expect(body.get("inferenceConfig") or {}, dict, "inferenceConfig", "an object")
        extra = expect(
            body.get("additionalModelRequestFields") or {}, dict, "additionalModelRequestFields", "an object"
        )
        sampling = agent_sampling(
            {**config, "top_k": extra.get("top_k")},
            {"temperature": "temperature", "top_p": "topP", "top_k": "top_k"},
        )
        return ChatRequest(
            messages=chat_messages(body),
            tools=chat_tools(body),
            stream=self.stream,
            max_tokens=optional_positive_int(config, "maxTokens", "inferenceConfig.maxTokens"),
            stop=stop_strings(config.get("stopSequences"), "inferenceConfig.stopSequences"),
            agent_sampling=sampling,
            model=str(body.get("modelId") or ""),
        )

    def reply(self, request: ChatRequest, completion: Completion) -> Body:
        if request.stream:
            return stream_events(completion), CONTENT_TYPE
        response = {
            "output": {"message": {"role": "assistant", "content": content_blocks(completion.message)}},
            "stopReason": stop_reason(completion),
            "usage": usage(completion),
            "metrics": {"latencyMs": 0},
        }
        return dump_json(response), "application/json"


class Invoke(BedrockCalls, Messages):
    """``POST /model/{modelId}/invoke`` and (``stream``) ``/invoke-with-response-stream`` with
    the Anthropic Messages body (what ``anthropic.AnthropicBedrock`` sends): the Messages
    adapter, Bedrock's errors, and the stream's Anthropic events as event-stream ``chunk``s."""

    name = "bedrock-invoke"

    def parse(self, raw: bytes) -> ChatRequest:
        request = super().parse(raw)
        request.stream = self.stream  # the route says it; the body has no stream key
        return request

    def reply(self, request: ChatRequest, completion: Completion) -> Body:
        message = message_object(completion)
        if not request.stream:
            return dump_json(message), "application/json"
        chunks = [
            event_message("chunk", {"bytes": base64.b64encode(dump_json(event)).decode()})
            for event in stream_payloads(message)
        ]
        return chunks, CONTENT_TYPE
