"""Hostile and broken inputs (issue 18, gateway defects 1-7), each the probe that found it.

Real gateway over real loopback HTTP (httpx, raw sockets, the openai SDK); the engine is the
scripted SGLang stand-in (fakes.sglang_server) in fault modes (``corrupt`` edits its answers,
``delay`` holds them). Every wait is bounded by a timeout of a few seconds.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _chat(base: str, body: object, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, str | bytes) else json.dumps(body)
    return httpx.post(
        f"{base}/chat/completions", content=content, **{"timeout": 30, **kw}
    )


def _assert_openai_400(resp: httpx.Response, needle: str) -> None:
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"
    assert resp.headers["x-should-retry"] == "false"


# --------------------------------------------------------------------- 1. one large prompt
def _send_large_prompt(stand: Any, messages: list[dict[str, Any]]) -> tuple[threading.Thread, list[int]]:
    stand.script.replies.append("read it")
    base = stand.gateway.create_session("big")
    status: list[int] = []
    big = threading.Thread(
        target=lambda: status.append(
            _chat(base, {"model": "m", "messages": messages}, timeout=120).status_code
        )
    )
    big.start()
    return big, status


def test_a_large_prompt_renders_while_the_gateway_keeps_answering(make_stand) -> None:
    """A full render runs off the event loop: while one is in progress (held at a gate here,
    so the test does not depend on how fast this machine renders), /health answers. Before,
    a render on the loop kept /health waiting for the whole render. The ids are exactly the
    renderer's own."""
    from agentcore_slime.gateway.conversation import normalize_messages

    stand = make_stand(fake={"context_length": 262144})
    builder = stand.gateway.calls.prompts
    assert builder.releases_gil  # the toy tokenizer is encoded by its Rust tokenizer
    gate, rendering = threading.Event(), threading.Event()
    render_array = builder.render_array

    def held_render(messages: Any, tools: Any) -> Any:
        rendering.set()
        assert gate.wait(30)
        return render_array(messages, tools)

    builder.render_array = held_render
    messages = [{"role": "user", "content": "word " * 60_000}]
    big, status = _send_large_prompt(stand, messages)
    try:
        assert rendering.wait(30), "the large prompt was never rendered"
        for _ in range(3):
            assert httpx.get(f"{stand.gateway.url}/health", timeout=5).status_code == 200
        assert big.is_alive()  # still rendering: /health did not wait for it
    finally:
        gate.set()
        big.join(120)
    assert status == [200]
    del builder.render_array
    assert stand.engine.requests[0]["input_ids"] == builder.render(normalize_messages(messages), None)


def test_without_the_rust_tokenizer_a_large_prompt_renders_in_the_worker_process(make_stand) -> None:
    """When the tokenizer cannot be encoded by its Rust tokenizer (the renderer's render holds
    the GIL for the whole render), a prompt over render_pool.OFFLOAD_CHARS is rendered by the
    render worker process, with exactly the in-process render's ids."""
    from agentcore_slime.gateway.conversation import normalize_messages

    stand = make_stand(fake={"context_length": 262144})
    builder = stand.gateway.calls.prompts
    builder.rust = None  # as for a tokenizer whose own encoding differs from the renderer's
    messages = [{"role": "user", "content": "word " * 60_000}]
    big, status = _send_large_prompt(stand, messages)
    big.join(120)
    assert status == [200]
    assert stand.gateway.calls.render_pool.rendered == 1
    assert stand.engine.requests[0]["input_ids"] == builder.render(normalize_messages(messages), None)


# --------------------------------------------------------------------- 2. slow clients
def _raw_connection(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=60)  # only a hang


def test_half_sent_request_head_is_closed_after_the_client_timeout(make_stand) -> None:
    stand = make_stand(client_timeout=1.0)
    conn = _raw_connection(stand.gateway.url)
    conn.sendall(
        b"POST /sessions/s/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    )  # never finished
    assert conn.recv(100) == b""  # the gateway closed it (before the socket's timeout: a hang)
    conn.close()


def test_half_sent_body_gets_408_after_the_client_timeout(make_stand) -> None:
    stand = make_stand(client_timeout=1.0)
    stand.gateway.create_session("s")
    conn = _raw_connection(stand.gateway.url)
    conn.sendall(
        b"POST /sessions/s/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model": '
    )
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        answer += chunk
    conn.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"request_timeout" in answer
    assert stand.engine.requests == [] and stand.gateway.traces("s") == []


# --------------------------------------------------------------------- 3. retry vs new sample
def test_concurrent_identical_calls_are_all_traced(make_stand) -> None:
    """10 concurrent identical calls (self-consistency samples) -> 10 replies and 10 traces."""
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += [f"sample {i}" for i in range(10)]
    base = stand.gateway.create_session("s")
    with ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(lambda _: _chat(base, HELLO), range(10)))
    assert [r.status_code for r in replies] == [200] * 10
    contents = sorted(r.json()["choices"][0]["message"]["content"] for r in replies)
    traces = stand.gateway.traces("s")
    assert sorted(t.response_message["content"] for t in traces) == contents
    assert (
        len({tuple(t.prompt_token_ids) for t in traces}) == 1
    )  # ten samples of one prompt


def test_idempotency_key_retry_gets_the_same_reply_and_one_trace(make_stand) -> None:
    """A client retry with the key of a delivered call gets that reply again: the engine is
    not called, nothing new is recorded. A new key (or none) is a new sample."""
    stand = make_stand()
    stand.script.replies += ["the reply", "another sample"]
    base = stand.gateway.create_session("s")
    first = _chat(base, HELLO, headers={"Idempotency-Key": "k1"})
    again = _chat(base, HELLO, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(stand.engine.requests) == 1 and len(stand.gateway.traces("s")) == 1
    other = _chat(base, HELLO, headers={"Idempotency-Key": "k2"})
    assert other.json()["choices"][0]["message"]["content"] == "another sample"
    assert len(stand.gateway.traces("s")) == 2


def test_idempotency_key_of_an_undelivered_reply_generates_once(make_stand) -> None:
    """The client gave up before the reply: nothing recorded, so its retry with the same key is
    generated and traced once."""
    stand = make_stand(fake={"delay": 0.6})
    stand.script.replies += ["too late", "on time"]
    base = stand.gateway.create_session("s")
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{base}/chat/completions",
            json=HELLO,
            headers={"Idempotency-Key": "k"},
            timeout=0.2,
        )
    time.sleep(1.0)
    assert stand.gateway.traces("s") == []
    resp = _chat(base, HELLO, headers={"Idempotency-Key": "k"})
    assert resp.json()["choices"][0]["message"]["content"] == "on time"
    assert [t.response_message["content"] for t in stand.gateway.traces("s")] == [
        "on time"
    ]


# --------------------------------------------------------------------- 4. engine answers
def _set_first_id(value: Any) -> Any:
    def corrupt(answer: dict[str, Any]) -> None:
        answer["output_ids"][0] = value
        answer["meta_info"]["output_token_logprobs"][0][1] = value

    return corrupt


def _set_first_logprob(value: float) -> Any:
    def corrupt(answer: dict[str, Any]) -> None:
        answer["meta_info"]["output_token_logprobs"][0][0] = value

    return corrupt


@pytest.mark.parametrize(
    ("corrupt", "needle"),
    [
        (_set_first_id(15.7), "not an integer"),
        (_set_first_id(True), "not an integer"),
        (_set_first_id(10**9), "outside the vocabulary"),
        (_set_first_id(-1), "outside the vocabulary"),
        (_set_first_logprob(math.nan), "not a finite number <= 0"),
        (_set_first_logprob(0.5), "not a finite number <= 0"),
        (_set_first_logprob(-math.inf), "not a finite number <= 0"),
    ],
)
def test_bad_engine_answers_are_502_and_nothing_recorded(
    make_stand, corrupt, needle: str
) -> None:
    stand = make_stand(fake={"corrupt": corrupt})
    stand.script.replies.append("hello there")
    resp = _chat(stand.gateway.create_session("s"), HELLO)
    assert resp.status_code == 502, resp.text
    assert needle in resp.json()["error"]["message"]
    assert resp.headers["x-should-retry"] == "false"
    assert stand.gateway.traces("s") == []


# --------------------------------------------------------------------- 5. malformed requests
def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _assistant(tool_calls: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": tool_calls},
            {"role": "user", "content": "go on"},
        ],
    }


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (_assistant("add(1, 2)"), "tool_calls must be a list"),
        (_assistant(5), "tool_calls must be a list"),
        (_assistant([1]), "messages[1].tool_calls[0]"),
        (
            _assistant([{"type": "function", "function": "add"}]),
            "messages[1].tool_calls[0]",
        ),
        (
            _assistant([{"function": {"name": "add", "arguments": 5}}]),
            "arguments must be a JSON string",
        ),
        (
            '{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_k": NaN}',
            "NaN is not JSON",
        ),
        (
            '{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_k": Infinity}',
            "Infinity",
        ),
        (
            '{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_k": 1e400}',
            "out of range",
        ),
        (
            '{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 1'
            + "0" * 400
            + "}",
            "top_p",
        ),  # noqa: E501
        (
            '{"model": "m", "messages": [{"role": "user", "content": '
            + _nested(990)
            + "}]}",
            "nested deeper",
        ),
        (
            '{"model": "m", "messages": [{"role": "user", "content": '
            + _nested(800)
            + "}]}",
            "nested deeper",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
            "not valid JSON",
        ),
    ],
)
def test_malformed_requests_are_openai_shaped_400(
    make_stand, body: Any, needle: str
) -> None:
    stand = make_stand()
    base = stand.gateway.create_session("s")
    _assert_openai_400(_chat(base, body), needle)
    assert stand.engine.requests == [] and stand.gateway.traces("s") == []
    admin = httpx.get(
        f"{stand.gateway.url}/admin/sessions/s/traces", headers=stand.gateway.admin_headers, timeout=10
    )
    assert admin.status_code == 200 and admin.json() == []


def test_the_sdk_does_not_retry_a_malformed_request(make_stand) -> None:
    stand = make_stand()
    client = openai.OpenAI(
        base_url=stand.gateway.create_session("s"), api_key="x", max_retries=2
    )
    bad = [
        {"role": "assistant", "content": None, "tool_calls": [1]},
        {"role": "user", "content": "x"},
    ]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=bad)


# --------------------------------------------------------------------- 6. NaN / Infinity sampling
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_temperature_is_refused_before_the_engine(
    make_stand, literal: str
) -> None:
    stand = make_stand()
    base = stand.gateway.create_session(
        "s"
    )  # no trainer temperature: the agent's would be used
    body = (
        '{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": '
        + literal
        + "}"
    )
    resp = _chat(base, body)
    assert (
        resp.status_code == 400
        and resp.json()["error"]["type"] == "invalid_request_error"
    )
    assert stand.engine.requests == []


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_session_sampling_params_are_refused(
    make_stand, value: float
) -> None:
    stand = make_stand()
    for key in ("temperature", "top_p", "top_k"):
        with pytest.raises(ValueError, match="out of range"):
            stand.gateway.create_session(f"s-{key}", {key: value})
    admin = httpx.post(
        f"{stand.gateway.url}/admin/sessions",
        content='{"session_id": "a", "sampling_params": {"temperature": NaN}}',
        headers=stand.gateway.admin_headers,
        timeout=10,
    )
    assert admin.status_code == 400 and "NaN" in admin.json()["error"]["message"]


# --------------------------------------------------------------------- 7. IPv6
def test_url_host_brackets_ipv6_literals() -> None:
    from agentcore_slime.addresses import url_host

    assert url_host("::1") == "[::1]" and url_host("fd00::5") == "[fd00::5]"
    assert url_host("10.0.0.5") == "10.0.0.5" and url_host("[::1]") == "[::1]"


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 loopback on this host")
@pytest.mark.parametrize("host", ["::1", "::"])
def test_ipv6_hosts_advertise_a_bracketed_url_agents_can_use(
    make_stand, host: str
) -> None:
    stand = make_stand(host=host)
    stand.script.replies.append("hello over IPv6")
    url = httpx.URL(stand.gateway.url)
    assert (
        stand.gateway.url.startswith("http://[") and ":" in url.host
    )  # an IPv6 literal
    client = openai.OpenAI(
        base_url=stand.gateway.create_session("s"), api_key="x", max_retries=0
    )
    out = client.chat.completions.create(**HELLO)
    assert out.choices[0].message.content == "hello over IPv6"
