"""Hostile and broken requests on every route beside chat completions: half-sent bodies,
oversize bodies, identical concurrent calls, aborted calls, unknown paths. Each error is in
the route's protocol shape and nothing is recorded.

Engine: the scripted SGLang server; raw sockets and httpx play the misbehaving clients.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest


def _anthropic_shaped(reply: httpx.Response) -> bool:
    return reply.json()["type"] == "error" and "message" in reply.json()["error"]


def _openai_shaped(reply: httpx.Response) -> bool:
    return "message" in reply.json()["error"]


def _bedrock_shaped(reply: httpx.Response) -> bool:
    return "Exception:" in reply.headers["x-amzn-errortype"] and "message" in reply.json()


ANTHROPIC_BODY = {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
CONVERSE_BODY = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
ROUTES: list[tuple[str, dict[str, Any], Callable[[httpx.Response], bool]]] = [
    ("v1/messages", ANTHROPIC_BODY, _anthropic_shaped),
    ("v1/responses", {"input": "hi"}, _openai_shaped),
    ("model/m/converse", CONVERSE_BODY, _bedrock_shaped),
    ("model/m/converse-stream", CONVERSE_BODY, _bedrock_shaped),
    ("model/m/invoke", ANTHROPIC_BODY, _bedrock_shaped),
    ("model/m/invoke-with-response-stream", ANTHROPIC_BODY, _bedrock_shaped),
]
IDS = [route for route, _, _ in ROUTES]


def _raw_request(url: str, head: bytes, body: bytes) -> bytes:
    """Send a request head and a part of its body; return what the gateway answers."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as conn:  # only a hang
        conn.sendall(head + body)
        answer = b""
        while not answer.rstrip().endswith(b"}"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.parametrize(("route", "body", "shaped"), ROUTES, ids=IDS)
def test_half_sent_body_gets_408_in_the_protocol_shape(make_stand, route, body, shaped) -> None:
    stand = make_stand(client_timeout=1.0)
    stand.gateway.create_session("s")
    head = (
        f"POST /sessions/s/{route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n"
    ).encode()
    answer = _raw_request(stand.gateway.url, head, b'{"messages": ')  # the socket's timeout: a hang
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    status, _, rest = answer.partition(b"\r\n\r\n")
    reply = httpx.Response(408, headers=_headers(status), content=rest)
    assert shaped(reply)
    assert stand.engine.requests == [] and stand.gateway.traces("s") == []


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode().split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


@pytest.mark.parametrize(("route", "body", "shaped"), ROUTES, ids=IDS)
def test_oversize_body_and_unknown_session_in_the_protocol_shape(make_stand, route, body, shaped) -> None:
    stand = make_stand()
    stand.gateway.create_session("s")
    url = f"{stand.gateway.url}/sessions/s/{route}"
    huge = httpx.post(
        url, content=b" " * (64 * 1024**2 + 1), headers={"content-type": "application/json"}, timeout=60
    )
    assert huge.status_code == 413 and shaped(huge)
    missing = httpx.post(f"{stand.gateway.url}/sessions/nope/{route}", json=body)
    assert missing.status_code == 404 and shaped(missing)
    wrong_type = httpx.post(url, json={**body, "messages": {"role": "user"}, "input": 5})
    assert wrong_type.status_code == 400 and shaped(wrong_type)
    assert stand.engine.requests == [] and stand.gateway.traces("s") == []


@pytest.mark.parametrize(("route", "body", "shaped"), ROUTES, ids=IDS)
def test_identical_concurrent_calls_are_all_traced(make_stand, route, body, shaped) -> None:
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += [f"sample {i}" for i in range(4)]
    stand.gateway.create_session("s")
    url = f"{stand.gateway.url}/sessions/s/{route}"
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda _: httpx.post(url, json=body, timeout=30), range(4)))
    assert [r.status_code for r in replies] == [200] * 4
    traces = stand.gateway.traces("s")
    assert sorted(t.response_message["content"] for t in traces) == [f"sample {i}" for i in range(4)]
    assert len({tuple(t.prompt_token_ids) for t in traces}) == 1  # four samples of one prompt


@pytest.mark.parametrize(("route", "body", "shaped"), ROUTES, ids=IDS)
def test_an_aborted_call_gets_no_reply_and_is_not_recorded(make_stand, route, body, shaped) -> None:
    stand = make_stand(fake={"delay": 3.0})
    stand.script.replies += ["slow"]
    stand.gateway.create_session("s")
    outcome: list[str] = []

    def call() -> None:
        try:
            reply = httpx.post(f"{stand.gateway.url}/sessions/s/{route}", json=body, timeout=10)
            outcome.append(f"status {reply.status_code}")
        except httpx.HTTPError as err:
            outcome.append(type(err).__name__)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 120  # a ceiling only a hang reaches
    while not stand.engine.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    stand.gateway.abort_session("s")
    thread.join(10)
    assert outcome and not outcome[0].startswith("status 200"), outcome
    deadline = time.monotonic() + 120  # a ceiling only a hang reaches
    while not stand.engine.aborted_rids and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stand.engine.aborted_rids == [stand.engine.requests[0]["rid"]]
    with pytest.raises(KeyError):
        stand.gateway.traces("s")
