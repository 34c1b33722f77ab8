"""The trace-capturing OpenAI-compatible gateway over SGLang ``/generate``: its lifecycle and
its session API.

:class:`Gateway` serves aiohttp in its own thread with its own event loop, so the rollout's
loop never waits on it. Agents get a per-session base URL ``{gw}/sessions/{sid}/v1``;
sessions exist only when the rollout creates them. Each completed call is recorded as a
:class:`CallTrace` with the exact ids sent to and sampled by the engine, after the reply was
written to the agent.

Where the rest lives: the routes (:mod:`.routes`, admin ones :mod:`.admin`), what a call passes
before it is built (:mod:`.admission`), building it (:mod:`.build`), recording it
(:mod:`.record`), the sessions (:mod:`.sessions`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import secrets
import socket
import ssl
import stat
import threading
from typing import Any

from aiohttp import web

from agentcore_slime.addresses import own_address, url_host
from agentcore_slime.errors import ConfigError

from .build import CallBuilder, load_prompts, vocab_size
from .config import ADMIN_SECRET_HEADER, GatewayConfig, check_sampling_params
from .engine import EngineClient
from .limits import ConnectionCap, connection_cap, raise_open_files_limit
from .memory import GcWatch, freeze_long_lived, release_memory
from .routes import make_app
from .routing import check_engine
from .sessions import SESSION_ID, Session, Sessions
from .store import rebuild
from .trace import CallTrace

logger = logging.getLogger(__name__)
PACKAGE_LOGGER = "agentcore_slime.gateway"
LISTEN_BACKLOG = 1024  # connections the kernel queues for accept
ACCEPT_BATCH = 16  # connections asyncio accepts in a row before the cap can close old ones


class Gateway:
    """The gateway. All public methods are synchronous and thread-safe.

    :param config: see :class:`GatewayConfig`.
    :param admin_secret: what admin requests must send in :data:`ADMIN_SECRET_HEADER` (a
        random one when None: read it from :attr:`admin_headers`).
    :param admin_socket: a new Unix socket path (in a directory only this user can reach) where
        the admin routes are served, and only there (a gateway child's: see ``__main__``); None
        (a gateway in the caller's own process) serves them to loopback TCP peers that send
        the secret.
    """

    def __init__(
        self, config: GatewayConfig, admin_secret: str | None = None, admin_socket: str | None = None
    ) -> None:
        self.config = config
        self.admin_socket = admin_socket
        self.url = ""
        self.sessions = Sessions()
        self.calls: CallBuilder | None = None  # set by start
        self.engine: EngineClient | None = None
        self.cap: ConnectionCap | None = None
        self._admin_secret = admin_secret or secrets.token_urlsafe(32)
        self._servers: list[asyncio.AbstractServer] = []
        self._tls: ssl.SSLContext | None = None  # set by start when the config names a certificate
        self._open_files = 0  # the soft open-files limit, once raised
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
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
        self._tls = tls_context(self.config)
        self._open_files = raise_open_files_limit()
        self.calls = CallBuilder(self.config, *load_prompts(self.config))
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

    async def _start(self, engine_url: str) -> None:
        calls = self.calls
        assert calls is not None
        self.engine = EngineClient(
            engine_url,
            retries=self.config.engine_retries,
            backoff=self.config.engine_retry_backoff,
            read_timeout=self.config.engine_timeout,
            outage_seconds=self.config.engine_outage_seconds,
            vocab_size=vocab_size(calls.prompts, self.config.model_dir),
        )
        await self.engine.open()
        await self.engine.health(attempts=self.config.engine_health_attempts)
        await self.engine.discover()
        if self.engine.workers:
            logger.info("engine url is a router in front of %s", ", ".join(self.engine.workers))
        if self.config.routed_experts_layers:  # fail here, not episode by episode
            config = self.config
            await check_engine(self.engine, config.routed_experts_layers, config.routed_experts_topk)
        if calls.context_length is None:
            calls.context_length = await self.engine.context_length()
            if calls.context_length is None:
                logger.warning(
                    "the engine does not report max_model_len; no context cap (set SGLANG_CONTEXT_LENGTH)"
                )
        access = logging.getLogger(f"{PACKAGE_LOGGER}.access")
        self.cap = ConnectionCap(connection_cap(self.config.max_connections, self._open_files))
        self._runner = web.AppRunner(
            make_app(self, self.config, self.sessions, calls, self.engine, self.cap),
            access_log=access if self.config.level <= logging.DEBUG else None,
            # closes connections that send no (complete) request head within the timeout,
            # idle keep-alive ones included; bodies are bounded by the agent routes
            keepalive_timeout=self.config.client_timeout,
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self.cap.attach(self._runner.server)
        await self._bind()
        if self.admin_socket:
            await self._serve_admin(self.admin_socket)

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header admin requests send (the run's secret: never log it)."""
        return {ADMIN_SECRET_HEADER: self._admin_secret}

    async def _listen(self, host: str, port: int) -> int:
        """Serve on ``host:port`` through the connection cap; return the port.

        ``::`` serves IPv4 too (asyncio's own listener would set IPV6_V6ONLY).
        """
        assert self.cap is not None
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
        self._servers.append(
            await loop.create_server(
                self.cap.factory,
                sock=sock,
                backlog=ACCEPT_BATCH,
                ssl=self._tls,
                ssl_handshake_timeout=self.config.client_timeout if self._tls else None,
            )
        )
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
            advertised = own_address()
        elif host == "::":  # both families are served: advertise IPv6 as the host asked for it
            advertised = own_address(socket.AF_INET6) or "::1"
        else:
            advertised = str(host)
        if host and host not in ("0.0.0.0", "::", "127.0.0.1") and not _serves_127_0_0_1(host, port):
            # local tools reach it on http://127.0.0.1:PORT too, also when the host is another
            # loopback address or a name (localhost as ::1, Debian's host name as 127.0.1.1). A
            # port another process holds there stops the start: whatever is sent to
            # 127.0.0.1:PORT would reach that process, not this gateway
            try:
                await self._listen("127.0.0.1", port)
            except OSError as err:
                raise RuntimeError(
                    f"listening on {host}:{port}, but cannot also listen on 127.0.0.1:{port}: {err} "
                    "(another process, perhaps another user's, holds that port: set GATEWAY_PORT to "
                    "another port, or 0)"
                ) from None
        self.url = f"{'https' if self._tls else 'http'}://{url_host(advertised)}:{port}"

    async def _serve_admin(self, path: str) -> None:
        """Serve the admin routes on a new Unix socket at ``path`` (mode 0600; bind fails on a
        path that exists). Its connections are not the connection cap's: never closed to make
        room, never counted."""
        assert self._runner is not None and self._runner.server is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except OSError as err:
            sock.close()
            raise RuntimeError(f"cannot serve the admin routes on {path}: {err}") from None
        loop = asyncio.get_running_loop()
        self._servers.append(await loop.create_unix_server(self._runner.server, sock=sock))

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
        if self.calls is not None:
            self.calls.shutdown()

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.engine is not None:
            await self.engine.close()

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
        self.sessions.create(session_id, sampling)
        return f"{self.url}/sessions/{session_id}/v1"

    def traces(self, session_id: str) -> list[CallTrace]:
        """A copy of the session's traces in call order.

        :raises KeyError: unknown or deleted session.
        """
        stored = self.sessions.stored(session_id)
        if stored is None:
            raise KeyError(f"unknown session {session_id!r}")
        return rebuild(stored)  # outside the lock: the event loop takes it too

    def delete_session(self, session_id: str) -> None:
        """Forget a session (idempotent); later calls on its URL get 404.

        When the last session goes (a step's episodes are done), the freed heap is given back
        to the system in a render thread: Python frees a session's arrays, but the C
        allocator keeps their pages unless asked.
        """
        self._forget(session_id)

    def _forget(self, session_id: str) -> Session | None:
        session, idle = self.sessions.forget(session_id)
        if idle and self.calls is not None:
            try:
                self.calls.pool.submit(release_memory)
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
        asyncio.run_coroutine_threadsafe(_cancel_calls(session), loop).result(timeout)

    def stats(self, deep: bool = False) -> dict[str, Any]:
        """What the gateway holds: sessions, ids stored, their bytes, GC pauses since the last call.

        :param deep: also count every byte reachable from the sessions (their messages and
            chain states too; slow with thousands of sessions).
        """
        evicted = {"connections_closed_to_make_room": self.cap.closed if self.cap is not None else 0}
        return {**self.sessions.stats(deep), **self._gc_watch.take(), **evicted}


def tls_context(config: GatewayConfig) -> ssl.SSLContext | None:
    """The server side of TLS from ``tls_cert`` and ``tls_key`` (None: plain HTTP).

    :raises ConfigError: only one of them is set, the key is another user's or others can read
        it, or the pair does not load.
    """
    cert, key = config.tls_cert, config.tls_key
    if not cert and not key:
        return None
    if not cert or not key:
        raise ConfigError("GATEWAY_TLS_CERT and GATEWAY_TLS_KEY go together", "set both, or neither")
    try:
        info = os.stat(key)
    except OSError as err:
        raise ConfigError(
            f"cannot read GATEWAY_TLS_KEY {key}: {err.strerror}", "name the key's PEM file"
        ) from None
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ConfigError(
            f"GATEWAY_TLS_KEY {key} is not a private file of yours (mode {stat.S_IMODE(info.st_mode):04o}, "
            f"uid {info.st_uid}): whoever reads it can pose as the gateway",
            f"chmod 600 {key} (as its owner, the user who runs the training)",
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(
            f"cannot load GATEWAY_TLS_CERT {cert} with GATEWAY_TLS_KEY {key}: {err}",
            "both must be PEM: the certificate chain (yours first) and its unencrypted private key",
        ) from None
    return context


def _serves_127_0_0_1(host: str, port: int) -> bool:
    """Whether listening on ``host`` already serves 127.0.0.1 (a name that resolves to it)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(found) and found[0][4][0] == "127.0.0.1"


async def _cancel_calls(session: Session) -> None:
    tasks = [task for task in session.in_flight if not task.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
