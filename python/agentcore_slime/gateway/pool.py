"""Several gateway processes behind the one seam the rollout and bin/eval use (``GATEWAY_PROCESSES``).

One gateway process serves its calls on one core: the CPU it spends per model call (parsing,
rendering, the reply) bounds the calls per second a node's agents get, while a GPU node has
dozens of idle cores. :class:`GatewayPool` runs N :class:`~.process.GatewayProcess` children, each
on its own port, and places every session on one of them: the child with the fewest live
sessions when it is created. The session's base URL (what the agent is given) names that child,
so all of its calls, its traces and its deletion go there. Each child keeps every guarantee of a
single one (its own admin secret, batched session operations, caps, bounds, memory policy); a
child that dies fails only its own sessions (``GatewayProcessDied``), and :meth:`ensure_running`
restarts whichever died.

How many: ``GATEWAY_PROCESSES``, or (0) ``settings.config.gateway_pool_size`` from the node's
cores and ``MAX_CONCURRENT``. Ports: with ``GATEWAY_PORT`` 0 every child takes a free port;
otherwise child i listens on ``GATEWAY_PORT + i`` (open that range to the agents; bin/doctor
checks it).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from agentcore_slime.settings.config import gateway_pool_size

from .config import GatewayConfig
from .process import GatewayProcess, GatewayProcessDied
from .trace import CallTrace


class GatewayPool:
    """N gateway processes; each session lives on one. Methods are thread-safe.

    :param config: the gateway's settings (child i gets ``port + i`` when the port is not 0).
    :param processes: how many children (>= 1).
    :param options: passed to each :class:`GatewayProcess` (timeouts).
    """

    def __init__(self, config: GatewayConfig, processes: int = 1, **options: Any) -> None:
        if processes < 1:
            raise ValueError(f"a gateway pool needs at least 1 process, got {processes}")
        if config.port and config.port + processes - 1 > 65535:
            raise ValueError(f"GATEWAY_PORT {config.port} + {processes} processes passes port 65535")
        self.config = config
        self.members = [
            GatewayProcess(dataclasses.replace(config, port=config.port + i if config.port else 0), **options)
            for i in range(processes)
        ]
        self._where: dict[str, int] = {}  # session id -> its member
        self._live = [0] * processes  # sessions per member
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """The first child's URL (each session's base URL names its own child)."""
        return self.members[0].url

    @property
    def urls(self) -> list[str]:
        return [member.url for member in self.members]

    def start(self, engine_url: str) -> None:
        """Start every child (one after the other: each loads the tokenizer); if one cannot
        start, those already serving are stopped and its error is raised."""
        started: list[GatewayProcess] = []
        try:
            for member in self.members:
                member.start(engine_url)
                started.append(member)
        except BaseException:
            for member in started:
                member.shutdown()
            raise

    def ensure_running(self) -> bool:
        """Restart every child that died (see :meth:`GatewayProcess.ensure_running`)."""
        restarted = [member.ensure_running() for member in self.members]
        return any(restarted)

    def shutdown(self) -> None:
        for member in self.members:
            member.shutdown()

    # ------------------------------------------------------------------ sessions
    def _place(self, session_id: str) -> tuple[GatewayProcess, bool]:
        """The member a new session goes to: the live one with the fewest sessions (any, when
        none is alive: it then raises ``GatewayProcessDied``), and whether this placed it (a
        session already placed stays where it is: creating it again fails there)."""
        with self._lock:
            index = self._where.get(session_id)
            if index is not None:
                return self.members[index], False
            live = [i for i, member in enumerate(self.members) if member.alive] or range(len(self.members))
            index = min(live, key=self._live.__getitem__)
            self._where[session_id] = index
            self._live[index] += 1
            return self.members[index], True

    def _member(self, session_id: str) -> GatewayProcess | None:
        with self._lock:
            index = self._where.get(session_id)
        return None if index is None else self.members[index]

    def _forget(self, session_id: str) -> None:
        with self._lock:
            index = self._where.pop(session_id, None)
            if index is not None:
                self._live[index] -= 1

    def _forget_when(
        self, session_id: str, future: Future[Any], ended: Callable[[Future[Any]], bool]
    ) -> None:
        """Forget the session once ``future`` is done, if ``ended`` says nothing is left of it."""

        def done(finished: Future[Any]) -> None:
            if ended(finished):
                self._forget(session_id)

        future.add_done_callback(done)

    def create_session(self, session_id: str, sampling_params: dict[str, Any] | None = None) -> str:
        member, placed = self._place(session_id)
        try:
            return member.create_session(session_id, sampling_params)
        except BaseException:
            if placed:  # no session was opened
                self._forget(session_id)
            raise

    def submit_create(self, session_id: str, sampling_params: dict[str, Any] | None = None) -> Future[str]:
        member, placed = self._place(session_id)
        try:
            future = member.submit_create(session_id, sampling_params)
        except BaseException:  # e.g. its child died before the operation was queued
            if placed:
                self._forget(session_id)
            raise
        if placed:
            self._forget_when(session_id, future, _not_opened)
        return future

    def traces(self, session_id: str) -> list[CallTrace]:
        return self._known(session_id).traces(session_id)

    def finish_session(self, session_id: str) -> list[CallTrace]:
        try:
            traces = self._known(session_id).finish_session(session_id)
        except (KeyError, GatewayProcessDied):
            self._forget(session_id)
            raise
        self._forget(session_id)
        return traces

    def submit_finish(self, session_id: str) -> Future[list[CallTrace]]:
        future = self._known(session_id).submit_finish(session_id)
        self._forget_when(session_id, future, _session_gone)
        return future

    def delete_session(self, session_id: str) -> None:
        member = self._member(session_id)
        if member is None:
            return  # never placed, or already finished or deleted: nothing is held for it
        try:
            member.delete_session(session_id)
        except (KeyError, GatewayProcessDied):  # nothing is held for it either
            self._forget(session_id)
            raise
        self._forget(session_id)

    def abort_session(self, session_id: str, **kwargs: Any) -> None:
        member = self._member(session_id)
        if member is not None:
            member.abort_session(session_id, **kwargs)

    def _known(self, session_id: str) -> GatewayProcess:
        member = self._member(session_id)
        if member is None:
            raise KeyError(f"unknown session {session_id!r}")
        return member

    def sessions_per_process(self) -> list[int]:
        with self._lock:
            return list(self._live)

    def stats(self, deep: bool = False) -> dict[str, Any]:
        """Every child's admin stats: counts added up, maxima the largest, each child's own under
        ``processes``."""
        each = [member.stats(deep) for member in self.members]
        total: dict[str, Any] = {}
        for stats in each:
            for key, value in stats.items():
                if not isinstance(value, int | float) or isinstance(value, bool):
                    continue
                if key not in total:
                    total[key] = value
                else:
                    total[key] = max(total[key], value) if "_max_" in key else total[key] + value
        return {**total, "processes": each}


def _not_opened(done: Future[Any]) -> bool:
    """Whether a create opened no session (cancelled ones are deleted by GatewayProcess)."""
    return done.cancelled() or done.exception() is not None


def _session_gone(done: Future[Any]) -> bool:
    """Whether a finish left nothing in its child: it took the traces, the session was unknown
    there, or the child died (an error in between keeps the session known, to be deleted)."""
    if done.cancelled():
        return False
    error = done.exception()
    return error is None or isinstance(error, KeyError | GatewayProcessDied)


__all__ = ["GatewayPool", "gateway_pool_size"]
