"""The gateway in its own process (GatewayProcess): seam, start-up errors, deaths and restarts.

Real child processes (``python -m agentcore_slime.gateway``) in front of the scripted SGLang
server, with the toy tokenizer; agents' calls go over loopback HTTP with the openai SDK.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agentcore_slime.errors import ConfigError
from agentcore_slime.gateway import Gateway, GatewayConfig, GatewayProcess, GatewayProcessDied
from agentcore_slime.gateway.child import how_it_died, ready_or_raise
from fakes.ports import free_port
from fakes.sglang_server import FakeSGLang, fake_logprob, text_policy
from fakes.waiting import stop_process, until
from gateway_helpers import ADD_TOOL, Script, admin_client, tool_call_text

PACKAGE_ROOT = Path(__file__).resolve().parents[3] / "python"


@pytest.fixture
def engine(tokenizer: Any) -> Iterator[tuple[FakeSGLang, Script]]:
    script = Script()
    with FakeSGLang(text_policy(tokenizer, script.respond), tokenizer=tokenizer) as fake:
        yield fake, script


@pytest.fixture
def start(model_dir: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """``start(engine_url, **config_overrides)`` -> a serving GatewayProcess (shut down after the test)."""
    started: list[GatewayProcess] = []

    def make(engine_url: str, **overrides: Any) -> GatewayProcess:
        config = {"host": "127.0.0.1", "port": 0, "engine_retry_backoff": 0.01, **overrides}
        gateway = GatewayProcess(GatewayConfig(str(model_dir), **config), ready_timeout=60)
        started.append(gateway)
        gateway.start(engine_url)
        return gateway

    yield make
    for gateway in started:
        gateway.shutdown()


def _chat(base_url: str, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=20)
    reply = client.chat.completions.create(model="default", messages=messages, **kwargs)  # type: ignore[arg-type]
    return reply.choices[0].message.model_dump(exclude_none=True)


def _gone(pid: int) -> bool:
    """Whether a process has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def test_a_chat_through_the_child_is_traced_exactly(
    start: Callable[..., GatewayProcess],
    engine: tuple[FakeSGLang, Script],
    tokenizer: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake, script = engine
    script.replies += [tool_call_text("add", {"a": 2, "b": 3}), "2 + 3 = 5. \U0001f600"]
    with caplog.at_level(logging.INFO, logger="agentcore_slime.gateway.process"):
        gateway = start(fake.url, cumulative_token_mode=True)
    assert gateway.pid != os.getpid() and not _gone(gateway.pid or 0)
    assert f"gateway process pid {gateway.pid} serving at {gateway.url}" in caplog.text
    base = gateway.create_session("s-1", {"temperature": 0.6, "max_new_tokens": 300})
    assert base == f"{gateway.url}/sessions/s-1/v1"

    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 3? caf\u00e9"}]
    first = _chat(base, messages, tools=[ADD_TOOL])
    call = first["tool_calls"][0]
    messages += [first, {"role": "tool", "tool_call_id": call["id"], "content": "5"}]
    second = _chat(base, messages, tools=[ADD_TOOL])
    assert second["content"] == "2 + 3 = 5. \U0001f600"

    traces = gateway.traces("s-1")
    assert len(traces) == 2 == len(fake.requests)
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for trace, sent, reply in zip(traces, fake.requests, [first, second], strict=True):
        assert trace.prompt_token_ids == sent["input_ids"]  # exactly what the engine received
        assert trace.completion_token_ids[-1] == stop_id
        assert trace.logprobs == [fake_logprob(t, i) for i, t in enumerate(trace.completion_token_ids)]
        assert trace.sampling_params == sent["sampling_params"]
        assert trace.response_message.get("content") == reply.get("content")
    first_prompt = traces[0].prompt_token_ids
    assert traces[1].token_mode == "bridged"
    assert traces[1].prompt_token_ids[: len(first_prompt)] == first_prompt
    assert [m["role"] for m in traces[1].messages] == ["user", "assistant", "tool"]
    assert traces[1].messages[0] == messages[0]
    assert traces[1].messages[2] == {"role": "tool", "content": messages[2]["content"]}  # as rendered
    # the same records the child's JSON admin route gives, field for field
    with admin_client(gateway) as client:
        admin = client.get("/admin/sessions/s-1/traces").json()
    assert [dataclasses.asdict(t) for t in traces] == admin

    gateway.delete_session("s-1")
    gateway.delete_session("s-1")  # idempotent
    with pytest.raises(KeyError, match="unknown session 's-1'"):
        gateway.traces("s-1")
    with pytest.raises(ValueError, match="must match"):
        gateway.create_session("bad id", {})
    gateway.create_session("s-2", {})
    with pytest.raises(ValueError, match="already exists"):
        gateway.create_session("s-2", {})
    with pytest.raises(ValueError, match="sampling param temperature"):
        gateway.create_session("s-3", {"temperature": -1})


def test_session_calls_from_many_threads(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    """The rollout calls the seam from its thread pool: one keep-alive client shared by all."""
    fake, _ = engine
    gateway = start(fake.url)

    def episode(number: int) -> str:
        sid = f"s-{number}"
        base = gateway.create_session(sid, {"temperature": 0.5})
        assert gateway.traces(sid) == []
        gateway.delete_session(sid)
        return base

    with ThreadPoolExecutor(16) as pool:
        bases = list(pool.map(episode, range(200)))
    assert bases == [f"{gateway.url}/sessions/s-{n}/v1" for n in range(200)]


def _call_in_flight(base: str, fake: FakeSGLang) -> tuple[threading.Thread, list[BaseException]]:
    """An agent's chat call in a thread, returned once the engine has the request; the list
    gets the call's error, if it fails."""
    errors: list[BaseException] = []

    def agent() -> None:
        try:
            _chat(base, [{"role": "user", "content": "hi"}])
        except BaseException as err:  # noqa: BLE001 - the test looks at it
            errors.append(err)

    thread = threading.Thread(target=agent)
    thread.start()
    deadline = time.monotonic() + 120  # a ceiling only a hang reaches
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    return thread, errors


def test_abort_session_cancels_the_call_in_flight(
    start: Callable[..., GatewayProcess], tokenizer: Any
) -> None:
    with FakeSGLang(text_policy(tokenizer, lambda prompt: "slow"), tokenizer=tokenizer, delay=6.0) as fake:
        gateway = start(fake.url)
        base = gateway.create_session("s-1", {})
        thread, outcome = _call_in_flight(base, fake)
        started = time.monotonic()
        gateway.abort_session("s-1")
        assert time.monotonic() - started < 5  # did not wait for the engine's 6 s (a margin for load)
        thread.join(10)
        assert outcome, "the aborted call must not get a reply"
        deadline = time.monotonic() + 120  # a ceiling only a hang reaches
        while not fake.aborted_rids and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.aborted_rids == [fake.requests[0]["rid"]]
        with pytest.raises(KeyError):
            gateway.traces("s-1")


def test_start_up_errors_have_the_type_and_message_of_gateway_start(
    model_dir: Path, tmp_path: Path
) -> None:
    cases = [
        (GatewayConfig(str(tmp_path / "missing"), host="127.0.0.1", port=0), "http://127.0.0.1:9"),
        (
            GatewayConfig(str(model_dir), host="127.0.0.1", port=0, engine_health_attempts=1),
            f"http://127.0.0.1:{free_port()}",
        ),
    ]
    messages: list[tuple[type[Exception], str]] = []
    for config, engine_url in cases:
        with pytest.raises(Exception) as in_thread:
            Gateway(config).start(engine_url)
        expected = ValueError if isinstance(in_thread.value, ValueError) else RuntimeError
        gateway = GatewayProcess(config, ready_timeout=60)
        with pytest.raises(expected) as in_child:
            gateway.start(engine_url)
        assert str(in_child.value) == str(in_thread.value)
        assert gateway.pid is None and gateway.url == ""
        gateway.shutdown()
        messages.append((expected, str(in_child.value)))
    assert messages[0][0] is ValueError and "does not exist (set MODEL_DIR" in messages[0][1]
    assert messages[1][0] is RuntimeError and "is not healthy" in messages[1][1]


def test_start_up_error_kinds_map_back() -> None:
    for kind, cls in [("ConfigError", ConfigError), ("ValueError", ValueError), ("OSError", OSError)]:
        with pytest.raises(cls, match="^what is wrong$"):
            ready_or_raise({"error": kind, "message": "what is wrong"})
    with pytest.raises(RuntimeError, match="^boom$"):
        ready_or_raise({"error": "KeyError", "message": "boom"})


def test_a_child_that_does_not_report_in_time_is_killed_with_a_clear_error(model_dir: Path) -> None:
    with socket.socket() as silent:  # accepts connections (in its backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        config = GatewayConfig(str(model_dir), host="127.0.0.1", port=0, engine_health_attempts=1)
        gateway = GatewayProcess(config, ready_timeout=1.0)
        with pytest.raises(RuntimeError, match=r"did not start serving within 1 s: .*MODEL_DIR.*/health"):
            gateway.start(f"http://127.0.0.1:{silent.getsockname()[1]}")


def test_a_killed_child_fails_its_sessions_clearly_and_restarts(
    start: Callable[..., GatewayProcess],
    tokenizer: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    with FakeSGLang(text_policy(tokenizer, lambda prompt: "ok"), tokenizer=tokenizer, delay=0.5) as fake:
        gateway = start(fake.url, port=port)
        first_pid, first_url = gateway.pid, gateway.url
        assert first_pid is not None
        base = gateway.create_session("s-1", {})
        thread, errors = _call_in_flight(base, fake)
        with caplog.at_level(logging.ERROR, logger="agentcore_slime.gateway.process"):
            os.kill(first_pid, signal.SIGKILL)  # mid-call: the agent is waiting for its reply
            thread.join(10)
            assert errors and isinstance(errors[0], openai.APIConnectionError)
            died = rf"\(pid {first_pid}\) died: killed by SIGKILL \(possibly out of memory"
            with pytest.raises(GatewayProcessDied, match=died):
                gateway.traces("s-1")
            with pytest.raises(GatewayProcessDied, match="SIGKILL.*episodes of its sessions failed"):
                gateway.create_session("s-2", {})
            with pytest.raises(GatewayProcessDied):
                gateway.delete_session("s-1")
        # the watcher thread logs the death; a seam call may have seen it first
        line = f"gateway process (pid {first_pid}) died: killed by SIGKILL"
        deadline = time.monotonic() + 120  # a ceiling only a hang reaches
        while line not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in caplog.text

        assert gateway.ensure_running() is True
        assert gateway.pid != first_pid and gateway.url == first_url  # a fixed port is reused
        assert gateway.ensure_running() is False
        with pytest.raises(GatewayProcessDied, match=r"session 's-1' was lost: .*SIGKILL.*a new one serves"):
            gateway.traces("s-1")
        gateway.delete_session("s-1")  # gone with its process: nothing to do
        base = gateway.create_session("s-1", {})  # the same id is new in the new process
        assert _chat(base, [{"role": "user", "content": "again"}])["content"] == "ok"
        traces = gateway.traces("s-1")
        assert [t.prompt_token_ids for t in traces] == [fake.requests[-1]["input_ids"]]


def test_the_child_exits_when_its_parent_is_killed(
    model_dir: Path, engine: tuple[FakeSGLang, Script], tmp_path: Path
) -> None:
    fake, _ = engine
    parent = tmp_path / "parent.py"
    parent.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            from agentcore_slime.gateway import GatewayConfig, GatewayProcess
            gateway = GatewayProcess(GatewayConfig({str(model_dir)!r}, host="127.0.0.1", port=0))
            gateway.start({fake.url!r})
            print(gateway.pid, flush=True)
            time.sleep(120)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    with subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, env=env, text=True) as proc:
        try:
            assert proc.stdout is not None
            child = int(proc.stdout.readline() or 0)
            assert child and not _gone(child)
        finally:
            proc.kill()  # SIGKILL: no atexit, no shutdown(): only the closed stdin pipe tells the child
            proc.wait(10)
        assert _wait_gone(child, 120), f"gateway process {child} outlived its SIGKILLed parent"


def test_shutdown_is_idempotent_and_leaves_no_child(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    fake, _ = engine
    gateway = start(fake.url)
    pid = gateway.pid
    assert pid is not None
    gateway.shutdown()
    assert _wait_gone(pid, 120)  # a ceiling only a hang reaches
    gateway.shutdown()
    assert gateway.url == "" and gateway.pid is None
    with pytest.raises(RuntimeError, match="not started"):
        gateway.create_session("s-1", {})
    with pytest.raises(RuntimeError, match="not started"):
        gateway.ensure_running()


def test_how_it_died() -> None:
    assert how_it_died(-9) == "killed by SIGKILL (possibly out of memory: see the kernel log, dmesg)"
    assert how_it_died(-15) == "killed by SIGTERM"
    assert how_it_died(3) == "exited with status 3"
    assert "Python error" in how_it_died(1)


def test_the_gateway_process_defers_full_collections_to_idle_moments(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    """The child's own GC policy: young collections as usual, middle ones more often (shorter
    pauses), full ones only between steps (a full collection over a thousand sessions'
    objects stalled every call for 100+ ms)."""
    from agentcore_slime.gateway.memory import FULL_COLLECTIONS_DEFERRED, YOUNG_COLLECTIONS_PER_MIDDLE

    fake, _ = engine
    gateway = start(fake.url)
    with admin_client(gateway) as client:
        stats = client.get("/admin/stats").json()
    assert stats["gc_thresholds"][2] == FULL_COLLECTIONS_DEFERRED
    assert stats["gc_thresholds"][0] == gc.get_threshold()[0]  # young ones unchanged
    assert stats["gc_thresholds"][1] == YOUNG_COLLECTIONS_PER_MIDDLE < gc.get_threshold()[1]
    assert gc.get_threshold()[2] != FULL_COLLECTIONS_DEFERRED  # the parent's policy is its own


# --- issue 29: session operations in batches; finish = traces + delete in one operation


def test_finish_session_hands_over_the_exact_traces_and_deletes_the_session(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    fake, script = engine
    script.replies += ["hello"]
    gateway = start(fake.url)
    base = gateway.create_session("s-1", {})
    _chat(base, [{"role": "user", "content": "hi"}])
    expected = gateway.traces("s-1")  # the separate route, for comparison
    assert [t.prompt_token_ids for t in expected] == [fake.requests[-1]["input_ids"]]
    assert gateway.finish_session("s-1") == expected
    requests = gateway.batch_requests
    gateway.delete_session("s-1")  # finished: nothing is held, nothing is sent
    assert gateway.batch_requests == requests
    with pytest.raises(KeyError, match="unknown session 's-1'"):
        gateway.finish_session("s-1")
    with pytest.raises(KeyError, match="unknown session 's-1'"):
        gateway.traces("s-1")
    assert _chat_status(base) == 404  # the agent's next call finds no session


def _chat_status(base: str) -> int:
    body = {"model": "default", "messages": [{"role": "user", "content": "again"}]}
    return httpx.post(f"{base}/chat/completions", json=body, trust_env=False, timeout=10).status_code


def test_many_episodes_at_once_share_a_few_batch_requests(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    """300 sessions opened and finished from 300 threads at once: each operation gets its own
    result (a bad id its own error), in far fewer requests than operations."""
    fake, _ = engine
    gateway = start(fake.url)
    barrier = threading.Barrier(300)

    def episode(number: int) -> str:
        barrier.wait()
        sid = f"s-{number}" if number != 7 else "bad id"
        try:
            base = gateway.create_session(sid, {"temperature": 0.5})
        except ValueError as err:
            barrier.wait()
            return f"error: {err}"
        barrier.wait()  # every session open: the finishes come together too
        assert gateway.finish_session(sid) == []
        return base

    with ThreadPoolExecutor(300) as pool:
        bases = list(pool.map(episode, range(300)))
    assert bases[7].startswith("error: bad session request: session id 'bad id' must match")
    assert [b for n, b in enumerate(bases) if n != 7] == [
        f"{gateway.url}/sessions/s-{n}/v1" for n in range(300) if n != 7
    ]
    assert gateway.stats()["sessions"] == 0
    assert gateway.batch_requests < 200  # 600 operations; one request each would be 600


def test_a_batch_in_flight_when_the_child_dies_fails_every_operation_clearly(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    fake, _ = engine
    gateway = start(fake.url)
    for number in range(50):
        gateway.create_session(f"s-{number}", {})
    pid = gateway.pid
    assert pid is not None
    sent = gateway.batch_requests
    stop_process(pid)  # the child holds the next batch unanswered...
    try:
        futures = [gateway.submit_finish(f"s-{n}") for n in range(50)]  # each as finish_session sends it
        until(lambda: gateway.batch_requests > sent, "a batch of the finishes sent to the stopped child")
        os.kill(pid, signal.SIGKILL)  # ...and dies with it (the rest still wait in the channel)
        errors = [f.exception(30) for f in futures]
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
    assert all(isinstance(e, GatewayProcessDied) for e in errors), errors
    assert all(f"(pid {pid}) died: killed by SIGKILL" in str(e) for e in errors)


def test_the_batch_route_needs_the_secret_and_well_formed_operations(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    fake, _ = engine
    gateway = start(fake.url)
    url = "/admin/batch"
    ops = {"ops": [{"op": "create", "session_id": "s-1"}]}
    with admin_client(gateway, secret=False) as client:
        assert client.post(url, json=ops).status_code == 401  # no secret, even on the socket
    # over TCP, even with the secret and from loopback: refused (the socket is the only way in)
    tcp = httpx.post(
        f"{gateway.url}{url}", json=ops, headers=gateway.admin_headers, trust_env=False, timeout=10
    )
    assert tcp.status_code == 403 and "private socket" in tcp.text
    with admin_client(gateway) as client:
        for bad in (b"not json", b'{"ops": 3}', b'{"ops": [1]}', b"{}"):
            reply = client.post(url, content=bad)
            assert reply.status_code == 400 and "bad batch request" in reply.text
        reply = client.post(url, json={"ops": [{"op": "explode", "session_id": "s-1"}]})
    from agentcore_slime.gateway import trace_wire

    [(result, blob)] = trace_wire.decode_batch(reply.content)
    assert result["status"] == 400 and "unknown operation 'explode'" in result["message"] and blob is None
    assert gateway.stats()["sessions"] == 0



def test_a_create_cancelled_before_the_child_answered_leaves_no_session(
    start: Callable[..., GatewayProcess], engine: tuple[FakeSGLang, Script]
) -> None:
    """An episode cancelled (the tail cut) while its session's create is in flight: the child
    opens the session after the caller gave up on it, so the channel deletes it again; a create
    sent beside it and not cancelled keeps its session."""
    fake, _ = engine
    gateway = start(fake.url)
    pid = gateway.pid
    assert pid is not None
    sent = gateway.batch_requests

    stop_process(pid)  # the child holds the creates unanswered (every thread of it)
    try:
        cancelled = gateway.submit_create("s-cut", {})
        until(lambda: gateway.batch_requests == sent + 1, "the create sent")  # on its way to the child
        assert cancelled.cancel()
        kept = gateway.submit_create("s-kept", {})
        until(lambda: gateway.batch_requests == sent + 2, "the second create sent")
        assert not kept.done()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert kept.result(30) == f"{gateway.url}/sessions/s-kept/v1"
    until(lambda: gateway.batch_requests == sent + 3, "the delete sent")  # s-cut was opened
    until(lambda: gateway.stats()["sessions"] == 1, "one session left")
    with pytest.raises(KeyError, match="unknown session 's-cut'"):
        gateway.traces("s-cut")
    assert gateway.traces("s-kept") == []
    assert _chat_status(f"{gateway.url}/sessions/s-cut/v1") == 404
