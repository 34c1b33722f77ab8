#!/usr/bin/env python3
"""Benchmark: what rollout routing replay costs, for a Qwen3-30B-A3B-shaped model (48 layers,
top-8 of 128 experts: 48 x 8 int32 = 1,536 bytes per token).

One multi-turn episode through the real gateway (in this process, cumulative token mode) in
front of the scripted engine (tests/python/fakes/sglang_server.py: routed experts as SGLang
0.5.13 / 0.5.15.post1 encode them, base64 of int32), three ways:

- ``start``: the gateway's way, each call asks from what its session already holds
  (``routed_experts_start_len``);
- ``from-0``: every call asks for its whole sequence (what a router that drops the start, or a
  client that never sets it, gets): bytes grow with the square of the turns;
- ``off``: no routing replay (the baseline of the call's wall time).

Per 1k tokens of episode it prints the bytes on the wire (the engine's base64 answers), the
bytes the gateway holds for the session, the trace bytes the rollout reads (trace_wire), the
sample's array, and the rollout's assembly time (the best of 5); per call the bytes against
the tokens the call added.

Run: ``.venv/bin/python benchmarks/bench_routing_replay.py [--turns 16 --first 2000 --turn 300]``
from the repo root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "python"
sys.path[:0] = [str(ROOT / "python"), str(TESTS), str(TESTS / "slime_standin")]

import httpx  # noqa: E402
from agentcore_slime.gateway import Gateway, GatewayConfig, trace_wire  # noqa: E402
from agentcore_slime.rollout.routing import RoutingLayout, attach_routing  # noqa: E402
from agentcore_slime.rollout.traces import merge_traces_to_samples  # noqa: E402
from fakes.sglang_server import FakeSGLang, MoeShape, text_policy  # noqa: E402
from fakes.toy_tokenizer import build_toy_tokenizer  # noqa: E402
from slime.utils.types import Sample  # noqa: E402  (the tests' stand-in: slime needs torch)

SHAPE = MoeShape(layers=48, topk=8, experts=128)
ROW = 4 * SHAPE.layers * SHAPE.topk


class MeasuredEngine(FakeSGLang):
    """The scripted engine, counting the routed-experts characters it sends; ``from_zero``
    ignores the start (as behind a router that drops it)."""

    from_zero = False
    wire: list[int]

    def _complete(self, body: dict[str, Any], rid: str, *, aborted: bool) -> dict[str, Any]:
        if self.from_zero:
            body = {**body, "routed_experts_start_len": 0}
        answer = super()._complete(body, rid, aborted=aborted)
        self.wire.append(len(answer["meta_info"].get("routed_experts", "")))
        return answer


def run(mode: str, model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    policy = text_policy(tokenizer, lambda prompt: "answer " * args.reply)
    engine = MeasuredEngine(policy, routed_experts=SHAPE, keep_requests=False)
    engine.wire, engine.from_zero = [], mode == "from-0"
    routed = {"routed_experts_layers": SHAPE.layers, "routed_experts_topk": SHAPE.topk}
    if mode == "off":
        routed = {}
    with engine:
        gateway = Gateway(GatewayConfig(str(model_dir), host="127.0.0.1", port=0, **routed))
        gateway.start(engine.url)
        engine.wire.clear()  # the start's check of the engine (one token) is no call of the episode
        try:
            base = gateway.create_session("bench", {"max_new_tokens": 4 * args.reply + 8})
            messages = [{"role": "user", "content": "word " * args.first}]
            seconds = []
            with httpx.Client(timeout=120) as client:
                for turn in range(args.turns):
                    started = time.perf_counter()
                    resp = client.post(f"{base}/chat/completions", json={"model": "m", "messages": messages})
                    seconds.append(time.perf_counter() - started)
                    resp.raise_for_status()
                    content = resp.json()["choices"][0]["message"]["content"]
                    messages += [
                        {"role": "assistant", "content": content},
                        {"role": "user", "content": f"result {turn} " + "word " * args.turn},
                    ]
            session = gateway.sessions.get("bench")
            assert session is not None
            stored = session.store.snapshot()
            held_routed = sum(len(c.routed or b"") for c in stored)
            wire_trace = len(trace_wire.encode(stored))
            traces = gateway.traces("bench")
        finally:
            gateway.shutdown()
    tokens = len(traces[-1].prompt_token_ids) + len(traces[-1].completion_token_ids)
    added = [len(t.prompt_token_ids) + len(t.completion_token_ids) - 1 - (t.routed_experts_start or 0)
             for t in traces]  # fmt: skip
    out: dict[str, Any] = {
        "mode": mode,
        "tokens": tokens,
        "call_ms_median": 1000 * statistics.median(seconds),
        "wire_bytes": sum(engine.wire),
        "per_call": list(zip(added, engine.wire, strict=True)),
        "held_routed_bytes": held_routed,
        "trace_wire_bytes": wire_trace,
    }
    if mode != "off":
        template = Sample(index=0, group_index=0, prompt="p", metadata={})
        samples = merge_traces_to_samples(traces, template, session_id="bench", reward=1.0, rollout_id=0)
        layout = RoutingLayout(SHAPE.layers, SHAPE.topk, SHAPE.experts)
        times = []
        for _ in range(5):  # the best of 5: the machine's other work only adds
            started = time.perf_counter()
            assert attach_routing(traces, samples, layout) is None
            times.append(time.perf_counter() - started)
        out["assembly_ms"] = 1000 * min(times)
        out["sample_bytes"] = sum(s.rollout_routed_experts.nbytes for s in samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--first", type=int, default=2000, help="words of the first user message")
    parser.add_argument("--turn", type=int, default=300, help="words of each later user message")
    parser.add_argument("--reply", type=int, default=200, help="words of each reply")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_toy_tokenizer(Path(tmp))
        results = [run(mode, model_dir, args) for mode in ("start", "from-0", "off")]
    print(f"Qwen3-30B-A3B shape: {SHAPE.layers} layers x top-{SHAPE.topk} = {ROW:,} bytes per token")
    for r in results:
        k = r["tokens"] / 1000
        line = f"{r['mode']:>7}: {r['tokens']:,} tokens, {args.turns} calls"
        line += f", call median {r['call_ms_median']:.1f} ms"
        if r["mode"] != "off":
            line += (
                f"; per 1k tokens: wire {r['wire_bytes'] / k / 1e6:.2f} MB, gateway holds "
                f"{r['held_routed_bytes'] / k / 1e6:.2f} MB, trace to the rollout "
                f"{r['trace_wire_bytes'] / k / 1e6:.2f} MB, samples {r['sample_bytes'] / k / 1e6:.2f} MB, "
                f"assembly {r['assembly_ms'] / k:.2f} ms"
            )
        print(line)
    start, zero = results[0], results[1]
    print("per call (tokens added -> base64 bytes), start vs from-0:")
    for (added, wire), (_, wire0) in zip(start["per_call"], zero["per_call"], strict=True):
        rate = wire / max(added, 1)
        print(f"  {added:6,} rows -> {wire:11,} B ({rate:,.0f} B/row)   from-0: {wire0:12,} B")


if __name__ == "__main__":
    main()
