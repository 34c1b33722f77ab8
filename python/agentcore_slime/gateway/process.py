"""The gateway in a child process of the rollout, with :class:`~.server.Gateway`'s seam.

The rollout process also runs the agent launcher, boto3 and S3 polling; a gateway in one of
its threads competes with them for the GIL, so every agent's model call waits on the
rollout's own work. :class:`GatewayProcess` runs the real gateway in
``python -m agentcore_slime.gateway`` (its own interpreter) and forwards the session calls to
its loopback admin routes; traces come back as :mod:`.trace_wire` bytes.

- Admin calls go over a Unix socket in a directory only this user can reach (mode 0700, made
  here), never over TCP: a loopback port is anyone's to bind first. They also carry a per-child
  secret (random, made here) that the child reads from its stdin, never from its command line
  or environment.
- The child inherits stderr (its log lines go where the rollout's go) and watches its stdin:
  when the parent dies, however, the pipe closes and the child exits.
- Session operations (create, traces, finish = traces and delete, delete) go through a
  :class:`~.channel.Channel`: a few threads that send whatever operations are waiting as one
  ``POST /admin/batch`` request, so a thousand episodes starting or ending together cost a
  handful of round trips, not one httpx request each (issue 29). Aborts and stats keep their
  own routes (an abort waits for the session's calls to stop).
- A watcher thread notices when the child dies. From then on every session call raises
  :class:`GatewayProcessDied`, saying how it died; the episodes of its sessions fail with
  ``gateway_error``. :meth:`GatewayProcess.ensure_running` (called by the rollout at the start
  of each step) starts a new child with the same settings.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict
from functools import partial
from typing import Any, TypeVar

import httpx

from agentcore_slime.errors import ToolkitError

from . import trace_wire
from .channel import Channel, Op, Reply
from .child import (
    Child,
    check_socket_is_ours,
    child_env,
    how_it_died,
    kill_group,
    private_socket_dir,
    read_ready,
    remove_socket_dir,
    start_timeout,
    stop,
)
from .config import ADMIN_SECRET_HEADER, GatewayConfig, short_id
from .store import rebuild
from .trace import CallTrace

logger = logging.getLogger(__name__)
T = TypeVar("T")
CALL_TIMEOUT = 30.0  # seconds for one admin call (a session's traces included)
ABORT_TIMEOUT = 10.0  # seconds the child waits for an aborted session's calls to stop


class GatewayProcessDied(ToolkitError, RuntimeError):
    """The gateway's process died: its sessions are gone (their episodes fail)."""


class GatewayProcess:
    """:class:`~.server.Gateway` in a supervised child process. Methods are thread-safe.

    :param config: the gateway's settings (the child gets them as JSON).
    :param ready_timeout: seconds to wait for the child to serve (default: :func:`start_timeout`).
    :param call_timeout: seconds for one admin call.
    """

    def __init__(
        self, config: GatewayConfig, *, ready_timeout: float | None = None, call_timeout: float = CALL_TIMEOUT
    ) -> None:
        self.config = config
        self.ready_timeout = start_timeout(config) if ready_timeout is None else ready_timeout
        self.call_timeout = call_timeout
        self._engine_url = ""
        self._child: Child | None = None
        self._generation = 0  # children started so far
        self._socket_dir = ""  # where its children's admin sockets are (private_socket_dir)
        self._sessions: dict[str, int] = {}  # session id -> the generation that holds it
        self._deaths: dict[int, str] = {}  # generation -> what happened to it
        self._lock = threading.Lock()  # state above
        self._lifecycle = threading.Lock()  # start / restart / shutdown, one at a time

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """The serving child's URL, as agents reach it ("" before start)."""
        child = self._child
        return child.url if child is not None else ""

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.proc.pid if child is not None else None

    @property
    def alive(self) -> bool:
        """Whether its child serves (started, not dead, not shut down)."""
        child = self._child
        return child is not None and not child.died and child.proc.poll() is None

    def start(self, engine_url: str) -> None:
        """Start the child and wait until it serves (or reports why it cannot).

        :raises ValueError: bad configuration (model dir, family, parser names), as ``Gateway.start``.
        :raises RuntimeError: the engine is not healthy, the port cannot be bound, or the child
            did not report within ``ready_timeout``.
        """
        with self._lifecycle:
            if self._child is not None:
                raise RuntimeError("gateway already started")
            self._engine_url = engine_url
            try:
                self._spawn()
            except BaseException:
                remove_socket_dir(self._socket_dir)
                self._socket_dir = ""
                raise
        logger.info("gateway process pid %s serving at %s (engine %s)", self.pid, self.url, engine_url)

    def ensure_running(self) -> bool:
        """Start a new child if the last one died (same settings; port 0 gets a new port).

        :returns: whether a new child was started.
        :raises RuntimeError: never started, or the new child cannot start (as :meth:`start`).
        """
        with self._lifecycle:
            child = self._child
            if child is None:
                raise RuntimeError("gateway process not started (call start(engine_url) first)")
            if child.proc.poll() is None:
                return False
            died = self._mark_dead(child, child.proc.wait())
            _close_channel(child)
            child.client.close()
            stop(child.proc)  # closes its pipes
            self._spawn()
        logger.warning(
            "gateway process restarted: pid %s serving at %s (the last one %s)", self.pid, self.url, died
        )
        return True

    def shutdown(self) -> None:
        """Stop the child: close its stdin, SIGTERM, then SIGKILL after STOP_TIMEOUT (idempotent)."""
        with self._lifecycle:
            with self._lock:
                child, self._child = self._child, None
            if child is None:
                return
            child.died = "was shut down"
            _close_channel(child)
            child.client.close()
            stop(child.proc)
            remove_socket_dir(self._socket_dir)

    def _admin_socket(self) -> str:
        """A new path for the next child's admin socket, in this gateway's private directory."""
        if not self._socket_dir:
            self._socket_dir = private_socket_dir()
        path = os.path.join(self._socket_dir, f"admin-{self._generation + 1}.sock")
        try:
            os.unlink(path)  # left by a child of the same generation that failed to start
        except FileNotFoundError:
            pass
        return path

    def _spawn(self) -> None:
        """Start a child and wait for its ready line (caller holds the lifecycle lock)."""
        admin_socket = self._admin_socket()
        command = [
            sys.executable,
            "-m",
            "agentcore_slime.gateway",
            "--engine-url",
            self._engine_url,
            "--config",
            json.dumps(asdict(self.config)),
            "--admin-socket",
            admin_socket,
        ]
        secret = secrets.token_urlsafe(32)  # the admin routes' key for this child
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env(),
            start_new_session=True,  # its own process group: its render worker goes down with it
        )
        try:
            assert proc.stdin is not None
            proc.stdin.write(secret.encode() + b"\n")  # its first stdin line; stdin stays open
            proc.stdin.flush()
            what = (
                f"that MODEL_DIR ({self.config.model_dir}) loads, and that the engine "
                f"{self._engine_url} answers /health"
            )
            ready = read_ready(proc, self.ready_timeout, what)
            check_socket_is_ours(admin_socket)
        except BaseException:
            stop(proc)
            raise
        child = Child(proc, self._generation + 1, ready["ready"], admin_socket, self.call_timeout, secret)
        try:
            child.client.get("/health").raise_for_status()
        except httpx.HTTPError as err:
            child.client.close()
            stop(proc)
            raise RuntimeError(
                f"the gateway process serves at {child.url} but its admin routes do not answer on "
                f"its socket {child.admin}: {err}"
            ) from None
        child.channel = Channel(str(proc.pid), partial(self._send_batch, child))
        with self._lock:
            self._generation = child.generation
            self._child = child
        threading.Thread(
            target=self._watch, args=(child,), name=f"agentcore-gateway-watch-{proc.pid}", daemon=True
        ).start()

    def _watch(self, child: Child) -> None:
        """Wait for the child to exit; an exit nobody asked for is logged once and marked."""
        returncode = child.proc.wait()
        kill_group(child.proc.pid)  # a render worker it leaves behind
        self._mark_dead(child, returncode)

    def _mark_dead(self, child: Child, returncode: int) -> str:
        """Record how the child died (whoever notices first logs it); a shut down child stays so."""
        with self._lock:
            first = not child.died
            if first:
                child.died = f"(pid {child.proc.pid}) died: {how_it_died(returncode)}"
                self._deaths[child.generation] = child.died
        if first:
            logger.error("the gateway process %s; the episodes of its sessions fail", child.died)
        return child.died

    # ------------------------------------------------------------------ sessions
    def create_session(self, session_id: str, sampling_params: dict[str, Any] | None = None) -> str:
        """Open a session in the child and return its base URL (see ``Gateway.create_session``).

        :raises ValueError: bad id or params, or the session already exists.
        :raises GatewayProcessDied: the child died.
        """
        return self._wait(self.submit_create(session_id, sampling_params), "create", session_id)

    def traces(self, session_id: str) -> list[CallTrace]:
        """The session's exact traces in call order.

        :raises KeyError: unknown or deleted session.
        :raises GatewayProcessDied: the child that held the session died.
        """
        return self._wait(self._submit_traces("traces", session_id), "traces", session_id)

    def finish_session(self, session_id: str) -> list[CallTrace]:
        """The session's exact traces in call order, and the session deleted, in one operation
        (what an episode that ended needs; a later :meth:`delete_session` has nothing to do).

        :raises KeyError: unknown or deleted session.
        :raises GatewayProcessDied: the child that held the session died.
        """
        return self._wait(self.submit_finish(session_id), "finish", session_id)

    def submit_create(self, session_id: str, sampling_params: dict[str, Any] | None = None) -> Future[str]:
        """:meth:`create_session` without a thread waiting for it: the future gets the base URL or
        the error (an event loop awaits it with ``asyncio.wrap_future``). Cancelled before the
        child answered, the session it opened is deleted."""
        child, generation = self._serving()

        def created(reply: Reply) -> str:
            result = reply[0]
            if result.get("status") == 400:
                raise ValueError(str(result.get("message")))
            _check_op(result, child, "create", session_id)
            with self._lock:
                self._sessions[session_id] = generation
            return str(result["base_url"])

        return self._submit(child, Op("create", session_id, sampling_params), created)

    def submit_finish(self, session_id: str) -> Future[list[CallTrace]]:
        """:meth:`finish_session` without a thread waiting for it (see :meth:`submit_create`)."""
        return self._submit_traces("finish", session_id)

    def _submit_traces(self, kind: str, session_id: str) -> Future[list[CallTrace]]:
        child, _ = self._serving(session_id)

        def taken(reply: Reply) -> list[CallTrace]:
            result, blob = reply
            if kind == "finish" and result.get("status") in (200, 404):
                with self._lock:
                    self._sessions.pop(session_id, None)
            if result.get("status") == 404:
                raise KeyError(f"unknown session {session_id!r}")
            _check_op(result, child, kind, session_id)
            try:
                stored = trace_wire.decode(blob or b"")
            except ValueError as err:
                raise RuntimeError(
                    f"the gateway process sent unreadable traces for session {short_id(session_id)}: {err}"
                ) from None
            return rebuild(stored)

        return self._submit(child, Op(kind, session_id), taken)

    def _submit(self, child: Child, op: Op, convert: Callable[[Reply], T]) -> Future[T]:
        """Send ``op`` through the child's channel; the returned future gets ``convert`` of its
        reply (run on the channel's thread) or the error. Cancelling the returned future never
        cancels the operation: a session a cancelled create opened is deleted."""
        assert child.channel is not None
        out: Future[T] = Future()

        def done(inner: Future[Reply]) -> None:
            if not out.set_running_or_notify_cancel():  # cancelled: undo what the child did
                opened = inner.exception() is None and inner.result()[0].get("status") == 200
                if op.kind == "create" and opened and child.channel is not None:
                    child.channel.submit(Op("delete", op.session_id))
                return
            try:
                out.set_result(convert(inner.result()))
            except BaseException as err:  # the caller gets it, whatever it is
                out.set_exception(err)

        op.future.add_done_callback(done)
        child.channel.submit(op)
        return out

    def _wait(self, future: Future[T], kind: str, session_id: str) -> T:
        """Wait for a submitted operation (the channel's request has its own timeout; this one is
        the last resort)."""
        try:
            return future.result(self.call_timeout + 5.0)
        except TimeoutError:
            child = self._child
            pid = child.proc.pid if child is not None else None
            raise RuntimeError(
                f"the gateway process (pid {pid}) did not answer {kind} for session "
                f"{short_id(session_id)} within {self.call_timeout + 5.0:g} s"
            ) from None

    def delete_session(self, session_id: str) -> None:
        """Forget a session (idempotent; a session of a dead child is gone already, a finished
        one too)."""
        with self._lock:
            if session_id not in self._sessions:  # never opened here, finished or deleted: nothing held
                return
        child = self._release(session_id)
        if child is not None:

            def deleted(reply: Reply) -> None:
                _check_op(reply[0], child, "delete", session_id)

            self._wait(self._submit(child, Op("delete", session_id), deleted), "delete", session_id)

    def _send_batch(self, child: Child, ops: list[dict[str, Any]]) -> bytes:
        response = self._call(
            child, "POST", "/admin/batch", content=json.dumps({"ops": ops}).encode(),
            headers={"content-type": "application/json"},
        )
        _check(response, child)
        return response.content

    def abort_session(self, session_id: str, timeout: float = ABORT_TIMEOUT) -> None:
        """Delete a session and abort its calls in flight (see ``Gateway.abort_session``)."""
        child = self._release(session_id)
        if child is not None:
            path = f"/admin/sessions/{session_id}/abort"
            _check(self._call(child, "POST", path, timeout=timeout + 5.0), child)

    def _release(self, session_id: str) -> Child | None:
        """Stop tracking a session; the child that still holds it (None: it died with an older one).

        :raises GatewayProcessDied: the serving child died.
        """
        if self._lost(session_id):
            return None
        child, _ = self._serving()
        with self._lock:
            self._sessions.pop(session_id, None)
        return child

    def _lost(self, session_id: str) -> bool:
        """Whether the session belonged to a child that has been replaced (then it is forgotten)."""
        with self._lock:
            generation = self._sessions.get(session_id)
            if generation is None or generation == self._generation:
                return False
            del self._sessions[session_id]
            return True

    def _serving(self, session_id: str | None = None) -> tuple[Child, int]:
        """The serving child and its generation.

        :raises GatewayProcessDied: it died, or ``session_id`` was opened in a child that died.
        """
        with self._lock:
            child, generation = self._child, self._generation
            held_by = self._sessions.get(session_id, generation) if session_id is not None else generation
            lost = self._deaths.get(held_by) if held_by != generation else None
        if child is None:
            raise RuntimeError("gateway process not started (call start(engine_url) first)")
        if lost is not None:
            raise GatewayProcessDied(
                f"session {session_id!r} was lost: the gateway process {lost}; "
                f"a new one serves at {child.url}"
            )
        if child.died:
            raise _died(child)
        return child, generation

    @property
    def batch_requests(self) -> int:
        """Batch requests the serving child's channel has sent (tests and benchmarks count them)."""
        child = self._child
        return 0 if child is None or child.channel is None else child.channel.requests

    @property
    def admin_socket(self) -> str:
        """The serving child's admin socket ("" before start): admin routes answer only there."""
        child = self._child
        return "" if child is None else child.admin

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header the serving child's admin routes need (its secret: never log it)."""
        child = self._child
        return {} if child is None else {ADMIN_SECRET_HEADER: str(child.client.headers[ADMIN_SECRET_HEADER])}

    def stats(self, deep: bool = False) -> dict[str, Any]:
        """The child's ``/admin/stats`` (see ``Gateway.stats``)."""
        child, _ = self._serving()
        response = self._call(child, "GET", "/admin/stats", params={"deep": "1"} if deep else None)
        _check(response, child)
        return dict(response.json())

    def _call(self, child: Child, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return child.client.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            try:  # a connection the child's death cut: say so (the watcher may not have seen it yet)
                returncode = child.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"the gateway process (pid {child.proc.pid}) did not answer {method} {_redact(path)}: "
                    f"{type(err).__name__}: {err}"
                ) from None
            self._mark_dead(child, returncode)
            raise _died(child) from None


def _close_channel(child: Child) -> None:
    if child.channel is not None:
        child.channel.close(_died(child))


def _check_op(result: dict[str, Any], child: Child, kind: str, session_id: str) -> None:
    if result.get("status") != 200:
        raise RuntimeError(
            f"the gateway process (pid {child.proc.pid}) answered {kind} for session "
            f"{short_id(session_id)} with {result.get('status')}: {result.get('message')}"
        )


def _died(child: Child) -> GatewayProcessDied:
    return GatewayProcessDied(
        f"the gateway process {child.died}; the episodes of its sessions failed "
        "(the rollout starts a new one at its next step)"
    )


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


def _check(response: httpx.Response, child: Child) -> None:
    if response.status_code >= 400:
        raise RuntimeError(
            f"the gateway process (pid {child.proc.pid}) answered {response.request.method} "
            f"{_redact(response.request.url.path)} with {_error_message(response)}"
        )


def _redact(path: str) -> str:
    """An admin path with its session id shortened (errors end up in logs)."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1:3] == ["admin", "sessions"]:
        parts[3] = short_id(parts[3])
    return "/".join(parts)


