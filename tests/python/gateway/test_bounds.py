"""The gateway's bounds on shared nodes (issue 23, findings 5, 6 and the gateway's part of 9).

Each test is the probe that found the defect: huge prompts that stalled other sessions, a
render wait without a timeout, bodies and stored replies without a per-session bound, an
Idempotency-Key reused with another body, admin routes any local user could call, session
ids in warnings, half-open connections that exhausted the open files, ``::`` serving IPv6
only. Real gateway over real loopback HTTP; the engine is the scripted SGLang stand-in
(fakes.sglang_server) and the tokenizer the toy Qwen2.5-like one (fakes.toy_tokenizer), as in
conftest. Where a render must last, it is held at a gate (so the test does not depend on how
fast this shared machine renders); one test renders for real in the gateway's own process.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway import GatewayConfig, GatewayProcess
from agentcore_slime.gateway.build import LARGE_BODY_BYTES, LARGE_RENDER_THREADS
from agentcore_slime.gateway.child import READY_PREFIX
from agentcore_slime.gateway.config import ADMIN_SECRET_HEADER
from agentcore_slime.gateway.conversation import normalize_messages
from agentcore_slime.gateway.limits import TokenFloor
from agentcore_slime.gateway.protocols import ROUTES
from fakes.sglang_server import FakeSGLang, text_policy
from fakes.waiting import until
from hypothesis import given, settings
from hypothesis import strategies as st

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
PACKAGE_ROOT = Path(__file__).resolve().parents[3] / "python"


def _chat(base: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{base}/chat/completions", content=content, **{"timeout": 30, "trust_env": False, **kw}
    )


def _big_body(chars: int, tag: str = "") -> dict[str, Any]:
    words = " ".join(f"{tag}w{i % 997}" for i in range(chars // 6))
    return {"model": "m", "messages": [{"role": "user", "content": words[:chars]}]}


class _Gate:
    """Holds every full render of a prompt longer than ``min_chars`` until opened."""

    def __init__(self, builder: Any, min_chars: int) -> None:
        self.builder, self.min_chars = builder, min_chars
        self.opened = threading.Event()
        self.rendering = threading.Semaphore(0)
        self.real = builder.render_array
        builder.render_array = self.render_array

    def render_array(self, messages: Any, tools: Any) -> Any:
        if sum(len(m.get("content") or "") for m in messages) > self.min_chars:
            self.rendering.release()
            assert self.opened.wait(60)
        return self.real(messages, tools)

    def wait_rendering(self, n: int) -> None:
        for _ in range(n):
            assert self.rendering.acquire(timeout=30), "a large render never started"


# --------------------------------------------------------------------- render lanes
def test_a_queue_of_huge_renders_does_not_delay_another_sessions_first_call(make_stand) -> None:
    """12 huge first calls fill the large lane (held at a gate, so they stay there); another
    session's 2-character first call is served by the small lane meanwhile. Before, the 4
    render threads all held huge renders and the small call waited for them."""
    stand = make_stand(fake={"context_length": 4_194_304})
    gate = _Gate(stand.gateway.calls.prompts, LARGE_BODY_BYTES)
    stand.script.replies += ["ok"] * 20
    bases = [stand.gateway.create_session(f"big-{i}") for i in range(12)]
    status: list[int] = []
    threads = [
        threading.Thread(
            target=lambda b=b, i=i: status.append(
                _chat(b, _big_body(300_000, f"s{i}"), timeout=120).status_code
            )
        )
        for i, b in enumerate(bases)
    ]
    for thread in threads:
        thread.start()
    try:
        gate.wait_rendering(LARGE_RENDER_THREADS)  # the large lane is full, 10 more queued
        with httpx.Client(timeout=30, trust_env=False) as client:
            for n in range(5):
                base = stand.gateway.create_session(f"small-{n}")
                reply = client.post(f"{base}/chat/completions", json=HELLO)
                assert reply.status_code == 200, reply.text
        # the huge ones are all still held at the gate: the small calls were not queued behind
        # them (they would have waited for the gate, which opens only below)
        assert all(thread.is_alive() for thread in threads)
    finally:
        gate.opened.set()
        for thread in threads:
            thread.join(120)
    assert status == [200] * 12


def test_a_render_past_the_render_timeout_is_a_503_and_the_session_stays_usable(make_stand) -> None:
    stand = make_stand(fake={"context_length": 4_194_304}, render_timeout=0.5)
    gate = _Gate(stand.gateway.calls.prompts, LARGE_BODY_BYTES)
    stand.script.replies.append("after the timeout")
    base = stand.gateway.create_session("s")
    slow = _chat(base, _big_body(300_000))  # answered while its render is still held at the gate
    assert slow.status_code == 503, slow.text
    assert slow.json()["error"]["code"] == "render_timeout" and "0.5 s" in slow.json()["error"]["message"]
    gate.opened.set()
    again = _chat(base, HELLO)
    assert (
        again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == "after the timeout"
    )
    time.sleep(0.5)  # the held render finished meanwhile: its prompt was discarded
    assert [t.messages for t in stand.gateway.traces("s")] == [HELLO["messages"]]
    assert len(stand.engine.requests) == 1


def test_a_queued_render_that_times_out_never_runs(make_stand) -> None:
    """Renders queued behind a held one time out without being rendered at all."""
    stand = make_stand(fake={"context_length": 4_194_304}, render_timeout=0.5)
    gate = _Gate(stand.gateway.calls.prompts, LARGE_BODY_BYTES)
    bases = [stand.gateway.create_session(f"s{i}") for i in range(LARGE_RENDER_THREADS + 2)]
    with httpx.Client(timeout=30, trust_env=False) as client:
        threads = [
            threading.Thread(target=lambda b=b: client.post(f"{b}/chat/completions", json=_big_body(100_000)))
            for b in bases
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    gate.opened.set()
    time.sleep(0.5)
    assert gate.rendering._value == LARGE_RENDER_THREADS  # type: ignore[attr-defined]  # only the running ones


# --------------------------------------------------------------------- token floor
def test_a_prompt_that_cannot_fit_is_refused_before_its_render(make_stand) -> None:
    """2.7 MB of text against a 32k context: 400 context_length_exceeded in well under the
    seconds its render takes, and the renderer is never called."""
    stand = make_stand()  # the stand-in's context: 32768 tokens
    rendered: list[int] = []
    render_array = stand.gateway.calls.prompts.render_array
    stand.gateway.calls.prompts.render_array = lambda m, t: rendered.append(1) or render_array(m, t)
    base = stand.gateway.create_session("s")
    resp = _chat(base, _big_body(2_700_000))
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_length_exceeded"
    assert "at least" in resp.json()["error"]["message"]
    assert rendered == [] and stand.engine.requests == []
    stand.script.replies.append("still here")
    assert _chat(base, HELLO).status_code == 200  # the session is usable


PIECES = st.sampled_from(
    ["e\u0301", "\u1100\u1161\u11a8", "<|im_start|>", "</tool_call>", " ", "\n", "ﬁ", "ẞ"]
)
TEXTS = st.lists(st.characters(blacklist_categories=("Cs",)) | PIECES, max_size=200).map("".join)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), TEXTS), min_size=1, max_size=5
    )
)
def test_the_token_floor_never_exceeds_the_rendered_length(
    tokenizer: Any, turns: list[tuple[str, str]]
) -> None:
    """The floor is a lower bound: never more tokens than the chat template really renders
    (combining marks, Hangul jamo NFC composes, special-token text, ligatures included)."""
    floor = TokenFloor(tokenizer)
    assert floor.longest > 0
    messages = normalize_messages([{"role": role, "content": text} for role, text in turns])
    ids = tokenizer.encode(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)
    assert floor.floor(messages) <= len(ids)


def test_the_token_floor_is_close_for_long_text(tokenizer: Any) -> None:
    floor = TokenFloor(tokenizer)
    text = _big_body(200_000)["messages"][0]["content"]
    n = len(tokenizer.encode(text, add_special_tokens=False))
    assert n / 20 < floor.floor([{"role": "user", "content": text}]) <= n


# --------------------------------------------------------------------- bodies in flight
def _raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=10)


def _half_body(url: str, path: str, declared: int) -> socket.socket:
    conn = _raw(url)
    conn.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n{{".encode()
    )
    return conn


def test_a_session_cannot_hold_more_body_bytes_than_its_bound(make_stand) -> None:
    stand = make_stand(session_body_bytes=1_000_000, client_timeout=60.0)
    stand.script.replies.append("fits")
    base = stand.gateway.create_session("s")
    path = "/sessions/s/v1/chat/completions"
    held = [_half_body(stand.gateway.url, path, 400_000) for _ in range(2)]  # 800 kB declared, never sent
    session = stand.gateway.sessions.get("s")
    until(lambda: session.bytes_in_flight >= 800_000, "the held bodies counted")
    try:
        over = _chat(base, _big_body(300_000))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["code"] == "session_bodies_in_flight"
        other = stand.gateway.create_session("other")  # another session's bound is its own
        stand.script.replies.append("other fits")
        assert _chat(other, HELLO).status_code == 200
        assert _chat(base, HELLO).status_code == 200  # a small one still fits
    finally:
        for conn in held:
            conn.close()
    until(lambda: session.bytes_in_flight == 0, "the bytes released when the bodies went away")


def test_a_body_without_a_length_counts_as_the_largest(make_stand) -> None:
    stand = make_stand(session_body_bytes=1_000_000)
    base = stand.gateway.create_session("s")

    def chunks() -> Iterator[bytes]:
        yield json.dumps(HELLO).encode()

    resp = httpx.post(f"{base}/chat/completions", content=chunks(), timeout=10, trust_env=False)
    assert resp.status_code == 429 and "67108864" in resp.json()["error"]["message"]


def _count_tokens(base: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(f"{base}/messages/count_tokens", json=body, **{"timeout": 60, "trust_env": False, **kw})


def _anthropic_body(chars: int, tag: str = "") -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, **_big_body(chars, tag)}


def test_count_tokens_counts_in_the_sessions_bodies_in_flight(make_stand) -> None:
    """count_tokens is under a call's body bound: two half-sent bodies holding 800 kB of a
    1 MB bound leave no room for a 300 kB count (before: every count was accepted)."""
    stand = make_stand(session_body_bytes=1_000_000, client_timeout=5.0)
    base = stand.gateway.create_session("s")
    held = [_half_body(stand.gateway.url, "/sessions/s/v1/messages/count_tokens", 400_000) for _ in range(2)]
    session = stand.gateway.sessions.get("s")
    until(lambda: session.bytes_in_flight >= 800_000, "the held bodies counted")
    try:
        over = _count_tokens(base, _anthropic_body(300_000))
        assert over.status_code == 429, over.text
        assert over.json()["type"] == "error" and "session's 1000000" in over.json()["error"]["message"]
        assert _count_tokens(base, _anthropic_body(100)).status_code == 200  # a small one still fits
    finally:
        for conn in held:
            conn.close()


def test_one_sessions_counts_take_one_render_lane_at_a_time(make_stand) -> None:
    """count_tokens holds the session's lock as a call does: a session's many large counts
    render one at a time, so another session's large call still finds a lane (before: 150
    counts of one session filled both large lanes and the other call waited 13 s)."""
    stand = make_stand(fake={"context_length": 4_194_304})
    gate = _Gate(stand.gateway.calls.prompts, LARGE_BODY_BYTES)
    base = stand.gateway.create_session("counter")
    status: list[int] = []
    counts = [
        threading.Thread(
            target=lambda i=i: status.append(
                _count_tokens(base, _anthropic_body(100_000, f"c{i}")).status_code
            )
        )
        for i in range(LARGE_RENDER_THREADS + 1)
    ]
    for thread in counts:
        thread.start()
    try:
        gate.wait_rendering(1)
        time.sleep(0.3)
        assert not gate.rendering.acquire(timeout=0.2), "a second count of the session rendered at once"
        other = stand.gateway.create_session("other")
        stand.script.replies.append("served")
        call = threading.Thread(
            target=lambda: status.append(_chat(other, _big_body(100_000, "o"), timeout=60).status_code)
        )
        call.start()
        gate.wait_rendering(1)  # the other session's call is rendering beside the held count
    finally:
        gate.opened.set()
        for thread in [*counts, call]:
            thread.join(60)
    assert status.count(200) == LARGE_RENDER_THREADS + 2


def test_a_client_gone_before_its_body_is_a_quiet_499_on_every_route(make_stand, caplog: Any) -> None:
    """A request whose client closed the connection before the body arrived ends quietly:
    no 500, no traceback (before: aiohttp's RuntimeError("Connection closed.") on the
    non-chat routes became a 500 with a logged traceback each)."""
    stand = make_stand()
    stand.gateway.create_session("s")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="agentcore_slime.gateway"):
        for _ in range(5):
            for path in AGENT_PATHS.values():
                conn = _half_body(stand.gateway.url, path, 1000)
                conn.close()

        def quiet() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "went away before its body arrived" in r.getMessage()]

        until(lambda: len(quiet()) >= 5 * len(AGENT_PATHS), "every closed request's quiet line")
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    assert len(quiet()) == 5 * len(AGENT_PATHS)


# --------------------------------------------------------------------- memory by tokens
def test_keys_the_template_never_renders_are_not_stored(make_stand) -> None:
    """8 calls each carrying a 1 MB key no chat template renders: the session stores what
    the template rendered (ids, logprobs, the normalized messages), not the bytes it was sent,
    and the traces the rollout reads hold no such key (before: 8 MB stored and sent on)."""
    stand = make_stand()
    base = stand.gateway.create_session("s")
    messages: list[dict[str, Any]] = []
    for turn in range(8):
        messages.append({"role": "user", "content": f"turn {turn}", "x_junk": "j" * 1_000_000})
        stand.script.replies.append(f"reply {turn}")
        reply = _chat(base, {"model": "m", "messages": messages})
        assert reply.status_code == 200, reply.text
        messages.append(reply.json()["choices"][0]["message"])
    stats = stand.gateway.stats()
    assert stats["stored_bytes"] < 64 * stats["held_tokens"] + 16_384, stats
    traces = stand.gateway.traces("s")
    assert all("x_junk" not in m for t in traces for m in t.messages)
    assert traces[-1].messages[-1] == {"role": "user", "content": "turn 7"}
    assert stand.gateway.sessions.get("s").last_raw == []  # nor is the last body held between calls


# --------------------------------------------------------------------- stored replies
def test_stored_replies_are_bounded_per_session_oldest_first(make_stand) -> None:
    stand = make_stand(stored_replies=3)
    stand.script.replies += [f"reply {i}" for i in range(6)] + ["a new sample"]
    base = stand.gateway.create_session("s")
    for i in range(6):
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
        assert _chat(base, body, headers={"Idempotency-Key": f"k{i}"}).status_code == 200
    assert list(stand.gateway.sessions.get("s").replies) == ["k3", "k4", "k5"]
    newest = _chat(
        base,
        {"model": "m", "messages": [{"role": "user", "content": "q5"}]},
        headers={"Idempotency-Key": "k5"},
    )
    assert newest.json()["choices"][0]["message"]["content"] == "reply 5"  # kept: the same reply
    dropped = _chat(
        base,
        {"model": "m", "messages": [{"role": "user", "content": "q0"}]},
        headers={"Idempotency-Key": "k0"},
    )
    assert dropped.json()["choices"][0]["message"]["content"] == "a new sample"  # forgotten: generated
    assert len(stand.gateway.traces("s")) == 7


def test_an_idempotency_key_reused_with_another_body_is_422(make_stand) -> None:
    stand = make_stand()
    stand.script.replies.append("the reply")
    base = stand.gateway.create_session("s")
    assert _chat(base, HELLO, headers={"Idempotency-Key": "k"}).status_code == 200
    other = {"model": "m", "messages": [{"role": "user", "content": "something else"}]}
    resp = _chat(base, other, headers={"Idempotency-Key": "k"})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == "idempotency_key_reused"
    assert "different request body" in resp.json()["error"]["message"]
    assert resp.headers["x-should-retry"] == "false"
    assert len(stand.engine.requests) == 1 and len(stand.gateway.traces("s")) == 1
    assert (
        _chat(base, HELLO, headers={"Idempotency-Key": "k"}).json()["choices"][0]["message"]["content"]
        == "the reply"
    )


# --------------------------------------------------------------------- admin secret
def test_admin_routes_need_the_secret_even_from_loopback(make_stand) -> None:
    stand = make_stand()
    gw = stand.gateway
    gw.create_session("s")
    for method, path in [
        ("POST", "/admin/sessions"),
        ("GET", "/admin/sessions/s/traces"),
        ("GET", "/admin/sessions/s/traces.bin"),
        ("DELETE", "/admin/sessions/s"),
        ("POST", "/admin/sessions/s/abort"),
        ("GET", "/admin/stats"),
    ]:
        missing = httpx.request(method, f"{gw.url}{path}", json={"session_id": "x"}, trust_env=False)
        assert missing.status_code == 401 and ADMIN_SECRET_HEADER in missing.json()["error"]["message"]
        wrong = httpx.request(
            method, f"{gw.url}{path}", json={"session_id": "x"}, headers={ADMIN_SECRET_HEADER: "x" * 43}
        )
        assert wrong.status_code == 403
    assert gw.traces("s") == [] and gw.sessions.get("x") is None  # nothing was created nor deleted
    ok = httpx.get(f"{gw.url}/admin/stats", headers=gw.admin_headers, trust_env=False)
    assert ok.status_code == 200 and ok.json()["sessions"] == 1


def test_two_gateways_have_different_secrets(make_stand) -> None:
    one, two = make_stand().gateway, make_stand().gateway
    assert one.admin_headers != two.admin_headers
    assert httpx.get(f"{two.url}/admin/stats", headers=one.admin_headers).status_code == 403


def test_another_user_cannot_use_the_admin_routes_and_never_sees_the_secret(
    other_user: Any, model_dir: Path, tokenizer: Any, capfd: pytest.CaptureFixture[str], caplog: Any
) -> None:
    """The gateway as the rollout starts it; a second local user on loopback cannot create a
    session, read traces, delete or abort one, even knowing its id; the secret is in no
    command line, environment or log line."""
    caplog.set_level(logging.DEBUG)
    with FakeSGLang(text_policy(tokenizer, lambda _: "ok"), tokenizer=tokenizer) as engine:
        gateway = GatewayProcess(
            GatewayConfig(str(model_dir), host="127.0.0.1", port=0, log_level="debug"), ready_timeout=60
        )
        try:
            gateway.start(engine.url)
            sid = str(uuid.uuid4())
            base = gateway.create_session(sid)
            assert _chat(base, HELLO).status_code == 200
            secret = gateway.admin_headers[ADMIN_SECRET_HEADER]
            assert len(secret) >= 32
            probe = (
                "import sys, urllib.request, urllib.error\n"
                "url, sid = sys.argv[1], sys.argv[2]\n"
                "for method, path, body in [('POST', '/admin/sessions', b'{\"session_id\": \"mine\"}'),"
                " ('GET', f'/admin/sessions/{sid}/traces', None),"
                " ('POST', f'/admin/sessions/{sid}/abort', None),"
                " ('DELETE', f'/admin/sessions/{sid}', None), ('GET', '/admin/stats', None)]:\n"
                "    req = urllib.request.Request(url + path, data=body, method=method)\n"
                "    try:\n"
                "        print(urllib.request.urlopen(req, timeout=10).status)\n"
                "    except urllib.error.HTTPError as err:\n"
                "        print(err.code)\n"
            )
            out = other_user.run([sys.executable, "-c", probe, gateway.url, sid])
            assert out.returncode == 0, out.stderr
            assert out.stdout.split() == ["403"] * 5  # TCP: the admin routes answer on the socket only
            # ... and the socket's directory is closed to her
            knock = (
                "import socket, sys\n"
                "s = socket.socket(socket.AF_UNIX)\n"
                "try:\n    s.connect(sys.argv[1])\nexcept OSError as err:\n    print(type(err).__name__)\n"
            )
            out = other_user.run([sys.executable, "-c", knock, gateway.admin_socket])
            assert out.stdout.split() == ["PermissionError"], (out.stdout, out.stderr)
            assert len(gateway.traces(sid)) == 1  # not deleted, not aborted
            with pytest.raises(ValueError, match="already exists"):
                gateway.create_session(sid)
            pid = gateway.pid
            assert pid is not None
            for name in ("cmdline", "environ"):
                assert secret.encode() not in Path(f"/proc/{pid}/{name}").read_bytes()
            peek = other_user.run(["cat", f"/proc/{pid}/environ"])
            assert peek.returncode != 0
        finally:
            gateway.shutdown()
    captured = capfd.readouterr()
    logged = captured.out + captured.err + caplog.text
    assert "GET /admin" in logged or "POST /admin" in logged  # the debug access log was on
    assert secret not in logged


# --------------------------------------------------------------------- session ids in logs
def test_warnings_show_a_short_session_id_not_the_id(make_stand, caplog: Any) -> None:
    stand = make_stand(engine_retries=0, fake={"fail_first": 5})
    sid = str(uuid.uuid4())
    with caplog.at_level(logging.WARNING, logger="agentcore_slime.gateway"):
        assert _chat(stand.gateway.create_session(sid), HELLO).status_code == 502
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(sid[:8] in line for line in warnings), warnings
    assert not any(sid in line for line in warnings)


def test_session_ids_come_from_the_os_random_source() -> None:
    """Session ids (the agent routes' only credential) are uuid4 from os.urandom: 122 random
    bits, never sequential."""
    from agentcore_slime.episodes.wire import new_session_id

    ids = [new_session_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids) and len({i[:8] for i in ids}) == len(ids)
    assert all(uuid.UUID(i).version == 4 for i in ids)
    numbers = [uuid.UUID(i).int for i in ids]
    steps = {b - a for a, b in zip(numbers, numbers[1:], strict=False)}
    assert len(steps) == len(numbers) - 1  # no constant step between consecutive ids
    from unittest import mock

    with mock.patch("os.urandom", return_value=b"\x11" * 16) as urandom:
        assert new_session_id() == str(uuid.UUID(bytes=b"\x11" * 16, version=4))
    urandom.assert_called_once_with(16)


# --------------------------------------------------------------------- open files, half-open connections
def _start_child(
    model_dir: Path, engine_url: str, limits: tuple[int, int], **config: Any
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``python -m agentcore_slime.gateway`` (the rollout's child) under an open-files limit:
    its process, URL and admin client (over its Unix socket, with its secret)."""
    import tempfile

    from agentcore_slime.gateway.child import ADMIN_ORIGIN

    secret = "s" * 43
    admin_socket = os.path.join(tempfile.mkdtemp(), "admin.sock")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentcore_slime.gateway",
            "--engine-url",
            engine_url,
            "--config",
            json.dumps({"model_dir": str(model_dir), "host": "127.0.0.1", "port": 0, **config}),
            "--admin-socket",
            admin_socket,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(secret.encode() + b"\n")
    proc.stdin.flush()
    line = proc.stdout.readline().decode()
    assert line.startswith(READY_PREFIX), line
    admin = httpx.Client(
        base_url=ADMIN_ORIGIN,
        transport=httpx.HTTPTransport(uds=admin_socket),
        headers={ADMIN_SECRET_HEADER: secret},
        timeout=10,
    )
    return proc, json.loads(line[len(READY_PREFIX) :])["ready"], admin


def _stop_child(proc: subprocess.Popen[bytes], admin: httpx.Client | None = None) -> None:
    if admin is not None:
        admin.close()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_the_open_files_limit_is_raised_to_the_hard_limit(model_dir: Path, tokenizer: Any) -> None:
    with FakeSGLang(text_policy(tokenizer, lambda _: "ok"), tokenizer=tokenizer) as engine:
        proc, _, admin = _start_child(model_dir, engine.url, (256, 4096))
        try:
            line = next(
                x for x in Path(f"/proc/{proc.pid}/limits").read_text().splitlines() if "open files" in x
            )
            assert line.split()[3:5] == ["4096", "4096"], line
        finally:
            _stop_child(proc, admin)


# every agent route, with the session's own id (an agent knows it)
AGENT_PATHS = {
    "chat": "/sessions/s/v1/chat/completions",
    **{
        route.path.split("/")[-1]: route.path.replace("{sid}", "s").replace("{model:.+}", "m")
        for route in ROUTES
    },
}
STALLS = {
    "head": [b"POST /sessions/s/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"],
    # a body never finished, on every agent route in turn
    "body": [
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode()
        for path in AGENT_PATHS.values()
    ],
}


@pytest.mark.parametrize("stall", sorted(STALLS))
def test_half_sent_requests_do_not_starve_a_legitimate_call(
    model_dir: Path, tokenizer: Any, stall: str
) -> None:
    """Open-files limit 256 (soft and hard) and 300 connections that send half a request head
    (or a whole head and half a body, on every agent route) and stall: a legitimate call still
    gets its answer at once (the oldest stalled connections are closed to make room), not after
    the 30 s client timeout, and not refused."""
    with FakeSGLang(text_policy(tokenizer, lambda _: "legit"), tokenizer=tokenizer) as engine:
        proc, url, admin = _start_child(model_dir, engine.url, (256, 256))
        stalled: list[socket.socket] = []
        try:
            made = admin.post("/admin/sessions", json={"session_id": "s"})
            base = made.json()["base_url"]
            for n in range(300):
                conn = _raw(url)
                conn.sendall(STALLS[stall][n % len(STALLS[stall])])
                stalled.append(conn)
                if n % 20 == 19:  # the gateway reads each wave's heads before the next arrives
                    time.sleep(0.1)
            time.sleep(0.5)
            # answered before the stalled connections' 30 s client timeout could have made room
            reply = _chat(base, HELLO, timeout=25)
            assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "legit"
            closed = 0
            for conn in stalled:
                conn.setblocking(False)
                try:
                    closed += conn.recv(1) == b""
                except BlockingIOError:
                    pass
                except ConnectionResetError:  # closed with an unread head: a reset (a whole
                    closed += stall == "head"  # head was read: the cap's close is a clean end)
            assert closed >= 300 - 256  # the oldest ones made room
            assert proc.poll() is None
        finally:
            for conn in stalled:
                conn.close()
            _stop_child(proc, admin)


@pytest.mark.parametrize("host", ["127.0.0.2", "localhost"])
def test_a_loopback_host_other_than_127_0_0_1_is_served_there_too(make_stand, host: str) -> None:
    """Local tools use http://127.0.0.1:PORT: a gateway bound to another loopback address or
    name (Debian's host name is 127.0.1.1; localhost may be ::1) listens there as well (and
    refuses to start when another process holds that port there: test_admin_channel.py)."""
    stand = make_stand(host=host)
    stand.script.replies += ["on 127.0.0.1"]
    port = httpx.URL(stand.gateway.url).port
    stand.gateway.create_session("s")
    reply = _chat(f"http://127.0.0.1:{port}/sessions/s/v1", HELLO)
    assert reply.json()["choices"][0]["message"]["content"] == "on 127.0.0.1"


# --------------------------------------------------------------------- dual stack
def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 loopback on this host")
def test_the_any_address_of_ipv6_serves_ipv4_clients_too(make_stand) -> None:
    stand = make_stand(host="::")
    stand.script.replies += ["over IPv4", "over IPv6"]
    port = httpx.URL(stand.gateway.url).port
    stand.gateway.create_session("s")
    v4 = _chat(f"http://127.0.0.1:{port}/sessions/s/v1", HELLO)
    assert v4.json()["choices"][0]["message"]["content"] == "over IPv4"
    v6 = _chat(f"http://[::1]:{port}/sessions/s/v1", HELLO)
    assert v6.json()["choices"][0]["message"]["content"] == "over IPv6"
