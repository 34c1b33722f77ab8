"""The gateway's sessions: what each holds, its calls in flight, and the registry the rollout's
calls and the event loop share.

A session exists only while the rollout keeps it (created and deleted through the session API,
never by an agent's call). Its traces and its ``deleted`` flag are read from other threads under
the registry's lock; everything else about it is the event loop's alone.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from .conversation import ChainState, Prompt
from .memory import deep_size
from .protocols.base import Body, Protocol
from .store import SessionTraces, _Stored
from .wire import ChatRequest

SESSION_ID = re.compile(r"^[A-Za-z0-9._:~-]{1,256}$")


@dataclass
class Session:
    """A session's state. ``store`` and ``deleted`` are read from other threads under the registry lock."""

    sid: str
    sampling: dict[str, Any]
    store: SessionTraces = field(default_factory=SessionTraces)
    chain: ChainState | None = None  # after the last recorded call
    chain_before: ChainState | None = None  # before it (a repeat of that call is built from here)
    last_request: tuple[list[dict[str, Any]], str] | None = None
    # the last call's messages as sent, while they are about what its prompt rendered (record.held_raw)
    last_raw: list[dict[str, Any]] = field(default_factory=list)
    body_bytes: int = 0  # size of the last chat body: a much larger next one brings much new text
    bytes_in_flight: int = 0  # body bytes of its calls being read or served (bounded per session)
    # Idempotency-Key -> the body's digest and the reply sent (oldest first, bounded per session)
    replies: dict[str, tuple[bytes, Body]] = field(default_factory=dict)
    deleted: bool = False
    sampled_tokens: int = 0  # completion tokens of its recorded calls (MAX_TOKENS_PER_EPISODE)
    capped: str | None = None  # the cap it reached ("calls" / "tokens"), once it is logged
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_flight: set[asyncio.Task[Any]] = field(default_factory=set)  # chat handlers (gateway loop only)


@dataclass
class Call:
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
    side_call: str = ""  # why it is outside the main conversation ("" when it is not: side_calls.py)


class Sessions:
    """The live sessions by id, behind one lock (the rollout's threads and the event loop share it)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Session] = {}
        self.lock = threading.Lock()

    def create(self, session_id: str, sampling: dict[str, Any]) -> None:
        """:raises ValueError: the id already exists."""
        with self.lock:
            if session_id in self.by_id:
                raise ValueError(f"session {session_id!r} already exists (delete it first)")
            self.by_id[session_id] = Session(session_id, sampling)

    def get(self, session_id: str) -> Session | None:
        with self.lock:
            return self.by_id.get(session_id)

    def stored(self, session_id: str) -> list[_Stored] | None:
        """A snapshot of the session's stored calls, None for an unknown session."""
        with self.lock:
            session = self.by_id.get(session_id)
            return None if session is None else session.store.snapshot()

    def forget(self, session_id: str) -> tuple[Session | None, bool]:
        """Remove a session; it and whether it was the last one."""
        with self.lock:
            session = self.by_id.pop(session_id, None)
            if session is not None:
                session.deleted = True
            return session, session is not None and not self.by_id

    def stats(self, deep: bool) -> dict[str, Any]:
        """Sessions, ids stored and their bytes (and every byte the sessions reach, when ``deep``)."""
        with self.lock:
            sessions = list(self.by_id.values())
            held = sum(s.store.held_tokens for s in sessions)
            stored = sum(s.store.nbytes for s in sessions)
        out: dict[str, Any] = {"sessions": len(sessions), "held_tokens": held, "stored_bytes": stored}
        if deep:
            out["session_bytes"] = deep_size(sessions, skip=(asyncio.Lock, asyncio.Task))
        return out
