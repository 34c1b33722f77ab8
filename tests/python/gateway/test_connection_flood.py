"""Issue 43, finding 3: a flood of idle connections from another address closes no call of a
live session, slow bodies included.

Before: at the connection cap the gateway closed the oldest connection without a request being
handled, and a call whose body was still arriving was not "being handled" yet: about 1,000
idle connections a second from another host broke 2 of 3 calls that sent a 600 KB body over
4 s (broken pipe), and the gateway logged nothing. Now the cap closes connections that never
sent a request on a live session first, the crowded peer's first (each peer holds a bounded
number of them), never a call on a live session; it counts and logs what it closed.

"Another address": the flood's sockets are bound to 127.0.0.2 before they connect (the kernel
routes all of 127.0.0.0/8 on loopback), the agents' calls come from 127.0.0.1. The gateway is
the real one (in this process) with a cap of 64 connections; the engine is the scripted SGLang
stand-in (fakes.sglang_server). Bounded: 1,500 flood connections, three 600 KB bodies sent over
about 2 s, 20 short calls.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from collections import deque
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway import GatewayConfig

FLOOD_CONNECTIONS = 1500
BODY_BYTES = 600_000
BODY_CHUNKS = 10
CHUNK_PAUSE = 0.2  # seconds between two chunks of a slow body: about 2 s a body


def _flood(host: str, port: int, stop: threading.Event, opened: list[int]) -> None:
    """Idle connections from 127.0.0.2 as fast as they open (at most 400 held here at once:
    the gateway closes most of them long before)."""
    held: deque[socket.socket] = deque()
    try:
        for _ in range(FLOOD_CONNECTIONS):
            if stop.is_set():
                break
            conn = socket.socket()
            conn.bind(("127.0.0.2", 0))
            try:
                conn.connect((host, port))
            except OSError:
                conn.close()
                continue
            held.append(conn)
            opened[0] += 1
            if len(held) > 400:
                held.popleft().close()
    finally:
        while held:
            held.popleft().close()


def _slow_call(host: str, port: int, path: str, results: list[Any]) -> None:
    """One chat call whose 600 KB body arrives in 10 chunks over about 2 s (valid JSON: the
    message, then whitespace)."""
    message = json.dumps({"model": "m", "messages": [{"role": "user", "content": "slow"}]}).encode()
    body = message + b" " * (BODY_BYTES - len(message))
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        step = len(body) // BODY_CHUNKS + 1
        for start in range(0, len(body), step):
            conn.send(body[start : start + step])
            time.sleep(CHUNK_PAUSE)
        reply = conn.getresponse()
        results.append((reply.status, json.loads(reply.read())["choices"][0]["message"]["content"]))
    except (OSError, http.client.HTTPException, ValueError, KeyError) as err:
        results.append(err)
    finally:
        conn.close()


def test_an_idle_connection_flood_from_another_address_breaks_no_call_of_a_live_session(
    make_stand: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(GatewayConfig, "max_connections", 64)
    caplog.set_level(logging.WARNING, logger="agentcore_slime.gateway")
    stand = make_stand(host="0.0.0.0", port=0)
    stand.script.replies.extend(["answer"] * 40)
    assert stand.gateway.cap is not None and stand.gateway.cap.cap == 64
    port = httpx.URL(stand.gateway.url).port
    assert port is not None
    slow_sids = [f"slow-{n}" for n in range(3)]
    fast_sids = [f"fast-{n}" for n in range(4)]
    for sid in slow_sids + fast_sids:
        stand.gateway.create_session(sid)

    stop, opened = threading.Event(), [0]
    flood = threading.Thread(target=_flood, args=("127.0.0.1", port, stop, opened), daemon=True)
    slow_results: list[Any] = []
    slow = [
        threading.Thread(
            target=_slow_call,
            args=("127.0.0.1", port, f"/sessions/{sid}/v1/chat/completions", slow_results),
            daemon=True,
        )
        for sid in slow_sids
    ]
    for thread in slow:  # their heads first: the flood then arrives while their bodies do
        thread.start()
    time.sleep(0.3)
    flood.start()
    fast = []
    try:
        for n in range(20):  # each on a new connection, while the flood runs
            body = {"model": "m", "messages": [{"role": "user", "content": f"fast {n}"}]}
            sid = fast_sids[n % len(fast_sids)]
            reply = httpx.post(
                f"http://127.0.0.1:{port}/sessions/{sid}/v1/chat/completions", json=body, timeout=30,
                trust_env=False,
            )
            fast.append(reply.status_code)
        for thread in slow:
            thread.join(60)
    finally:
        stop.set()
        flood.join(60)

    assert fast == [200] * 20
    assert slow_results == [(200, "answer")] * 3, slow_results
    assert all(len(stand.gateway.traces(sid)) == 1 for sid in slow_sids)
    assert sum(len(stand.gateway.traces(sid)) for sid in fast_sids) == 20
    # the flood was closed to make room, counted and logged (the first close at once)
    closed = stand.gateway.stats()["connections_closed_to_make_room"]
    assert opened[0] > 300 and closed > 0, (opened[0], closed)
    logged = [r.getMessage() for r in caplog.records if "to make room" in r.getMessage()]
    assert logged and "just now" in logged[0] and "127.0.0.2" in logged[0]
    assert len(logged) == 1  # then once a minute, not per close
