"""Several engines without a router (bin/eval's layout, docs/eval.md "Several engines"): the
gateway's engine client spreads sessions over the engines itself, keeps each session on one,
and sends a dead engine's sessions to the next. Real gateway over loopback HTTP, two scripted
SGLang stand-ins (fakes.sglang_server), the toy tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.gateway.engine import ROUTING_HEADER, routing_key
from fakes.sglang_server import FakeSGLang, text_policy


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
