"""The trace-capturing OpenAI-compatible gateway over SGLang ``/generate``.

:class:`Gateway` serves aiohttp in its own thread with its own event loop, so the rollout's
loop never waits on it. Agents get a per-session base URL ``{gw}/sessions/{sid}/v1``
(chat completions, JSON or SSE, and a model list); sessions exist only when the rollout
creates them. Each completed call is recorded as a :class:`CallTrace` with the exact ids
sent to and sampled by the engine, after the reply was written to the agent.

Routes:
- ``POST /sessions/{sid}/v1/chat/completions``, ``GET /sessions/{sid}/v1/models``
- ``GET /health``
- admin, loopback peers that send the run's admin secret (header ``X-Gateway-Admin-Secret``)
  only: ``POST /admin/sessions``, ``DELETE /admin/sessions/{sid}``,
  ``GET /admin/sessions/{sid}/traces`` (JSON; ``.../traces.bin``: :mod:`.trace_wire` bytes),
  ``POST /admin/sessions/{sid}/abort``, ``GET /admin/stats`` (sessions, ids held, bytes, GC pauses;
  ``?deep=1`` counts every byte the sessions reach), ``POST /admin/batch`` (many session
  operations in one request: create, traces, finish = traces and delete, delete; the reply is
  :func:`.trace_wire.encode_batch` bytes)
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import re
import secrets
import socket
import threading
import time
from array import array
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from . import protocols, trace_wire
from .caps import cap_reached, final_reply
from .config import ADMIN_SECRET_HEADER, GatewayConfig, check_sampling_params, short_id
from .engine import EngineClient, EngineError, routing_key, settle_finish
from .limits import ConnectionCap, TokenFloor, connection_cap, fits, raise_open_files_limit
from .memory import GcWatch, deep_size, freeze_long_lived, release_memory
from .protocols.base import CHAT, Completion, Protocol
from .render_pool import OFFLOAD_CHARS, RendererSpec, RenderPool, RenderTimeout, text_size
from .rendering import (
    ChainState,
    Prompt,
    PromptBuilder,
    RenderError,
    choose_renderer,
    extends,
    fork_reason,
    generation_stop_ids,
    load_tokenizer,
    normalize_messages,
    tools_key,
)
from .store import SessionTraces, rebuild, shared_messages
from .trace import CallTrace
from .wire import BadRequest, ChatRequest, dump_json, load_json

logger = logging.getLogger(__name__)
PACKAGE_LOGGER = "agentcore_slime.gateway"
SESSION_ID = re.compile(r"^[A-Za-z0-9._:~-]{1,256}$")
NO_RETRY = {"x-should-retry": "false"}
IDEMPOTENCY_KEY = "Idempotency-Key"  # a client's retry sends the same key: it gets the same reply
RENDER_THREADS = 4  # the small lane: renders of bodies up to LARGE_BODY_BYTES, trace encoding
LARGE_RENDER_THREADS = 2  # the large lane: a queue of huge prompts never delays the small ones
LARGE_BODY_BYTES = 64 * 1024  # a body over it (~16k tokens of text) is built in the large lane
MAX_BODY_BYTES = 64 * 1024**2  # aiohttp's client_max_size: a larger body gets 413
LISTEN_BACKLOG = 1024  # connections the kernel queues for accept
ACCEPT_BATCH = 16  # connections asyncio accepts in a row before the cap can close old ones
INLINE_BODY_BYTES = 256 * 1024  # larger chat bodies are parsed in a render thread, not on the loop
INLINE_NEW_BYTES = 16 * 1024  # a body this much larger than the last one is bridged in a thread too
# A session holds its last request's messages as sent (to share them with the next request)
# only while the body is at most this many bytes per prompt token, plus the slack: a body
# mostly of keys the chat template never renders is not kept, so memory follows tokens.
RAW_BYTES_PER_TOKEN = 16
RAW_SLACK_BYTES = 64 * 1024
_T = TypeVar("_T")
_Body = tuple[bytes | list[bytes], str]  # a reply as sent: JSON bytes or SSE events, and its content type


@dataclass
class _Session:
    """A session's state. ``store`` and ``deleted`` are read from other threads under the registry lock."""

    sid: str
    sampling: dict[str, Any]
    store: SessionTraces = field(default_factory=SessionTraces)
    chain: ChainState | None = None  # after the last recorded call
    chain_before: ChainState | None = None  # before it (a repeat of that call is built from here)
    last_request: tuple[list[dict[str, Any]], str] | None = None
    # the last call's messages as sent, while they are about what its prompt rendered (see _held_raw)
    last_raw: list[dict[str, Any]] = field(default_factory=list)
    body_bytes: int = 0  # size of the last chat body: a much larger next one brings much new text
    bytes_in_flight: int = 0  # body bytes of its calls being read or served (bounded per session)
    # Idempotency-Key -> the body's digest and the reply sent (oldest first, bounded per session)
    replies: dict[str, tuple[bytes, _Body]] = field(default_factory=dict)
    deleted: bool = False
    sampled_tokens: int = 0  # completion tokens of its recorded calls (MAX_TOKENS_PER_EPISODE)
    capped: str | None = None  # the cap it reached ("calls" / "tokens"), once it is logged
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_flight: set[asyncio.Task[Any]] = field(default_factory=set)  # chat handlers (gateway loop only)


@dataclass
class _Call:
    """One call in flight: the request (in chat form, whatever its protocol), and the prompt
    built for it (off the event loop)."""

    protocol: Protocol
    request: ChatRequest
    messages: list[dict[str, Any]]
    tools_key: str
    started: float
    deadline: float = math.inf  # time.monotonic() by which its prompt must be built
    large: bool = False  # built in the large lane
    repeat: bool = False  # the same messages and tools as the last recorded call
    prompt: Prompt | None = None
    chain_break: str = ""  # why a cumulative-mode call could not be bridged (logged with a fork)
    joined: str = "start"  # how it joins the episode (CallTrace.joined)
    fork: str = ""  # why it starts a new sample (CallTrace.chain_break)
    params: dict[str, Any] = field(default_factory=dict)


def _json_error(
    status: int,
    message: str,
    kind: str,
    *,
    code: str | None = None,
    param: str | None = None,
    retry: bool = False,
) -> web.Response:
    return CHAT.error(status, message, kind, code=code, param=param, retry=retry)


def _bad_request(protocol: Protocol, err: BadRequest | RenderError) -> web.Response:
    """A 400 in the protocol's shape: a bad field, or messages the renderer cannot take."""
    if isinstance(err, BadRequest):
        return protocol.error(400, str(err), "invalid_request_error", param=err.param, code=err.code)
    return protocol.error(400, str(err), "invalid_request_error", param="messages")


def _guarded(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``; a recursion error (input nested beyond what the parsers take) is the request's fault."""
    try:
        return fn(*args)
    except RecursionError:
        raise BadRequest("the request is nested too deeply") from None


def _body_digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def _dumps(value: Any) -> str:
    return dump_json(value).decode()


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _redacted(request: web.Request) -> str:
    """The request's path with its session id shortened (logs must not carry live ids)."""
    sid = request.match_info.get("sid")
    return request.path.replace(sid, short_id(sid)) if sid else request.path


def url_host(address: str) -> str:
    """An address as the host part of a URL: IPv6 literals go in brackets."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def reachable_address(family: socket.AddressFamily = socket.AF_INET) -> str:
    """An address of this host that other hosts can reach (no packet is sent).

    IPv4 falls back to the host name's address, then 127.0.0.1; IPv6 returns "" when this
    host has no IPv6 route.
    """
    probe = socket.socket(family, socket.SOCK_DGRAM)
    target = ("10.255.255.255", 1) if family == socket.AF_INET else ("2001:db8::1", 1)
    try:
        probe.connect(target)  # UDP connect only picks a route
        address = str(probe.getsockname()[0])
    except OSError:
        address = ""
    finally:
        probe.close()
    if family == socket.AF_INET6:
        return "" if not address or address == "::" else address.split("%")[0]
    if address and not address.startswith("0."):
        return address
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _next_chain(
    previous: ChainState | None, ids: array[int], call: _Call, message: dict[str, Any]
) -> ChainState:
    """The chain after a call; messages equal to the previous call's keep its objects (and
    their text), so a session holds its conversation once."""
    messages = call.messages
    if previous is not None:
        n = len(previous.messages)
        if messages[:n] == previous.messages:
            messages = [*previous.messages, *messages[n:]]
            call.messages = messages
    assert call.prompt is not None
    return ChainState(ids, len(call.prompt.ids), messages, message, call.tools_key)


def _held_raw(body_bytes: int, prompt_tokens: int) -> bool:
    """Whether a call's messages as sent may stay with the session (see RAW_BYTES_PER_TOKEN)."""
    return body_bytes <= RAW_BYTES_PER_TOKEN * prompt_tokens + RAW_SLACK_BYTES


def _share_ids(state: ChainState, ids: array[int]) -> ChainState:
    """``state`` over ``ids`` when its ids are their prefix (then nothing is held twice)."""
    if state.ids is ids or state.end > len(ids) or ids[: state.end] != state.sequence:
        return state
    return dataclasses.replace(state, ids=ids)


class Gateway:
    """The gateway. All public methods are synchronous and thread-safe.

    :param config: see :class:`GatewayConfig`.
    :param admin_secret: what admin requests must send in :data:`ADMIN_SECRET_HEADER` (a
        random one when None: read it from :attr:`admin_headers`).
    """

    def __init__(self, config: GatewayConfig, admin_secret: str | None = None) -> None:
        self.config = config
        self.url = ""
        self._admin_secret = (admin_secret or secrets.token_urlsafe(32)).encode()
        self._servers: list[asyncio.AbstractServer] = []
        self._cap: ConnectionCap | None = None
        self._large_pool: ThreadPoolExecutor | None = None
        self._floor: TokenFloor | None = None
        self._open_files = 0  # the soft open-files limit, once raised
        self._sessions: dict[str, _Session] = {}
        self._registry = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._engine: EngineClient | None = None
        self._builder: PromptBuilder | None = None
        self._context_length: int | None = config.context_length
        self._pool: ThreadPoolExecutor | None = None
        self._render_pool: RenderPool | None = None
        self._gc_watch = GcWatch()

    # ------------------------------------------------------------------ lifecycle
    def start(self, engine_url: str) -> None:
        """Load the tokenizer + renderer, health-check the engine, serve; return once listening.

        :param engine_url: SGLang engine or router base url, e.g. ``http://10.0.0.5:3000``, or
            several engines' urls joined by commas (no router: see :class:`.engine.EngineClient`).
        :raises ValueError: bad configuration (model dir, family, parser names).
        :raises RuntimeError: the engine is not healthy or the port cannot be bound.
        """
        if self._loop is not None:
            raise RuntimeError("gateway already started")
        if not re.match(r"^https?://[^/\s]+", engine_url or ""):
            raise ValueError(f"engine url {engine_url!r} is not http(s)://host:port")
        logging.getLogger(PACKAGE_LOGGER).setLevel(self.config.level)
        self._open_files = raise_open_files_limit()
        self._builder = self._make_builder()
        self._floor = TokenFloor(self._builder.tokenizer)
        self._pool = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="agentcore-gateway-render")
        self._large_pool = ThreadPoolExecutor(
            LARGE_RENDER_THREADS, thread_name_prefix="agentcore-gateway-large"
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentcore-gateway", daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(engine_url.rstrip("/")), self._loop)
        try:
            future.result()
        except BaseException:
            self.shutdown()
            raise
        freeze_long_lived()  # the tokenizer, renderer and modules live as long as the process
        gc.callbacks.append(self._gc_watch)
        logger.info("gateway serving at %s for engine %s", self.url, engine_url)

    def _vocab_size(self) -> int:
        """Ids the model can sample: the tokenizer's, or the model's padded vocab when larger."""
        assert self._builder is not None
        size = len(self._builder.tokenizer)
        try:
            config = json.loads((Path(self.config.model_dir) / "config.json").read_text())
            size = max(size, int(config.get("vocab_size") or 0))
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        return size

    def _make_builder(self) -> PromptBuilder:
        model_dir = self.config.model_dir
        if not Path(model_dir).is_dir():
            raise ValueError(f"model dir {model_dir!r} does not exist (set MODEL_DIR / --hf-checkpoint)")
        tokenizer = load_tokenizer(model_dir)
        renderer, choice = choose_renderer(
            model_dir,
            tokenizer,
            self.config.renderer_family,
            tool_call_parser=self.config.tool_call_parser,
            reasoning_parser=self.config.reasoning_parser,
        )
        logger.info("renderer family %s (%s)", choice.family, choice.reason)
        self._render_pool = RenderPool(
            RendererSpec(model_dir, choice.family, self.config.tool_call_parser, self.config.reasoning_parser)
        )
        builder = PromptBuilder(
            renderer, tokenizer, choice.family, generation_stop_ids(model_dir),
            tool_call_parser=self.config.tool_call_parser,
        )
        try:  # compiles the chat template now rather than in the first agent call
            builder.render([{"role": "user", "content": "warm-up"}], None)
        except RenderError as err:
            raise ValueError(
                f"the renderer cannot render a one-message chat: {err} (check RENDERER_FAMILY)"
            ) from None
        return builder

    async def _start(self, engine_url: str) -> None:
        self._engine = EngineClient(
            engine_url,
            retries=self.config.engine_retries,
            backoff=self.config.engine_retry_backoff,
            read_timeout=self.config.engine_timeout,
            outage_seconds=self.config.engine_outage_seconds,
            vocab_size=self._vocab_size(),
        )
        await self._engine.open()
        await self._engine.health(attempts=self.config.engine_health_attempts)
        await self._engine.discover()
        if self._engine.workers:
            logger.info("engine url is a router in front of %s", ", ".join(self._engine.workers))
        if self._context_length is None:
            self._context_length = await self._engine.context_length()
            if self._context_length is None:
                logger.warning(
                    "the engine does not report max_model_len; no context cap (set SGLANG_CONTEXT_LENGTH)"
                )
        access = logging.getLogger(f"{PACKAGE_LOGGER}.access")
        self._cap = ConnectionCap(connection_cap(self.config.max_connections, self._open_files))
        self._runner = web.AppRunner(
            self._app(),
            access_log=access if self.config.level <= logging.DEBUG else None,
            # closes connections that send no (complete) request head within the timeout,
            # idle keep-alive ones included; bodies are bounded in _chat
            keepalive_timeout=self.config.client_timeout,
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self._cap.attach(self._runner.server)
        await self._bind()

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header admin requests send (the run's secret: never log it)."""
        return {ADMIN_SECRET_HEADER: self._admin_secret.decode()}

    async def _listen(self, host: str, port: int) -> int:
        """Serve on ``host:port`` through the connection cap; return the port.

        ``::`` serves IPv4 too (asyncio's own listener would set IPV6_V6ONLY).
        """
        assert self._cap is not None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if host not in ("0.0.0.0", "::") and ":" not in host:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        dual = host == "::" and socket.has_dualstack_ipv6()
        sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG, dualstack_ipv6=dual)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        # asyncio accepts up to `backlog` connections in a row, each taking a file before the
        # cap sees it: a small batch keeps a burst of connections within the open-files limit;
        # the kernel's queue stays long (listen() again only resizes it).
        self._servers.append(await loop.create_server(self._cap.factory, sock=sock, backlog=ACCEPT_BATCH))
        sock.listen(LISTEN_BACKLOG)
        return int(sock.getsockname()[1])

    async def _bind(self) -> None:
        host = self.config.host
        try:
            port = await self._listen(host or "0.0.0.0", self.config.port)
        except OSError as err:
            raise RuntimeError(
                f"cannot listen on {host or '0.0.0.0'}:{self.config.port}: {err} "
                "(set GATEWAY_PORT to a free port, or 0)"
            ) from None
        if host in (None, "0.0.0.0"):
            advertised = reachable_address()
        elif host == "::":  # both families are served: advertise IPv6 as the host asked for it
            advertised = reachable_address(socket.AF_INET6) or "::1"
        else:
            advertised = str(host)
        if host and not _is_loopback(host) and host not in ("0.0.0.0", "::"):
            try:  # local tools (and the admin routes) reach it on loopback too
                await self._listen("127.0.0.1", port)
            except OSError as err:
                logger.warning("cannot also listen on 127.0.0.1:%d: %s", port, err)
        self.url = f"http://{url_host(advertised)}:{port}"

    def shutdown(self) -> None:
        """Stop serving, close the engine connections, join the thread (idempotent)."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._stop(), loop)
            try:
                future.result(30)
            except Exception as err:  # noqa: BLE001 - shutting down anyway
                logger.warning("gateway shutdown: %s", err)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        loop.close()
        if self._gc_watch in gc.callbacks:
            gc.callbacks.remove(self._gc_watch)
        for pool in (self._pool, self._large_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._large_pool = None
        if self._render_pool is not None:
            self._render_pool.shutdown()

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._engine is not None:
            await self._engine.close()

    # ------------------------------------------------------------------ sessions
    def create_session(self, session_id: str, sampling_params: dict[str, Any] | None = None) -> str:
        """Open a session and return the base URL its agent uses (ends in ``/v1``).

        :param session_id: letters, digits and ``._:~-`` (it is a URL path segment).
        :param sampling_params: the trainer's values (temperature, top_p, top_k,
            max_new_tokens; also min_p, repetition_penalty); they win over the agent's.
        :raises ValueError: bad id or params, or the session already exists.
        """
        if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
            raise ValueError(f"session id {session_id!r} must match {SESSION_ID.pattern}")
        sampling = check_sampling_params(sampling_params)
        if not self.url:
            raise RuntimeError("gateway not started (call start(engine_url) first)")
        with self._registry:
            if session_id in self._sessions:
                raise ValueError(f"session {session_id!r} already exists (delete it first)")
            self._sessions[session_id] = _Session(session_id, sampling)
        return f"{self.url}/sessions/{session_id}/v1"

    def traces(self, session_id: str) -> list[CallTrace]:
        """A copy of the session's traces in call order.

        :raises KeyError: unknown or deleted session.
        """
        with self._registry:
            session = self._sessions.get(session_id)
            if session is None:
                raise KeyError(f"unknown session {session_id!r}")
            stored = session.store.snapshot()
        return rebuild(stored)  # outside the lock: the event loop takes it too

    def delete_session(self, session_id: str) -> None:
        """Forget a session (idempotent); later calls on its URL get 404.

        When the last session goes (a step's episodes are done), the freed heap is given back
        to the system in a render thread: Python frees a session's arrays, but the C
        allocator keeps their pages unless asked.
        """
        self._forget(session_id)

    def _forget(self, session_id: str) -> _Session | None:
        with self._registry:
            session = self._sessions.pop(session_id, None)
            if session is not None:
                session.deleted = True
            idle = session is not None and not self._sessions
        if idle and self._pool is not None:
            try:
                self._pool.submit(release_memory)
            except RuntimeError:  # shutting down
                pass
        return session

    def abort_session(self, session_id: str, timeout: float = 10.0) -> None:
        """Delete a session and abort its chat calls in flight (their engine requests included).

        Used when the rollout cuts an episode: the agent's pending calls get no reply, the engine
        stops generating for them, and nothing more is recorded (idempotent).
        """
        session = self._forget(session_id)
        loop = self._loop
        if session is None or loop is None or not loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._cancel_calls(session), loop).result(timeout)

    @staticmethod
    async def _cancel_calls(session: _Session) -> None:
        tasks = [task for task in session.in_flight if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stats(self, deep: bool = False) -> dict[str, Any]:
        """What the gateway holds: sessions, ids stored, their bytes, GC pauses since the last call.

        :param deep: also count every byte reachable from the sessions (their messages and
            chain states too; slow with thousands of sessions).
        """
        with self._registry:
            sessions = list(self._sessions.values())
            held = sum(s.store.held_tokens for s in sessions)
            stored = sum(s.store.nbytes for s in sessions)
        out: dict[str, Any] = {"sessions": len(sessions), "held_tokens": held, "stored_bytes": stored}
        if deep:
            out["session_bytes"] = deep_size(sessions, skip=(asyncio.Lock, asyncio.Task))
        return {**out, **self._gc_watch.take()}

    def _session(self, session_id: str) -> _Session | None:
        with self._registry:
            return self._sessions.get(session_id)

    # ------------------------------------------------------------------ app
    def _app(self) -> web.Application:
        assert self._cap is not None
        app = web.Application(
            client_max_size=MAX_BODY_BYTES,
            middlewares=[self._cap.middleware, self._errors_as_json, self._admin_guard],
        )
        app.router.add_get("/health", self._health)
        app.router.add_post("/sessions/{sid}/v1/chat/completions", self._chat)
        for route in protocols.ROUTES:  # Anthropic Messages, OpenAI Responses, Bedrock runtime
            handler = self._count_tokens if route.counts_tokens else self._serve
            app.router.add_post(route.path, functools.partial(handler, protocol=route.protocol))
        app.router.add_get("/sessions/{sid}/v1/models", self._models)
        app.router.add_post("/admin/sessions", self._admin_create)
        app.router.add_delete("/admin/sessions/{sid}", self._admin_delete)
        app.router.add_get("/admin/sessions/{sid}/traces", self._admin_traces)
        app.router.add_get("/admin/stats", self._admin_stats)
        app.router.add_get("/admin/sessions/{sid}/traces.bin", self._admin_traces_bin)
        app.router.add_post("/admin/sessions/{sid}/abort", self._admin_abort)
        app.router.add_post("/admin/batch", self._admin_batch)
        return app

    @web.middleware
    async def _errors_as_json(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
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
            logger.exception("gateway error on %s %s", request.method, _redacted(request))
            return protocol.error(500, f"gateway error: {type(err).__name__}: {err}", "server_error")

    @web.middleware
    async def _admin_guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Admin routes answer loopback peers that send the run's secret (the agent network must
        not create sessions, nor may another user of this host)."""
        if not request.path.startswith("/admin"):
            return await handler(request)
        if not _is_loopback(request.remote):
            return _json_error(403, "admin routes are only served to loopback clients", "permission_error")
        sent = request.headers.get(ADMIN_SECRET_HEADER)
        if sent is None:
            return _json_error(
                401,
                f"admin routes need the run's secret in the {ADMIN_SECRET_HEADER} header",
                "authentication_error",
            )
        if not hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), self._admin_secret):
            return _json_error(403, "wrong admin secret", "permission_error")
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        if self._session(request.match_info["sid"]) is None:
            return self._unknown_session(request.match_info["sid"])
        card = {"id": self.config.model_id, "object": "model", "created": 0, "owned_by": "agentcore-slime"}
        if self._context_length:
            card["max_model_len"] = self._context_length
        return web.json_response({"object": "list", "data": [card]})

    def _unknown_session(self, sid: str, protocol: Protocol = CHAT) -> web.Response:
        return protocol.error(
            404,
            f"unknown session {sid!r} (sessions are created by the trainer's rollout)",
            "invalid_request_error",
            code="session_not_found",
        )

    async def _admin_create(self, request: web.Request) -> web.Response:
        try:
            body = load_json(await request.read())
            base_url = self.create_session(str(body["session_id"]), body.get("sampling_params"))
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # BadRequest is a ValueError
            return _json_error(400, f"bad session request: {err}", "invalid_request_error")
        return web.json_response({"session_id": body["session_id"], "base_url": base_url})

    async def _admin_delete(self, request: web.Request) -> web.Response:
        self.delete_session(request.match_info["sid"])
        return web.json_response({"deleted": request.match_info["sid"]})

    async def _admin_stats(self, request: web.Request) -> web.Response:
        deep = request.query.get("deep", "") in ("1", "true")
        if deep:  # a long walk: off the loop
            stats = await self._off_loop(self.stats, True)
        else:
            stats = self.stats()
        return web.json_response(stats)

    async def _admin_traces(self, request: web.Request) -> web.Response:
        try:
            traces = self.traces(request.match_info["sid"])
        except KeyError:
            return self._unknown_session(request.match_info["sid"])
        return web.json_response([dataclasses.asdict(t) for t in traces], dumps=_dumps)

    async def _admin_traces_bin(self, request: web.Request) -> web.Response:
        """The session's stored calls as :mod:`.trace_wire` bytes (the gateway process's seam)."""
        sid = request.match_info["sid"]
        with self._registry:
            session = self._sessions.get(sid)
            stored = None if session is None else session.store.snapshot()
        if stored is None:
            return self._unknown_session(sid)
        body = await self._off_loop(trace_wire.encode, stored)
        return web.Response(body=body, content_type="application/octet-stream")

    async def _admin_batch(self, request: web.Request) -> web.Response:
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
        blobs = await self._off_loop(lambda: [trace_wire.encode(s) for s in stored]) if stored else []
        for result in results:
            if result.get("status") == 200 and result["op"] in ("traces", "finish"):
                result["traces"] = True
        body = trace_wire.encode_batch(results, blobs)
        return web.Response(body=body, content_type="application/octet-stream")

    def _batch_op(self, op: dict[str, Any]) -> dict[str, Any]:
        kind, sid = op.get("op"), str(op.get("session_id"))
        if kind == "create":
            try:
                base_url = self.create_session(sid, op.get("sampling_params"))
                return {"op": kind, "status": 200, "base_url": base_url}
            except (ValueError, TypeError, AttributeError) as err:
                return {"op": kind, "status": 400, "message": f"bad session request: {err}"}
        if kind == "delete":
            self.delete_session(sid)
            return {"op": kind, "status": 200}
        if kind in ("traces", "finish"):
            with self._registry:  # as the traces route, then (finish) the delete route's deletion
                session = self._sessions.get(sid)
                stored = None if session is None else session.store.snapshot()
            if stored is None:
                return {"op": kind, "status": 404, "message": f"unknown session {sid!r}"}
            if kind == "finish":
                self._forget(sid)
            return {"op": kind, "status": 200, "traces": stored}
        return {"op": kind, "status": 400, "message": f"unknown operation {kind!r}"}

    async def _admin_abort(self, request: web.Request) -> web.Response:
        # abort_session waits on this loop for the cancellations: run it from a thread
        await asyncio.to_thread(self.abort_session, request.match_info["sid"])
        return web.json_response({"aborted": request.match_info["sid"]})

    # ------------------------------------------------------------------ calls (every protocol)
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, CHAT)

    async def _serve(self, request: web.Request, protocol: Protocol) -> web.StreamResponse:
        """One model call in any protocol: the adapter only parses the body and writes the reply."""
        return await self._admitted(request, protocol, self._serve_body)

    async def _count_tokens(self, request: web.Request, protocol: Protocol) -> web.StreamResponse:
        """The prompt length a call would have, rendered in full (no engine call, nothing
        recorded). Under a call's bounds: the session's body bytes in flight, its lock (one
        call or count at a time), the render lanes and the render bound. It stays callable
        after the session's call cap (it samples nothing)."""
        return await self._admitted(request, protocol, self._count_body)

    async def _admitted(
        self,
        request: web.Request,
        protocol: Protocol,
        serve: Callable[[web.Request, _Session, str, bytes, Protocol], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """The bounds every agent route shares, then ``serve`` with the body read.

        Bodies are read before the session lock: what one session may hold is bounded by the
        size its calls declare (a body without Content-Length counts as the largest allowed).
        Until the body has arrived its connection may be closed to make room (limits.ConnectionCap).
        """
        sid = request.match_info["sid"]
        session = self._session(sid)
        if session is None:
            return self._unknown_session(sid, protocol)
        size = request.content_length if request.content_length is not None else MAX_BODY_BYTES
        if session.bytes_in_flight + size > self.config.session_body_bytes:
            return protocol.error(
                429,
                f"this session's calls in progress already hold {session.bytes_in_flight} bytes of request "
                f"bodies; a call of {size} more is over the session's {self.config.session_body_bytes} "
                "(wait for them to finish)",
                "rate_limit_error",
                code="session_bodies_in_flight",
                retry=True,
            )
        session.bytes_in_flight += size
        try:
            raw = await self._read_body(request, protocol)
            if isinstance(raw, web.Response):
                return raw
            assert self._cap is not None
            with self._cap.serving(request):  # from now on its connection is not closed to make room
                return await serve(request, session, sid, raw, protocol)
        finally:
            session.bytes_in_flight -= size

    async def _read_body(self, request: web.Request, protocol: Protocol) -> bytes | web.Response:
        """The body, or the answer when it did not arrive in time (or the client went away)."""
        try:  # a client that stalls mid-body must not hold a connection (and a file) forever
            async with asyncio.timeout(self.config.client_timeout):
                return await request.read()
        except TimeoutError:
            return protocol.error(
                408,
                f"the request body did not arrive within {self.config.client_timeout:g} s",
                "invalid_request_error",
                code="request_timeout",
            )
        except (ConnectionResetError, RuntimeError) as err:
            # the client went away mid-body, or was closed to make room; aiohttp says
            # RuntimeError("Connection closed.") when the read starts after that
            transport = request.transport
            if isinstance(err, RuntimeError) and transport is not None and not transport.is_closing():
                raise
            logger.debug("client of %s went away before its body arrived", _redacted(request))
            return web.Response(status=499)

    async def _serve_body(
        self, request: web.Request, session: _Session, sid: str, raw: bytes, protocol: Protocol
    ) -> web.StreamResponse:
        key = protocol.idempotency_key(request.headers)
        digest = b"" if key is None else await self._digest(raw)
        task = asyncio.current_task()
        assert task is not None
        session.in_flight.add(task)  # abort_session cancels it (and its engine request)
        try:
            async with session.lock:
                if session.deleted:
                    return self._unknown_session(sid, protocol)
                if key is not None and key in session.replies:  # a retry of a delivered call: same reply
                    return await self._replay(request, session, key, digest, protocol)
                if self._reached_cap(session):
                    return await self._capped(request, raw, protocol)
                try:
                    call = await self._prepare(raw, session, protocol)
                except (BadRequest, RenderError) as err:
                    return _bad_request(protocol, err)
                except RenderTimeout as err:
                    return protocol.error(503, str(err), "server_error", code="render_timeout")
                return await self._serve_call(request, session, call, key, digest)
        finally:
            session.in_flight.discard(task)

    async def _count_body(
        self, request: web.Request, session: _Session, sid: str, raw: bytes, protocol: Protocol
    ) -> web.StreamResponse:
        async with session.lock:
            if session.deleted:
                return self._unknown_session(sid, protocol)
            deadline = time.monotonic() + self.config.render_timeout
            large = len(raw) > LARGE_BODY_BYTES
            try:
                length = await self._build_off_loop(deadline, large, self._count_all, raw, protocol, deadline)
            except (BadRequest, RenderError) as err:
                return _bad_request(protocol, err)
            except RenderTimeout as err:
                return protocol.error(503, str(err), "server_error", code="render_timeout")
        return web.Response(body=protocol.count_reply(length), content_type="application/json")

    def _count_all(self, raw: bytes, protocol: Protocol, deadline: float) -> int:
        """Parse and fully render a body, for its length only (off the loop)."""
        chat = protocol.parse(raw)
        messages = normalize_messages(chat.messages)
        large = len(raw) > LARGE_BODY_BYTES
        call = _Call(protocol, chat, messages, tools_key(chat.tools), time.perf_counter(), deadline, large)
        if call.large:
            self._check_floor(messages)
        return len(self._render_call(call).ids)

    def _reached_cap(self, session: _Session) -> bool:
        """Whether the session used up its calls or tokens (see caps.py); logged once."""
        cap = cap_reached(
            len(session.store),
            session.sampled_tokens,
            self.config.max_calls_per_episode,
            self.config.max_tokens_per_episode,
        )
        if cap is not None and session.capped is None:
            session.capped = cap
            logger.info(
                "session %s: reached its cap on %s; later calls get the final reply",
                short_id(session.sid),
                cap,
            )
        return cap is not None

    async def _capped(self, request: web.Request, raw: bytes, protocol: Protocol) -> web.StreamResponse:
        """A capped session's call: the final reply in its protocol, not sampled, not recorded."""
        try:
            chat = await self._off_loop(protocol.parse, raw)
        except BadRequest as err:
            return _bad_request(protocol, err)
        reply = final_reply(protocol, chat, chat.model or self.config.model_id)
        return await self._send(request, *reply) or web.Response(status=499)

    async def _digest(self, raw: bytes) -> bytes:
        """What ties an Idempotency-Key to its body (a large body is hashed off the loop)."""
        if len(raw) > LARGE_BODY_BYTES:
            return await asyncio.to_thread(_body_digest, raw)
        return _body_digest(raw)

    async def _replay(
        self, request: web.Request, session: _Session, key: str, digest: bytes, protocol: Protocol
    ) -> web.StreamResponse:
        """The reply stored under ``key``, if the retry sent the same body (else 422)."""
        stored, reply = session.replies[key]
        if not hmac.compare_digest(stored, digest):
            return protocol.error(
                422,
                f"the Idempotency-Key {key[:64]!r} was used before with a different request body "
                "(a retry sends the same body; a new request needs a new key)",
                "invalid_request_error",
                code="idempotency_key_reused",
            )
        return await self._send(request, *reply) or web.Response(status=499)

    async def _off_loop(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run CPU work (trace encoding, a deep walk) in the small lane: the loop keeps serving."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, _guarded, fn, *args)

    async def _build_off_loop(
        self, call_deadline: float, large: bool, fn: Callable[..., _T], *args: Any
    ) -> _T:
        """Build a prompt in a render lane, waiting at most until ``call_deadline``.

        :raises RenderTimeout: not built in time; a build not yet started is dropped, one in
            progress finishes in its thread and is discarded (the session is left as it was).
        """
        pool = self._large_pool if large else self._pool
        future = asyncio.get_running_loop().run_in_executor(pool, _guarded, fn, *args)
        try:
            return await asyncio.wait_for(future, max(0.0, call_deadline - time.monotonic()))
        except TimeoutError:
            raise RenderTimeout(
                f"the prompt was not built within {self.config.render_timeout:g} s (the gateway is "
                "busy rendering other long prompts, or this one is too long: shorten it or retry later)"
            ) from None

    async def _prepare(self, raw: bytes, session: _Session, protocol: Protocol) -> _Call:
        """Parse and validate the body, build the prompt ids and the sampling params.

        A body of ordinary size and a cumulative bridge cost less than handing them to a
        thread (a wake-up, the GIL handed over and back), so they run on the event loop; a
        full render, and every step of a body over :data:`INLINE_BODY_BYTES`, run in the
        render threads, and so does a bridge over a body that grew by more than
        :data:`INLINE_NEW_BYTES` (a long tool result to tokenize).
        """
        grown = len(raw) - session.body_bytes
        session.body_bytes = len(raw)
        deadline = time.monotonic() + self.config.render_timeout
        large = len(raw) > LARGE_BODY_BYTES  # big bodies, and renders of them, take the large lane
        if len(raw) > INLINE_BODY_BYTES or grown > INLINE_NEW_BYTES:
            return await self._build_off_loop(
                deadline, large, self._prepare_all, raw, session, protocol, deadline
            )
        call = _guarded(self._parse_call, raw, session, protocol, deadline)
        if call.prompt is None:
            call.prompt = await self._build_off_loop(deadline, large, self._render_call, call)
        self._join(session, call)
        call.params = self._sampling(session, call.request, len(call.prompt.ids))
        return call

    def _prepare_all(self, raw: bytes, session: _Session, protocol: Protocol, deadline: float) -> _Call:
        call = self._parse_call(raw, session, protocol, deadline)
        if call.prompt is None:
            call.prompt = self._render_call(call)
        self._join(session, call)
        call.params = self._sampling(session, call.request, len(call.prompt.ids))
        return call

    @staticmethod
    def _join(session: _Session, call: _Call) -> None:
        """How the call joins the episode: its prompt against the last recorded call's prompt +
        completion (what the merge compares it with), and why it forks when it does not extend them."""
        chain, prompt = session.chain, call.prompt
        assert prompt is not None
        if chain is None:
            call.joined = "start"
        elif call.repeat:  # built from the call before the last one: never extends the last
            call.joined, call.fork = "forked", fork_reason(call.messages, call.tools_key, chain, repeat=True)
        elif prompt.token_mode == "bridged":
            call.joined = "extended"
        elif extends(prompt.ids, chain):
            call.joined = "rerendered"
        else:
            call.joined = "forked"
            call.fork = fork_reason(call.messages, call.tools_key, chain, repeat=False)

    def _parse_call(self, raw: bytes, session: _Session, protocol: Protocol, deadline: float) -> _Call:
        """The request, its messages normalized, and the prompt when a bridge builds it.

        :raises BadRequest: ``context_length_exceeded`` when the messages' text alone is more
            tokens than the context holds (checked before any tokenizing, for large bodies).
        """
        assert self._builder is not None
        started = time.perf_counter()
        chat = protocol.parse(raw)
        messages = self._messages(chat, session)
        large = len(raw) > LARGE_BODY_BYTES
        call = _Call(protocol, chat, messages, tools_key(chat.tools), started, deadline, large)
        if call.large:
            self._check_floor(messages)
        call.repeat = session.last_request == (call.messages, call.tools_key)
        base = session.chain_before if call.repeat else session.chain
        if self.config.cumulative_token_mode and base is not None:
            call.prompt, call.chain_break = self._builder.bridge(messages, chat.tools, base)
        return call

    def _check_floor(self, messages: list[dict[str, Any]]) -> None:
        """Refuse a prompt whose text alone cannot fit the context (see limits.TokenFloor)."""
        if self._floor is None or self._context_length is None:
            return
        floor = self._floor.floor(messages)
        if not fits(floor, self._context_length):
            raise BadRequest(
                f"the prompt has at least {floor} tokens (its messages' text alone); the model's context "
                f"length is {self._context_length} (shorten the conversation)",
                param="messages",
                code="context_length_exceeded",
            )

    @staticmethod
    def _messages(chat: ChatRequest, session: _Session) -> list[dict[str, Any]]:
        """The request's messages normalized. Those equal to the last call's become the objects
        the session holds already, raw and normalized: the request's copies are freed now,
        not after the engine answered (hundreds of calls in flight kept tens of thousands of
        such dicts for the garbage collector to walk), and later comparisons with them are
        identity checks."""
        held = session.last_raw
        n = shared_messages(chat.messages, held)
        if n == 0 or session.chain is None or len(session.chain.messages) != len(held):
            return normalize_messages(chat.messages)
        chat.messages[:n] = held[:n]
        return [*session.chain.messages[:n], *normalize_messages(chat.messages[n:], n)]

    def _render_call(self, call: _Call) -> Prompt:
        """A full render: long conversations in the render process unless the tokenizer leaves
        the GIL while it works (see render_pool and rendering.SegmentEncoder)."""
        assert self._builder is not None
        messages, tools = call.messages, call.request.tools
        remaining = call.deadline - time.monotonic()
        if remaining <= 0:  # it waited its whole time in the queue (its caller has given up)
            raise RenderTimeout("the prompt was not built in time")
        ids: array[int] | None = None
        if (
            self._render_pool is not None
            and not self._builder.releases_gil
            and text_size(messages, tools) > OFFLOAD_CHARS
        ):
            rendered = self._render_pool.render(messages, tools, remaining)
            ids = None if rendered is None else array("i", rendered)
        if ids is None:
            ids = self._builder.render_array(messages, tools)
        return Prompt(ids, "rendered", call.chain_break)

    async def _serve_call(
        self, request: web.Request, session: _Session, call: _Call, key: str | None, digest: bytes
    ) -> web.StreamResponse:
        assert self._builder is not None and self._engine is not None and call.prompt is not None
        try:
            result = await self._engine.generate(
                call.prompt.ids, call.params, routing_key=routing_key(session.sid)
            )
            result = settle_finish(result, self._builder.stop_ids, call.request.stop, self._decode)
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
        message, errors, reply = self._reply(
            call, result.output_ids, result.finish_type, matched if isinstance(matched, str) else None
        )
        trace = CallTrace(
            prompt_token_ids=[],  # the store takes call.prompt.ids (no 10k-int list while in flight)
            completion_token_ids=result.output_ids,
            logprobs=result.logprobs,
            finish_reason=result.finish_type,  # type: ignore[arg-type]
            messages=call.messages,  # as rendered: keys the template never reads are not kept
            response_message=message,
            token_mode=call.prompt.token_mode,  # type: ignore[arg-type]
            session_id=session.sid,
            engine_finish=dict(result.meta.get("finish_reason") or result.finish),  # as the engine said
            sampling_params=call.params,
            chain_break=call.fork,
            joined=call.joined,  # type: ignore[arg-type]
            latency_ms=(time.perf_counter() - call.started) * 1000,
            weight_version=result.meta.get("weight_version"),
            tool_call_errors=errors,
            engine_attempts=result.attempts,
        )
        # Recorded just before the last bytes go out, so a trainer reading right after the
        # agent got its reply sees the trace; undone if the agent went away meanwhile.
        undo = self._record(session, call, message, trace, key, (digest, reply))
        response = await self._send(request, *reply)
        if response is None:
            undo()
            return web.Response(status=499)
        return response

    def _reply(
        self, call: _Call, output_ids: list[int], finish: str, matched: str | None
    ) -> tuple[dict[str, Any], list[str], _Body]:
        """Parse the sampled ids into the assistant message (and the tool calls that could not
        be read) and serialize the reply in the call's protocol (on the loop)."""
        assert self._builder is not None and call.prompt is not None
        turn = self._builder.parse(output_ids, call.prompt.ids, call.request.tools)
        message = turn.message
        completion = Completion(
            call.request.model or self.config.model_id,
            message,
            finish,
            matched,
            len(call.prompt.ids),
            len(output_ids),
        )
        return message, turn.tool_call_errors, call.protocol.reply(call.request, completion)

    def _decode(self, ids: list[int]) -> str:
        assert self._builder is not None
        return str(self._builder.tokenizer.decode(ids, skip_special_tokens=False))

    def _sampling(self, session: _Session, chat: ChatRequest, prompt_len: int) -> dict[str, Any]:
        """Engine sampling params: the trainer's session values win; the agent may lower max tokens."""
        params: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
        params.update(chat.agent_sampling)
        params.update({k: v for k, v in session.sampling.items() if k != "max_new_tokens"})
        limits = [v for v in (session.sampling.get("max_new_tokens"), chat.max_tokens) if v]
        max_new = min(limits) if limits else self.config.default_max_new_tokens
        if self._context_length is not None:
            room = self._context_length - prompt_len
            if room < 1:
                raise BadRequest(
                    f"the prompt has {prompt_len} tokens; the model's context length is "
                    f"{self._context_length} (shorten the conversation)",
                    param="messages",
                    code="context_length_exceeded",
                )
            max_new = min(max_new, room)
        params["max_new_tokens"] = max_new
        params["stop_token_ids"] = list(self._builder.stop_ids) if self._builder else []
        if chat.stop:
            params["stop"] = list(chat.stop)
        params.update(
            {"skip_special_tokens": False, "spaces_between_special_tokens": False, "no_stop_trim": True}
        )
        return params

    async def _send(
        self, request: web.Request, content: bytes | list[bytes], content_type: str
    ) -> web.StreamResponse | None:
        """Send a body (bytes, or SSE events written one by one); None when the client is gone."""
        try:
            if isinstance(content, bytes):
                response = web.StreamResponse(headers={"Content-Type": content_type})
                response.content_length = len(content)
                await response.prepare(request)
                await response.write(content)
            else:
                response = web.StreamResponse(
                    headers={"Content-Type": content_type, "Cache-Control": "no-cache"}
                )
                await response.prepare(request)
                for event in content:
                    await response.write(event)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            logger.info("client of a session went away before the reply was written")
            return None
        return response

    def _record(
        self,
        session: _Session,
        call: _Call,
        message: dict[str, Any],
        trace: CallTrace,
        key: str | None,
        reply: tuple[bytes, _Body],
    ) -> Callable[[], None]:
        """Append the trace and advance the chain; remember the reply under the idempotency key.

        Every delivered reply is a call of its own (a second sample of the same messages is
        recorded next to the first): without a client key a retry cannot be told from a new
        sample, and the agent continues with whichever reply it got.

        :returns: a function that undoes exactly this (the reply could not be delivered).
        """
        saved = (session.chain, session.chain_before, session.last_request, session.last_raw)
        with self._registry:
            if session.deleted:
                return lambda: None
            assert call.prompt is not None
            session.store.append(trace, call.prompt.ids)
        session.sampled_tokens += len(trace.completion_token_ids)
        if key is not None:
            session.replies.pop(key, None)  # re-inserted as the newest
            while len(session.replies) >= self.config.stored_replies:
                del session.replies[next(iter(session.replies))]  # the oldest goes first
            session.replies[key] = reply
        session.chain_before = session.chain_before if call.repeat else session.chain
        session.chain = _next_chain(session.chain, session.store.last_ids, call, message)
        if session.chain_before is not None:
            session.chain_before = _share_ids(session.chain_before, session.chain.ids)
        session.last_request = (call.messages, call.tools_key)
        held = _held_raw(session.body_bytes, len(call.prompt.ids))
        session.last_raw = call.request.messages if held else []
        if trace.chain_break:
            why = f"; not bridged: {call.chain_break}" if call.chain_break else ""
            sid = short_id(session.sid)
            logger.info("session %s: a new sample starts (%s%s)", sid, trace.chain_break, why)

        def undo() -> None:
            logger.info("session %s: reply not delivered, call not recorded", short_id(session.sid))
            session.chain, session.chain_before, session.last_request, session.last_raw = saved
            if key is not None:
                session.replies.pop(key, None)
            session.sampled_tokens -= len(trace.completion_token_ids)
            with self._registry:
                if not session.deleted:
                    session.store.pop_last()

        return undo
