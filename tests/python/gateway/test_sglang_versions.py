"""The gateway against the pinned engine stack: SGLang 0.5.13 behind sglang-router 0.3.2.

The scripted engine follows SGLang 0.5.13 by default and 0.5.23 on request (where their
/generate answers differ); ``FakeRouter`` behaves like the sglang-router 0.3.2 wheel did
on loopback (no ``max_model_len`` in its own ``/v1/models``, no ``/abort_request`` route,
``X-SMG-Routing-Key`` sticky under the ``manual`` policy). See docs/gateway.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.gateway.engine import EngineResult, routing_key, settle_finish
from fakes.sglang_server import FakeRouter, FakeSGLang, text_policy
from gateway_helpers import ADD_TOOL, Script, tool_call_text

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _chat(base: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}/chat/completions", json=body, timeout=30)


def _reply_len(tokenizer: Any, text: str) -> int:
    """Sampled ids for ``text`` as the scripted engine produces them (+ ``<|im_end|>``)."""
    return len(tokenizer.encode(text, add_special_tokens=False)) + 1


@pytest.mark.parametrize("version", ["0.5.13", "0.5.23"])
def test_stop_token_on_the_length_cap_is_a_stop(
    make_stand, tokenizer, version: str
) -> None:
    """0.5.13 reports ``length`` when the stop token is the max_new_tokens-th token."""
    stand = make_stand(fake={"sglang_version": version})
    stand.script.replies.append("four")
    cap = _reply_len(tokenizer, "four")
    base = stand.gateway.create_session("s", {"max_new_tokens": cap})
    resp = _chat(base, HELLO)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["finish_reason"] == "stop"
    assert resp.json()["choices"][0]["message"]["content"] == "four"
    (trace,) = stand.gateway.traces("s")
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert (
        trace.completion_token_ids[-1] == stop_id
        and len(trace.completion_token_ids) == cap
    )
    assert trace.finish_reason == "stop"
    raw = (
        {"type": "length", "length": cap}
        if version == "0.5.13"
        else {"type": "stop", "matched": stop_id}
    )
    assert trace.engine_finish == raw  # what the engine said


def test_tool_call_closed_on_the_length_cap_is_tool_calls(
    make_stand, tokenizer
) -> None:
    stand = make_stand()  # 0.5.13
    text = tool_call_text("add", {"a": 1, "b": 2})
    stand.script.replies.append(text)
    base = stand.gateway.create_session(
        "s", {"max_new_tokens": _reply_len(tokenizer, text)}
    )
    body = {**HELLO, "tools": [ADD_TOOL]}
    choice = _chat(base, body).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "add"
    assert stand.gateway.traces("s")[0].finish_reason == "stop"


def test_stop_string_on_the_length_cap_is_a_stop(make_stand, tokenizer) -> None:
    stand = make_stand()  # 0.5.13
    reply = "one two STOP three"
    stand.script.replies.append(reply)
    ids = tokenizer.encode(reply, add_special_tokens=False)
    cap = next(n for n in range(1, len(ids) + 1) if "STOP" in tokenizer.decode(ids[:n]))
    base = stand.gateway.create_session("s", {"max_new_tokens": cap})
    resp = _chat(base, {**HELLO, "stop": ["STOP"]})
    assert resp.json()["choices"][0]["finish_reason"] == "stop"
    (trace,) = stand.gateway.traces("s")
    assert trace.finish_reason == "stop" and trace.engine_finish == {
        "type": "length",
        "length": cap,
    }


def test_a_real_truncation_stays_length(make_stand) -> None:
    stand = make_stand()
    stand.script.replies.append("a long answer " * 10)
    base = stand.gateway.create_session("s", {"max_new_tokens": 4})
    assert _chat(base, HELLO).json()["choices"][0]["finish_reason"] == "length"
    assert stand.gateway.traces("s")[0].finish_reason == "length"


def test_settle_finish_leaves_other_answers_alone() -> None:
    def result(ids: list[int], finish: dict[str, Any]) -> EngineResult:
        return EngineResult(ids, [-0.1] * len(ids), finish)

    stop = result([5, 9], {"type": "stop", "matched": 9})
    assert settle_finish(stop, [9], [], str) is stop
    cut = result([5, 6], {"type": "length", "length": 2})
    assert settle_finish(cut, [9], ["x"], lambda ids: "no match") is cut
    assert settle_finish(
        result([5, 9], {"type": "length", "length": 2}), [9], [], str
    ).finish == {
        "type": "stop",
        "matched": 9,
    }


@pytest.fixture
def routed(model_dir, tokenizer) -> Iterator[Any]:
    """Factory: two scripted 0.5.13 engines behind a FakeRouter, and a gateway on the router."""
    started: list[Any] = []

    def make(
        script: Script, engine_kwargs: dict[str, Any] | None = None, **config: Any
    ):
        engines = [
            FakeSGLang(
                text_policy(tokenizer, script.respond),
                tokenizer=tokenizer,
                **(engine_kwargs or {}),
            )
            for _ in range(2)
        ]
        for engine in engines:
            engine.start()
            started.append(engine)
        router = FakeRouter(engines)
        router.start()
        started.append(router)
        settings = {
            "host": "127.0.0.1",
            "port": 0,
            "engine_retry_backoff": 0.01,
            **config,
        }
        gateway = Gateway(GatewayConfig(str(model_dir), **settings))
        gateway.start(router.url)
        started.append(gateway)
        return gateway, router, engines

    yield make
    for thing in reversed(started):
        (thing.shutdown if isinstance(thing, Gateway) else thing.stop)()


def test_context_length_is_read_from_the_engines_behind_the_router(routed) -> None:
    script = Script(["fine"])
    gateway, router, engines = routed(script, {"context_length": 300})
    assert (
        httpx.get(f"{router.url}/v1/models").json()["data"][0].get("max_model_len")
        is None
    )
    base = gateway.create_session("s", {"max_new_tokens": 4096})
    assert _chat(base, HELLO).status_code == 200
    sent = next(r for e in engines for r in e.requests)
    assert len(sent["input_ids"]) + sent["sampling_params"]["max_new_tokens"] == 300
    long = {**HELLO, "messages": [{"role": "user", "content": "word " * 400}]}
    resp = _chat(base, long)
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "context_length_exceeded"


def test_routing_key_keeps_a_session_on_one_engine(routed) -> None:
    script = Script(["a1", "b1", "a2", "b2", "a3", "b3"])
    gateway, router, _ = routed(script)
    bases = {sid: gateway.create_session(sid) for sid in ("sa", "sb")}
    history: dict[str, list[dict[str, Any]]] = {sid: [] for sid in bases}
    for _turn in range(3):
        for sid, base in bases.items():
            history[sid].append({"role": "user", "content": "next"})
            msg = _chat(base, {"model": "m", "messages": history[sid]}).json()[
                "choices"
            ][0]["message"]
            history[sid].append({"role": "assistant", "content": msg["content"]})
    by_key: dict[str | None, set[int]] = {}
    for key, worker in router.routed:
        by_key.setdefault(key, set()).add(worker)
    assert set(by_key) == {routing_key("sa"), routing_key("sb")}  # the ids themselves never leave
    assert all(len(workers) == 1 for workers in by_key.values())


def test_abort_after_a_timeout_reaches_the_engines_behind_the_router(routed) -> None:
    gateway, _router, engines = routed(
        Script(["slow", "slow"]), {"delay": 1.0}, engine_timeout=0.3, engine_retries=0
    )
    resp = _chat(gateway.create_session("s"), HELLO)
    assert resp.status_code == 502
    rid = next(r for e in engines for r in e.requests)["rid"]
    assert all(e.aborted_rids == [rid] for e in engines)


def test_agent_top_k_reaches_the_engine_as_an_integer(routed) -> None:
    """sglang-router 0.3.2 answers 422 to ``"top_k": 20.0`` (it is an i32 there)."""
    gateway, _router, engines = routed(Script(["fine"]))
    resp = _chat(gateway.create_session("s"), {**HELLO, "top_k": 20})
    assert resp.status_code == 200, resp.text
    sent = next(r for e in engines for r in e.requests)["sampling_params"]
    assert sent["top_k"] == 20 and isinstance(sent["top_k"], int)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": 0}, "top_k"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
    ],
)
def test_agent_sampling_out_of_sglang_range_is_400(
    extra: dict[str, Any], param: str
) -> None:
    from agentcore_slime.gateway.wire import BadRequest, parse_request

    with pytest.raises(BadRequest) as err:
        parse_request(json.dumps({**HELLO, **extra}).encode())
    assert err.value.param == param


def test_session_sampling_in_sglang_ranges() -> None:
    from agentcore_slime.gateway.config import check_sampling_params

    assert check_sampling_params({"top_k": 20.0, "repetition_penalty": 2.0}) == {
        "top_k": 20,
        "repetition_penalty": 2.0,
    }
    assert isinstance(check_sampling_params({"top_k": 20.0})["top_k"], int)
    for bad in ({"repetition_penalty": 2.5}, {"top_k": 1.5}):
        with pytest.raises(ValueError, match="out of range"):
            check_sampling_params(bad)


def test_a_plain_text_rejection_is_reported_as_such() -> None:
    """A router 422 has a plain-text body; the error names it rather than 'malformed answer'."""
    import asyncio

    from agentcore_slime.gateway.engine import EngineClient, EngineError
    from fakes.sglang_server import Completion

    def policy(ids, sp):
        return Completion([5], {"type": "stop", "matched": 5})

    with FakeSGLang(policy) as worker, FakeRouter([worker]) as router:

        async def call() -> None:
            client = EngineClient(router.url, retries=0)
            await client.open()
            try:
                await client.generate([1], {"top_k": 20.0, "max_new_tokens": 2})
            finally:
                await client.close()

        with pytest.raises(
            EngineError, match=r"HTTP 422\): Failed to deserialize"
        ) as err:
            asyncio.run(call())
    assert err.value.retryable is False
