"""What a protocol adapter is, and the OpenAI chat-completions protocol itself.

The gateway has one core (session, render, engine, trace, cumulative chain) that speaks
the chat-completions form: a :class:`~agentcore_slime.gateway.wire.ChatRequest` in (the
messages, tools and sampling of a chat request) and a parsed assistant message out. A
:class:`Protocol` only translates: its ``parse`` turns the body its clients send into a
``ChatRequest`` (chat-form messages, OpenAI-form tools), its ``reply`` turns the parsed
completion into the body its clients parse, and its ``error`` writes errors in its own
shape. Every protocol therefore renders the same conversation to the same prompt ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..wire import ChatRequest, Reply, dump_json, error_body, finish_reason, parse_request
from .common import place_system_messages

Body = tuple[bytes | list[bytes], str]  # a reply as sent: JSON bytes or stream events, and its content type
NO_RETRY = {"x-should-retry": "false"}  # the openai and anthropic SDKs honour it


@dataclass(frozen=True)
class Completion:
    """One engine answer, parsed: what every protocol's reply is built from.

    :param model: the model name to echo (the request's, or the gateway's ``model_id``).
    :param message: the assistant message in chat form (``content``, ``reasoning_content``,
        ``tool_calls`` with ``call_<hex>`` ids and JSON-string arguments).
    :param finish: the settled engine finish type, ``stop`` or ``length``.
    :param matched: the stop string the engine stopped at, when it was one of the request's.
    :param prompt_tokens: the prompt's ids, as sent to the engine.
    :param completion_tokens: the sampled ids, the stop token included.
    """

    model: str
    message: dict[str, Any]
    finish: str
    matched: str | None
    prompt_tokens: int
    completion_tokens: int


class Protocol:
    """An agent-facing protocol. Subclasses override what differs from chat completions."""

    name = "chat"

    def parse(self, raw: bytes) -> ChatRequest:
        """The request body as the core's chat request.

        :raises BadRequest: with what is wrong (answered 400 in this protocol's shape).
        """
        request = parse_request(raw)
        request.messages = place_system_messages(request.messages)
        return request

    def reply(self, request: ChatRequest, completion: Completion) -> Body:
        """The reply body (JSON, or the whole stream's events)."""
        reply = Reply(
            completion.model,
            completion.message,
            finish_reason(completion.finish, completion.message),
            completion.prompt_tokens,
            completion.completion_tokens,
        )
        if request.stream:
            return reply.sse_events(request.include_usage), "text/event-stream"
        return dump_json(reply.completion()), "application/json"

    def error(
        self,
        status: int,
        message: str,
        kind: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry: bool = False,
    ) -> web.Response:
        """An error answer. ``kind`` is an OpenAI error type (``invalid_request_error``,
        ``server_error``, ``permission_error``); deterministic errors (``retry`` false) carry
        ``x-should-retry: false``. Its body is :meth:`error_body`'s, its headers
        :meth:`error_headers`'."""
        body = self.error_body(status, message, kind, code=code, param=param)
        return web.json_response(body, status=status, headers=self.error_headers(status, retry))

    def error_body(
        self, status: int, message: str, kind: str, *, code: str | None, param: str | None
    ) -> dict[str, Any]:
        """The JSON an error answer carries, in this protocol's shape (OpenAI's here)."""
        return error_body(message, kind, param=param, code=code)

    def error_headers(self, status: int, retry: bool) -> dict[str, str]:
        """An error answer's headers: the SDKs' no-retry hint on a deterministic error."""
        return {} if retry else dict(NO_RETRY)

    def idempotency_key(self, headers: Mapping[str, str]) -> str | None:
        """The key under which a client's retry of a delivered call gets that reply again."""
        return headers.get("Idempotency-Key") or None

    def count_reply(self, tokens: int) -> bytes:
        """The body of a token-count answer (protocols with a count route override it)."""
        raise NotImplementedError(f"{self.name} has no token-count route")


CHAT = Protocol()
