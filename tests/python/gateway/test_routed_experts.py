"""Rollout routing replay through the gateway: what each call asks the engine for, what it keeps.

Stand-in: the scripted engine (fakes.sglang_server) returns routed experts exactly as SGLang
0.5.13 and 0.5.15.post1 encode them (base64 of int32 rows of positions
``[routed_experts_start_len, seqlen - 1)``, the start honoured, a 400 past the prompt); its rows
are a function of the tokens up to each position (``routed_row``), so the rows a call should
have are known without the gateway. The last test runs the real sglang-router 0.3.2 wheel
from PyPI (what tests/requirements.txt installs), not a stand-in.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from typing import Any

import httpx
import numpy as np
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig, trace_wire
from agentcore_slime.gateway.engine import EngineError
from agentcore_slime.gateway.routing import NO_ROWS
from fakes.ports import free_port
from fakes.sglang_server import FakeSGLang, MoeShape, routed_rows, text_policy
from gateway_helpers import Script

SHAPE = MoeShape(layers=3, topk=2, experts=8)
ROUTED = {"routed_experts_layers": SHAPE.layers, "routed_experts_topk": SHAPE.topk}


def _chat(base: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    resp = httpx.post(
        f"{base}/chat/completions", json={"model": "m", "messages": messages, **extra}, timeout=30
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["choices"][0]["message"])


def _conversation(base: str, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for turn in range(turns):
        reply = _chat(base, messages)
        messages += [
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": f"go {turn}"},
        ]
    return messages


@pytest.fixture
def moe_stand(make_stand, tokenizer):
    """Factory: the scripted MoE engine and a gateway replaying routing, with these replies (the
    gateway's start asks the engine for one token's row first: a reply of its own)."""

    def make(replies: list[str], **config: Any) -> Any:
        script = Script(["probe", *replies])
        settings = {"cumulative_token_mode": True, **ROUTED, **config}
        stand = make_stand(text_policy(tokenizer, script.respond), {"routed_experts": SHAPE}, **settings)
        stand.script = script
        (probe,) = stand.engine.requests
        assert probe["return_routed_experts"] and probe["routed_experts_start_len"] == 0
        stand.engine.requests.clear()
        return stand

    return make


def _expected(trace: Any) -> bytes:
    sequence = trace.prompt_token_ids + trace.completion_token_ids
    return routed_rows(sequence, trace.routed_experts_start, len(sequence) - 1, SHAPE).tobytes()


def test_each_call_asks_only_for_what_its_session_does_not_hold(moe_stand) -> None:
    stand = moe_stand(["one", "two two", "three three three", "four"])
    base = stand.gateway.create_session("s1")
    _conversation(base, 4)
    traces = stand.gateway.traces("s1")
    sent = stand.engine.requests
    assert [r["return_routed_experts"] for r in sent] == [True] * 4
    previous_end = 1  # the first call holds nothing: it asks from 0
    for request, trace in zip(sent, traces, strict=True):
        assert request["routed_experts_start_len"] == trace.routed_experts_start == previous_end - 1
        assert trace.routed_experts == _expected(trace) and trace.routed_experts_problem == ""
        added = len(trace.prompt_token_ids) + len(trace.completion_token_ids) - trace.routed_experts_start - 1
        assert len(trace.routed_experts) == added * 4 * SHAPE.layers * SHAPE.topk
        previous_end = len(trace.prompt_token_ids) + len(trace.completion_token_ids)
    # bytes grow with what a call adds, never with the history before it
    assert traces[-1].routed_experts_start > 0
    assert len(traces[-1].routed_experts) < len(traces[-1].prompt_token_ids) * 4 * SHAPE.layers * SHAPE.topk


def test_a_fork_asks_from_the_prefix_it_shares(moe_stand) -> None:
    stand = moe_stand(["alpha", "beta", "gamma"])
    base = stand.gateway.create_session("s2")
    messages = _conversation(base, 2)
    messages[0] = {"role": "user", "content": "a rewritten start"}  # history rewritten: a fork
    _chat(base, messages)
    first, _, fork = stand.gateway.traces("s2")
    assert fork.joined == "forked"
    shared = 0
    while fork.prompt_token_ids[shared] == first.prompt_token_ids[shared]:
        shared += 1
    assert fork.routed_experts_start == shared  # the system prompt's rows are the session's
    assert fork.routed_experts == _expected(fork)


def test_engines_without_the_flag_stop_the_gateways_start(make_stand, tokenizer) -> None:
    """Before any agent runs (the rollout's first step fails with this, not every episode)."""
    with pytest.raises(EngineError, match="routing replay .*3 layers x top-2.*returned no routed_experts"):
        make_stand(text_policy(tokenizer, lambda prompt: "ok"), **ROUTED)  # no routed_experts: no capture


def test_a_shape_other_than_the_engines_stops_the_gateways_start(make_stand, tokenizer) -> None:
    with pytest.raises(EngineError, match="not the 64 of 1 rows x 64 bytes"):
        policy = text_policy(tokenizer, lambda prompt: "ok")
        make_stand(policy, {"routed_experts": SHAPE}, routed_experts_layers=8, routed_experts_topk=2)


def test_an_engine_that_stops_returning_rows_leaves_the_calls_without(moe_stand) -> None:
    stand = moe_stand(["x", "y"])
    stand.engine.routed_experts = None  # e.g. replaced by an engine started without the flag
    base = stand.gateway.create_session("s3")
    _conversation(base, 2)
    traces = stand.gateway.traces("s3")
    assert [t.routed_experts for t in traces] == [None, None]
    assert traces[0].routed_experts_problem == NO_ROWS
    assert [r["routed_experts_start_len"] for r in stand.engine.requests] == [0, 0]  # nothing held


def test_a_router_that_drops_the_start_still_gives_exact_rows(moe_stand) -> None:
    class FromZero(FakeSGLang):
        """An engine behind a router that forwards return_routed_experts but drops the start."""

        def _complete(self, body: dict[str, Any], rid: str, *, aborted: bool) -> dict[str, Any]:
            return super()._complete({**body, "routed_experts_start_len": 0}, rid, aborted=aborted)

    stand = moe_stand(["p", "q"])
    stand.engine.__class__ = FromZero
    base = stand.gateway.create_session("s4")
    _conversation(base, 2)
    second = stand.gateway.traces("s4")[1]
    assert second.routed_experts_start > 0 and second.routed_experts == _expected(second)


def test_routing_off_sends_nothing_extra(make_stand) -> None:
    stand = make_stand(fake={"routed_experts": SHAPE})
    stand.script.replies = ["hello"]
    _chat(stand.gateway.create_session("s5"), [{"role": "user", "content": "hi"}])
    (request,) = stand.engine.requests
    assert "return_routed_experts" not in request and "routed_experts_start_len" not in request
    (trace,) = stand.gateway.traces("s5")
    assert trace.routed_experts_start is None and trace.routed_experts is None


def test_rows_cross_the_process_boundary_bit_for_bit(moe_stand) -> None:
    stand = moe_stand(["m", "n", "o"])
    base = stand.gateway.create_session("s6")
    _conversation(base, 3)
    session = stand.gateway.sessions.get("s6")
    assert session is not None
    stored = session.store.snapshot()
    decoded = trace_wire.decode(trace_wire.encode(stored))
    assert [c.routed for c in decoded] == [c.routed for c in stored]
    assert session.store.nbytes >= sum(len(c.routed or b"") for c in stored)


class _AlwaysRows(FakeSGLang):
    """Answers with every position's rows whatever the request says (to see what a router
    does with a large answer: 48 layers x top-8, a Qwen3-30B-A3B-shaped model); with
    ``always`` off, an engine honouring the request."""

    always = True

    def _complete(self, body: dict[str, Any], rid: str, *, aborted: bool) -> dict[str, Any]:
        return super()._complete({**body, "return_routed_experts": self.always}, rid, aborted=aborted)


def test_the_pypi_sglang_router_032_drops_the_routing_fields(model_dir, tokenizer) -> None:
    """The real sglang-router 0.3.2 wheel (PyPI) re-serializes /generate through a typed
    request without ``return_routed_experts`` and ``routed_experts_start_len``: the engine
    never sees them (and returns no rows), while a large answer (6 MB of rows) passes whole.
    A gateway replaying routing behind it refuses to start, saying why. slime's own build of
    the router (install_slime.sh pins it) is what a run must use; docs/rollout.md."""
    shape = MoeShape(layers=48, topk=8, experts=128)
    engine = _AlwaysRows(text_policy(tokenizer, lambda prompt: "ok"), routed_experts=shape)
    port = free_port()
    with engine:
        router = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
             "--worker-urls", engine.url, "--policy", "manual", "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):  # a ceiling that only catches a router that never starts
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            ids = [3 + i % 50 for i in range(4000)]
            body = {"input_ids": ids, "return_logprob": True, "return_routed_experts": True,
                    "routed_experts_start_len": 5, "sampling_params": {"max_new_tokens": 8}}  # fmt: skip
            answer = httpx.post(f"{url}/generate", json=body, timeout=60).json()
            seen = engine.requests[-1]
            assert "return_routed_experts" not in seen and "routed_experts_start_len" not in seen
            rows = np.frombuffer(base64.b64decode(answer["meta_info"]["routed_experts"]), dtype=np.int32)
            sequence = ids + answer["output_ids"]
            expected = routed_rows(sequence, 0, len(sequence) - 1, shape)  # from 0: no start seen
            assert rows.nbytes > 6_000_000 and np.array_equal(rows, expected.reshape(-1))
            engine.always = False
            gateway = Gateway(GatewayConfig(str(model_dir), host="127.0.0.1", port=0, **ROUTED))
            with pytest.raises(EngineError, match="returned no routed_experts"):
                gateway.start(url)
            gateway.shutdown()
        finally:
            router.terminate()
            router.wait(timeout=30)


@pytest.mark.parametrize("start", [-1, 100])
def test_a_start_outside_the_prompt_is_refused_as_sglang_does(start: int, tokenizer) -> None:
    with FakeSGLang(text_policy(tokenizer, lambda p: "x"), routed_experts=SHAPE) as engine:
        body = {"input_ids": [1, 2, 3], "return_routed_experts": True, "routed_experts_start_len": start}
        assert httpx.post(f"{engine.url}/generate", json=body, timeout=30).status_code == 400


def test_an_undone_call_gives_its_rows_back_to_the_next_start() -> None:
    """A reply that could not be delivered is undone: the session holds the rows it held before."""
    from array import array

    from agentcore_slime.gateway.store import SessionTraces
    from agentcore_slime.gateway.trace import CallTrace

    def trace(prompt: list[int], completion: list[int], start: int) -> CallTrace:
        rows = b"\0" * 4 * (len(prompt) + len(completion) - 1 - start)
        return CallTrace(prompt, completion, [-0.1] * len(completion), "stop", routed_experts_start=start,
                         routed_experts=rows)  # fmt: skip

    store = SessionTraces()
    store.append(trace([1, 2, 3], [4, 5], 0))
    nxt = array("i", [1, 2, 3, 4, 5, 6])
    assert store.routed_experts_start(nxt) == 4  # every position but the last sampled one
    store.append(trace([1, 2, 3, 4, 5, 6], [7], 4))
    assert store.routed_experts_start(array("i", [1, 2, 3, 4, 5, 6, 7, 8])) == 6
    store.pop_last()
    assert store.routed_experts_start(nxt) == 4
    store.append(CallTrace([1, 2, 3, 4, 5, 6], [7], [-0.1], "stop", routed_experts_start=4))  # no rows
    assert store.routed_experts_start(array("i", [1, 2, 3, 4, 5, 6, 7, 8])) == 4  # only what was held
