"""Engines that die. Several engines without a router (bin/eval's layout, docs/eval.md "Several
engines"): the gateway's engine client spreads sessions over the engines itself, keeps each
session on one, and sends a dead engine's sessions to the next. Engines behind slime's router
(training): with fault tolerance a call outlives a dead engine until slime removes it. Real
gateway over loopback HTTP, scripted SGLang and router stand-ins (fakes.sglang_server), the toy
tokenizer."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.gateway.engine import (
    OUTAGE_SLACK_SECONDS,
    ROUTING_HEADER,
    EngineClient,
    EngineError,
    EngineResult,
    outage_seconds,
    routing_key,
)
from aiohttp import web
from fakes.http import ThreadedAiohttpServer
from fakes.sglang_server import FakeRouter, FakeSGLang, text_policy


def _turns(base: str, turns: int) -> None:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"turn {turn}"})
        reply = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages},
                           timeout=30, trust_env=False)
        assert reply.status_code == 200, reply.text
        messages.append(reply.json()["choices"][0]["message"])


def test_sessions_spread_over_engines_stay_on_one_and_move_when_it_dies(
    model_dir: Path, tokenizer: Any
) -> None:
    engines = [FakeSGLang(text_policy(tokenizer, lambda _: "ok"), tokenizer=tokenizer) for _ in range(2)]
    for engine in engines:
        engine.start()
    gateway = Gateway(GatewayConfig(str(model_dir), host="127.0.0.1", port=0, engine_retry_backoff=0.01))
    try:
        gateway.start(",".join(e.url for e in engines))
        sids = [f"s{i}" for i in range(16)]
        for sid in sids:
            _turns(gateway.create_session(sid), 2)
        served = [{h[ROUTING_HEADER] for h in e.headers} for e in engines]
        keys = {routing_key(sid) for sid in sids}
        assert served[0] and served[1] and not served[0] & served[1]  # both serve, a session on one
        assert served[0] | served[1] == keys  # by a digest: no engine sees a session id
        engines[0].stop()  # engine 0 dies: its sessions' next calls go to engine 1
        moved = [sid for sid in sids if routing_key(sid) in served[0]]
        for sid in moved:
            _turns(gateway.create_session(f"{sid}-again"), 1)
        before = len(engines[1].requests)
        base = gateway.create_session("after")
        _turns(base, 2)
        assert len(engines[1].requests) == before + 2
        assert all(len(gateway.traces(sid)) == 2 for sid in sids)
    finally:
        gateway.shutdown()
        for engine in engines:
            engine.stop()


def _engines_behind_a_router(tokenizer: Any) -> tuple[list[FakeSGLang], FakeRouter]:
    engines = [FakeSGLang(text_policy(tokenizer, lambda _: "ok"), tokenizer=tokenizer) for _ in range(2)]
    for engine in engines:
        engine.start()
    router = FakeRouter(engines)
    router.start()
    return engines, router


def _episodes_across_a_dead_engine(
    gateway: Gateway, engines: list[FakeSGLang], router: FakeRouter, removed_after: float
) -> list[int]:
    """16 sessions of 3 turns each; engine 0 dies after every session's first turn, and the
    router stand-in removes it ``removed_after`` seconds later (as slime's health monitor
    does). Returns the status of each session's last call."""
    bases = {f"s{i}": gateway.create_session(f"s{i}") for i in range(16)}
    histories: dict[str, list[dict[str, Any]]] = {sid: [] for sid in bases}
    statuses: dict[str, int] = {}

    def turn(sid: str) -> None:
        histories[sid].append({"role": "user", "content": f"turn {len(histories[sid])}"})
        reply = httpx.post(f"{bases[sid]}/chat/completions", json={"model": "m", "messages": histories[sid]},
                           timeout=60, trust_env=False)
        statuses[sid] = reply.status_code
        if reply.status_code == 200:
            histories[sid].append(reply.json()["choices"][0]["message"])

    for sid in bases:
        turn(sid)
    engines[0].stop()
    remover = threading.Timer(removed_after, router.remove_worker, args=(0,))
    remover.start()
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in range(2):
            list(pool.map(turn, bases))
    remover.join()
    return [statuses[sid] for sid in bases]


def test_calls_outlive_a_dead_engine_while_another_serves(model_dir: Path, tokenizer: Any) -> None:
    """With an outage window (slime's --use-fault-tolerance), a dead engine's calls are retried
    through the router until slime has removed it: every episode completes, each trace is
    what the engine that answered received and sampled, and the retried calls say so."""
    engines, router = _engines_behind_a_router(tokenizer)
    config = GatewayConfig(str(model_dir), host="127.0.0.1", port=0, engine_retry_backoff=0.05,
                           engine_outage_seconds=10.0)
    gateway = Gateway(config)
    try:
        gateway.start(router.url)
        assert _episodes_across_a_dead_engine(gateway, engines, router, removed_after=1.5) == [200] * 16
        received = [list(r["input_ids"]) for e in engines for r in e.requests]
        traces = [t for i in range(16) for t in gateway.traces(f"s{i}")]
        assert len(traces) == 16 * 3
        assert all(t.prompt_token_ids in received for t in traces)  # exactly what an engine got
        retried = [t for t in traces if t.engine_attempts > 1]
        assert retried and all(t.finish_reason == "stop" for t in traces)
    finally:
        gateway.shutdown()
        router.stop()
        engines[1].stop()


def test_without_fault_tolerance_a_dead_engine_fails_its_calls(model_dir: Path, tokenizer: Any) -> None:
    """No outage window (fault tolerance off): the fixed retries (here 3 x 50 ms backoff) end
    before the dead engine leaves the router, and its sessions' calls fail with 502, as before."""
    engines, router = _engines_behind_a_router(tokenizer)
    gateway = Gateway(GatewayConfig(str(model_dir), host="127.0.0.1", port=0, engine_retry_backoff=0.05))
    try:
        gateway.start(router.url)
        statuses = _episodes_across_a_dead_engine(gateway, engines, router, removed_after=3.0)
        assert 502 in statuses and 200 in statuses
    finally:
        gateway.shutdown()
        router.stop()
        engines[1].stop()


def test_the_outage_window_comes_from_slimes_fault_tolerance_args() -> None:
    assert outage_seconds(SimpleNamespace(use_fault_tolerance=False)) == 0.0
    args = SimpleNamespace(use_fault_tolerance=True, rollout_health_check_interval=30.0,
                           rollout_health_check_timeout=20.0)
    assert outage_seconds(args) == 30.0 + 20.0 + OUTAGE_SLACK_SECONDS


class _Scripted(ThreadedAiohttpServer):
    """An engine (or router) answering /generate with scripted statuses, then a valid answer."""

    def __init__(self, statuses: list[tuple[int, str]]) -> None:
        self.statuses = list(statuses)
        self.seen = 0
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        super().__init__(app, name="scripted-engine")

    async def _generate(self, request: web.Request) -> web.Response:
        self.seen += 1
        if self.statuses:
            status, text = self.statuses.pop(0)
            return web.Response(status=status, text=text)
        meta = {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1, 7, None]]}
        return web.json_response({"output_ids": [7], "meta_info": meta})


def _generate(url: str, **options: Any) -> EngineResult:
    async def call() -> EngineResult:
        client = EngineClient(url, backoff=0.01, **options)
        await client.open()
        try:
            return await client.generate([1, 2], {"max_new_tokens": 1})
        finally:
            await client.close()

    return asyncio.run(call())


def test_an_ordinary_failure_after_an_outage_gets_its_own_retries() -> None:
    """Five answers of a router whose worker died (500 "Request failed", 502), then one plain
    500: the outage's attempts do not use up the retries of other failures (before: the plain
    500 ended the call at once), and the call says how many attempts it took."""
    gone = [(500, "Request failed: connection refused")] * 3 + [(502, "bad gateway")] * 2
    with _Scripted([*gone, (500, "engine bug")]) as server:
        result = _generate(server.url, retries=3, outage_seconds=30.0)
    assert result.output_ids == [7] and result.attempts == 7
    with _Scripted([*gone, (500, "engine bug")]) as server:
        with pytest.raises(EngineError, match="after 4 attempts"):
            _generate(server.url, retries=3)  # no outage window: every failure counts (as before)
