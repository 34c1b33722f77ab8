"""The gateway's aiohttp application: the agents' routes (every protocol through one core), the
health route, the admin routes (:mod:`.admin`), and errors in the protocol of their path.

One model call, whatever its protocol: admitted (:mod:`.admission`), built (:mod:`.build`), sent
to the engine, its reply written in the protocol, recorded (:mod:`.record`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from . import admission, protocols
from .admin import AdminRoutes, SessionApi
from .build import CallBuilder
from .config import GatewayConfig, short_id
from .conversation import RenderError
from .engine import EngineClient, EngineError, routing_key, settle_finish
from .limits import ConnectionCap
from .protocols.base import CHAT, Protocol
from .record import record, trace_of
from .render_pool import RenderTimeout
from .routing import row_bytes, take
from .sessions import Call, Session, Sessions
from .wire import BadRequest

logger = logging.getLogger(__name__)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bad_request(protocol: Protocol, err: BadRequest | RenderError) -> web.Response:
    """A 400 in the protocol's shape: a bad field, or messages the renderer cannot take."""
    if isinstance(err, BadRequest):
        return protocol.error(400, str(err), "invalid_request_error", param=err.param, code=err.code)
    return protocol.error(400, str(err), "invalid_request_error", param="messages")


def make_app(
    gateway: SessionApi,
    config: GatewayConfig,
    sessions: Sessions,
    builder: CallBuilder,
    engine: EngineClient,
    cap: ConnectionCap,
) -> web.Application:
    """The application of a started gateway: its session API (the admin routes), settings,
    sessions, call builder, engine client and connection cap."""
    calls = AgentRoutes(config, sessions, builder, engine, cap)
    admin = AdminRoutes(gateway, sessions, builder)
    app = web.Application(
        client_max_size=admission.MAX_BODY_BYTES,
        middlewares=[cap.middleware, errors_in_protocol, admin.guard],
    )
    app.router.add_get("/health", health)
    app.router.add_post("/sessions/{sid}/v1/chat/completions", calls.chat)
    for route in protocols.ROUTES:  # Anthropic Messages, OpenAI Responses, Bedrock runtime
        handler = calls.count_tokens if route.counts_tokens else calls.serve
        app.router.add_post(route.path, functools.partial(handler, protocol=route.protocol))
    app.router.add_get("/sessions/{sid}/v1/models", calls.models)
    admin.add_to(app.router)
    return app


@web.middleware
async def errors_in_protocol(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every answer is an error body in the protocol of its path (OpenAI's elsewhere), never
    aiohttp's plain text: a bug is a 500 the SDK does not retry, an HTTP error (413,
    405...) keeps its status."""
    protocol = protocols.for_path(request.path)
    try:
        return await handler(request)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        return protocol.error(err.status, err.reason, "invalid_request_error")
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as err:
        logger.exception("gateway error on %s %s", request.method, admission.redacted(request))
        return protocol.error(500, f"gateway error: {type(err).__name__}: {err}", "server_error")


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


class AgentRoutes:
    """The routes agents call, in every protocol: one core, the adapter only parses and replies."""

    def __init__(
        self,
        config: GatewayConfig,
        sessions: Sessions,
        calls: CallBuilder,
        engine: EngineClient,
        cap: ConnectionCap,
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.calls = calls
        self.engine = engine
        self.cap = cap
        #: bytes of one position's routed experts (0: the run does not replay routing)
        self.routed_row_bytes = row_bytes(config.routed_experts_layers, config.routed_experts_topk)

    async def models(self, request: web.Request) -> web.Response:
        if self.sessions.get(request.match_info["sid"]) is None:
            return admission.unknown_session(request.match_info["sid"], CHAT)
        card = {"id": self.config.model_id, "object": "model", "created": 0, "owned_by": "agentcore-slime"}
        if self.calls.context_length:
            card["max_model_len"] = self.calls.context_length
        return web.json_response({"object": "list", "data": [card]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self.serve(request, CHAT)

    async def serve(self, request: web.Request, protocol: Protocol) -> web.StreamResponse:
        """One model call in any protocol."""
        return await self._admitted(request, protocol, self._serve_body)

    async def count_tokens(self, request: web.Request, protocol: Protocol) -> web.StreamResponse:
        """The prompt length a call would have, rendered in full (no engine call, nothing
        recorded). Under a call's bounds: the session's body bytes in flight, its lock (one
        call or count at a time), the render lanes and the render bound. It stays callable
        after the session's call cap (it samples nothing)."""
        return await self._admitted(request, protocol, self._count_body)

    async def _admitted(
        self,
        request: web.Request,
        protocol: Protocol,
        serve: Callable[[web.Request, Session, bytes, Protocol], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """The bounds every agent route shares, then ``serve`` with the body read.

        Bodies are read before the session lock: what one session may hold is bounded by the
        size its calls declare (a body without Content-Length counts as the largest allowed).
        A call on a live session is not closed to make room, its body still arriving included
        (limits.ConnectionCap.call_on: a few per session).
        """
        sid = request.match_info["sid"]
        session = self.sessions.get(sid)
        if session is None:
            return admission.unknown_session(sid, protocol)
        size = admission.body_size(request)
        refused = admission.over_body_bytes(session, size, self.config.session_body_bytes, protocol)
        if refused is not None:
            return refused
        session.bytes_in_flight += size
        try:
            with self.cap.call_on(request, sid):
                raw = await admission.read_body(request, protocol, self.config.client_timeout)
                if isinstance(raw, web.Response):
                    return raw
                with self.cap.serving(request):  # from now on its connection is not closed to make room
                    return await serve(request, session, raw, protocol)
        finally:
            session.bytes_in_flight -= size

    async def _serve_body(
        self, request: web.Request, session: Session, raw: bytes, protocol: Protocol
    ) -> web.StreamResponse:
        key = protocol.idempotency_key(request.headers)
        digest = b"" if key is None else await admission.digest(raw)
        task = asyncio.current_task()
        assert task is not None
        session.in_flight.add(task)  # abort_session cancels it (and its engine request)
        try:
            async with session.lock:
                if session.deleted:
                    return admission.unknown_session(session.sid, protocol)
                if key is not None and key in session.replies:  # a retry of a delivered call: same reply
                    return await admission.replay(request, session, key, digest, protocol)
                try:
                    if admission.reached_cap(session, self.config):
                        chat = await self.calls.off_loop(protocol.parse, raw)
                        return await admission.capped(request, chat, protocol, self.config.model_id)
                    call = await self.calls.prepare(raw, session, protocol)
                except (BadRequest, RenderError) as err:
                    return bad_request(protocol, err)
                except RenderTimeout as err:
                    return protocol.error(503, str(err), "server_error", code="render_timeout")
                return await self._serve_call(request, session, call, key, digest)
        finally:
            session.in_flight.discard(task)

    async def _count_body(
        self, request: web.Request, session: Session, raw: bytes, protocol: Protocol
    ) -> web.StreamResponse:
        async with session.lock:
            if session.deleted:
                return admission.unknown_session(session.sid, protocol)
            try:
                length = await self.calls.count(raw, protocol)
            except (BadRequest, RenderError) as err:
                return bad_request(protocol, err)
            except RenderTimeout as err:
                return protocol.error(503, str(err), "server_error", code="render_timeout")
        return web.Response(body=protocol.count_reply(length), content_type="application/json")

    async def _serve_call(
        self, request: web.Request, session: Session, call: Call, key: str | None, digest: bytes
    ) -> web.StreamResponse:
        assert call.prompt is not None
        start = None
        if self.routed_row_bytes:  # only what the session does not hold yet (gateway/routing.py)
            with self.sessions.lock:
                start = session.store.routed_experts_start(call.prompt.ids)
        try:
            result = await self.engine.generate(
                call.prompt.ids, call.params, routing_key=routing_key(session.sid), routed_experts_start=start
            )
            result = settle_finish(result, self.calls.prompts.stop_ids, call.request.stop, self.calls.decode)
        except EngineError as err:
            logger.warning("session %s: engine call failed: %s", short_id(session.sid), err)
            return call.protocol.error(
                502,
                f"the policy engine failed: {err}",
                "server_error",
                code="engine_error",
                retry=err.retryable,
            )
        matched = result.finish.get("matched")
        message, errors, reply = self.calls.reply(
            call, result.output_ids, result.finish_type, matched if isinstance(matched, str) else None
        )
        routing = take(result, start, len(call.prompt.ids), self.routed_row_bytes)
        if routing.problem:
            logger.debug("session %s: no routed experts: %s", short_id(session.sid), routing.problem)
        trace = trace_of(session, call, result, message, errors, routing)
        # Recorded just before the last bytes go out, so a trainer reading right after the
        # agent got its reply sees the trace; undone if the agent went away meanwhile.
        undo = record(self.sessions, session, call, trace, key, (digest, reply), self.config.stored_replies)
        response = await admission.send(request, *reply)
        if response is None:
            undo()
            return web.Response(status=499)
        return response
