"""The admin routes: the session API over HTTP, for clients that send the run's secret over the
gateway's private Unix socket (a gateway child's), or from loopback (a gateway in the caller's
own process, which has no such socket).

``POST /admin/sessions``, ``DELETE /admin/sessions/{sid}``, ``GET /admin/sessions/{sid}/traces``
(JSON; ``.../traces.bin``: :mod:`.trace_wire` bytes), ``POST /admin/sessions/{sid}/abort``,
``GET /admin/stats`` (sessions, ids held, bytes, GC pauses; ``?deep=1`` counts every byte the
sessions reach), ``POST /admin/batch`` (many session operations in one request: create, traces,
finish = traces and delete, delete; the reply is :func:`.trace_wire.encode_batch` bytes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from agentcore_slime.addresses import is_loopback

from . import trace_wire
from .admission import unknown_session
from .build import CallBuilder
from .config import ADMIN_SECRET_HEADER
from .protocols.base import CHAT
from .sessions import Sessions
from .trace import CallTrace
from .wire import dump_json, load_json


class SessionApi(Protocol):
    """The session API the admin routes serve (:class:`~.server.Gateway`'s)."""

    @property
    def admin_headers(self) -> dict[str, str]: ...

    @property
    def admin_socket(self) -> str | None: ...

    def create_session(self, session_id: str, sampling_params: dict[str, Any] | None = None) -> str: ...

    def traces(self, session_id: str) -> list[CallTrace]: ...

    def delete_session(self, session_id: str) -> None: ...

    def abort_session(self, session_id: str, timeout: float = 10.0) -> None: ...

    def stats(self, deep: bool = False) -> dict[str, Any]: ...


def _over_unix_socket(request: web.Request) -> bool:
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    return sock is not None and sock.family == socket.AF_UNIX


def _json_error(status: int, message: str, kind: str) -> web.Response:
    return CHAT.error(status, message, kind)


class AdminRoutes:
    """The admin routes over a gateway's session API, and their guard.

    :param gateway: the session API.
    :param sessions: its sessions (traces are read from them directly, as bytes).
    :param calls: its call builder (its small render lane takes the long encodings).
    """

    def __init__(self, gateway: SessionApi, sessions: Sessions, calls: CallBuilder) -> None:
        self.gateway = gateway
        self.sessions = sessions
        self.calls = calls
        self._secret = gateway.admin_headers[ADMIN_SECRET_HEADER].encode()
        self._socket_only = bool(gateway.admin_socket)

    def add_to(self, router: web.UrlDispatcher) -> None:
        router.add_post("/admin/sessions", self.create)
        router.add_delete("/admin/sessions/{sid}", self.delete)
        router.add_get("/admin/sessions/{sid}/traces", self.traces)
        router.add_get("/admin/stats", self.stats)
        router.add_get("/admin/sessions/{sid}/traces.bin", self.traces_bin)
        router.add_post("/admin/sessions/{sid}/abort", self.abort)
        router.add_post("/admin/batch", self.batch)

    @web.middleware
    async def guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Admin routes answer, with the run's secret, only on the private Unix socket when the
        gateway has one, else loopback peers (the agent network must not create sessions, nor
        may another user of this host)."""
        if not request.path.startswith("/admin"):
            return await handler(request)
        if self._socket_only:
            if not _over_unix_socket(request):
                return _json_error(
                    403, "admin routes are only served on the gateway's private socket", "permission_error"
                )
        elif not is_loopback(request.remote):
            return _json_error(403, "admin routes are only served to loopback clients", "permission_error")
        sent = request.headers.get(ADMIN_SECRET_HEADER)
        if sent is None:
            return _json_error(
                401,
                f"admin routes need the run's secret in the {ADMIN_SECRET_HEADER} header",
                "authentication_error",
            )
        if not hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), self._secret):
            return _json_error(403, "wrong admin secret", "permission_error")
        return await handler(request)

    async def create(self, request: web.Request) -> web.Response:
        try:
            body = load_json(await request.read())
            base_url = self.gateway.create_session(str(body["session_id"]), body.get("sampling_params"))
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # BadRequest is a ValueError
            return _json_error(400, f"bad session request: {err}", "invalid_request_error")
        return web.json_response({"session_id": body["session_id"], "base_url": base_url})

    async def delete(self, request: web.Request) -> web.Response:
        self.gateway.delete_session(request.match_info["sid"])
        return web.json_response({"deleted": request.match_info["sid"]})

    async def stats(self, request: web.Request) -> web.Response:
        deep = request.query.get("deep", "") in ("1", "true")
        if deep:  # a long walk: off the loop
            stats = await self.calls.off_loop(self.gateway.stats, True)
        else:
            stats = self.gateway.stats()
        return web.json_response(stats)

    async def traces(self, request: web.Request) -> web.Response:
        try:
            traces = self.gateway.traces(request.match_info["sid"])
        except KeyError:
            return unknown_session(request.match_info["sid"], CHAT)
        body = [dataclasses.asdict(t) for t in traces]
        return web.json_response(body, dumps=lambda value: dump_json(value).decode())

    async def traces_bin(self, request: web.Request) -> web.Response:
        """The session's stored calls as :mod:`.trace_wire` bytes (the gateway process's seam)."""
        sid = request.match_info["sid"]
        stored = self.sessions.stored(sid)
        if stored is None:
            return unknown_session(sid, CHAT)
        body = await self.calls.off_loop(trace_wire.encode, stored)
        return web.Response(body=body, content_type="application/octet-stream")

    async def batch(self, request: web.Request) -> web.Response:
        """Many session operations in one request (the rollout's channel: one round trip for the
        sessions of many episodes). ``{"ops": [{"op": "create"|"traces"|"finish"|"delete",
        "session_id": ..., "sampling_params"?: ...}]}``; ``finish`` takes the traces and deletes
        the session in one step. Each operation gets its own status (200, 400 bad, 404 unknown)."""
        try:
            ops = load_json(await request.read())["ops"]
            if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
                raise TypeError("ops must be a list of objects")
        except (ValueError, KeyError, TypeError) as err:
            return _json_error(400, f"bad batch request: {err}", "invalid_request_error")
        results = [self._batch_op(op) for op in ops]
        stored = [r.pop("traces") for r in results if "traces" in r]
        blobs = await self.calls.off_loop(lambda: [trace_wire.encode(s) for s in stored]) if stored else []
        for result in results:
            if result.get("status") == 200 and result["op"] in ("traces", "finish"):
                result["traces"] = True
        body = trace_wire.encode_batch(results, blobs)
        return web.Response(body=body, content_type="application/octet-stream")

    def _batch_op(self, op: dict[str, Any]) -> dict[str, Any]:
        kind, sid = op.get("op"), str(op.get("session_id"))
        if kind == "create":
            try:
                base_url = self.gateway.create_session(sid, op.get("sampling_params"))
                return {"op": kind, "status": 200, "base_url": base_url}
            except (ValueError, TypeError, AttributeError) as err:
                return {"op": kind, "status": 400, "message": f"bad session request: {err}"}
        if kind == "delete":
            self.gateway.delete_session(sid)
            return {"op": kind, "status": 200}
        if kind in ("traces", "finish"):
            # as the traces route, then (finish) the delete route's deletion
            stored = self.sessions.stored(sid)
            if stored is None:
                return {"op": kind, "status": 404, "message": f"unknown session {sid!r}"}
            if kind == "finish":
                self.gateway.delete_session(sid)
            return {"op": kind, "status": 200, "traces": stored}
        return {"op": kind, "status": 400, "message": f"unknown operation {kind!r}"}

    async def abort(self, request: web.Request) -> web.Response:
        # abort_session waits on this loop for the cancellations: run it from a thread
        await asyncio.to_thread(self.gateway.abort_session, request.match_info["sid"])
        return web.json_response({"aborted": request.match_info["sid"]})
