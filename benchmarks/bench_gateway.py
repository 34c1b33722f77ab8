"""Benchmark the gateway: added latency per call, and cumulative prompt building per turn.

Usage:
    .venv/bin/python benchmarks/bench_gateway.py [--sessions 64] [--calls 10] [--turns 64]
        [--engine-delay 0.5] [--part all|latency|prompt]

Part ``latency``: a scripted SGLang server (tests/python/fakes/sglang_server.py, answering
with a constant short tool call after ``--engine-delay`` seconds, standing for generation
time) runs in its own process; a load process drives
``--sessions`` concurrent sessions, each making ``--calls`` sequential calls, first straight
to the engine's ``/generate`` and then through the gateway's chat completions (cumulative
mode, a growing tool conversation). Sessions start at random offsets within one engine delay
so they are not in lockstep. The gateway runs in this process. Reported: per-call p50/p99 of
both and the difference (what the gateway adds, as an agent sees it, including the extra
HTTP hop), the time inside the gateway (trace ``latency_ms``), and the gateway's CPU time per
call. Targets: +p50 <= 2 ms, +p99 <= 10 ms. On a 2-core machine the load generator, the
engine stand-in and the gateway share the cores, which inflates the difference.

Part ``prompt``: time to build the prompt ids of turn N (normalize the messages + bridge
or full render) in cumulative mode for a tool conversation growing to ``--turns`` turns,
with the toy Qwen2.5-like tokenizer (chat-template path). Target: turn 64 <= 3x turn 1.

Everything is on loopback; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "python")]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


# ----------------------------------------------------------------------------- engine process
def _engine_main(model_dir: str, delay: float, ready: Any, stop: Any) -> None:
    from fakes.sglang_server import Completion, FakeSGLang
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    stop_id = tok.convert_tokens_to_ids("<|im_end|>")
    ids = [*tok.encode(call, add_special_tokens=False), stop_id]
    # a constant reply: the engine stand-in spends no CPU on the prompt; ``delay`` stands for generation
    fake = FakeSGLang(
        lambda prompt_ids, params: Completion(ids, {"type": "stop", "matched": stop_id}),
        delay=delay,
    )
    ready.put(fake.start())
    stop.wait()
    fake.stop()


# ----------------------------------------------------------------------------- load process
async def _direct_session(
    url: str, calls: int, prompt_ids: list[int], out: list[float], stagger: float
) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        await asyncio.sleep(random.uniform(0, stagger))
        for _ in range(calls):
            body = {
                "input_ids": prompt_ids,
                "return_logprob": True,
                "sampling_params": {"max_new_tokens": 64},
            }
            start = time.perf_counter()
            async with http.post(f"{url}/generate", json=body) as resp:
                await resp.read()
            out.append(time.perf_counter() - start)


async def _gateway_session(base: str, calls: int, out: list[float], stagger: float) -> None:
    import aiohttp

    messages: list[dict[str, Any]] = [{"role": "user", "content": "Add some numbers for me."}]
    async with aiohttp.ClientSession() as http:
        await asyncio.sleep(random.uniform(0, stagger))
        for turn in range(calls):
            body = {"model": "m", "messages": messages, "tools": TOOLS}
            start = time.perf_counter()
            async with http.post(f"{base}/chat/completions", json=body) as resp:
                reply = await resp.json()
            out.append(time.perf_counter() - start)
            message = reply["choices"][0]["message"]
            call_id = message["tool_calls"][0]["id"]
            messages += [message, {"role": "tool", "tool_call_id": call_id, "content": str(turn)}]


def _load_main(
    mode: str, target: Any, calls: int, prompt_ids: list[int], stagger: float, result: Any
) -> None:
    latencies: list[float] = []

    async def run() -> None:
        if mode == "direct":
            url, sessions = target
            jobs = [_direct_session(url, calls, prompt_ids, latencies, stagger) for _ in range(sessions)]
        else:
            jobs = [_gateway_session(base, calls, latencies, stagger) for base in target]
        await asyncio.gather(*jobs)

    asyncio.run(run())
    result.put(latencies)


def _drive(mode: str, target: Any, calls: int, prompt_ids: list[int], stagger: float = 0.0) -> list[float]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_load_main, args=(mode, target, calls, prompt_ids, stagger, queue))
    proc.start()
    latencies = queue.get(timeout=600)
    proc.join(60)
    return latencies


def bench_latency(model_dir: str, sessions: int, calls: int, delay: float) -> dict[str, float]:
    from agentcore_slime.gateway import Gateway, GatewayConfig

    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    engine = ctx.Process(target=_engine_main, args=(model_dir, delay, ready, stop))
    engine.start()
    url = ready.get(timeout=120)
    gw = Gateway(GatewayConfig(model_dir, host="127.0.0.1", port=0, cumulative_token_mode=True))
    try:
        gw.start(url)
        bases = [gw.create_session(f"bench-{i}", {"max_new_tokens": 64}) for i in range(sessions)]
        _drive("gateway", bases[:1], 2, [])  # warm-up (imports, connections)
        gw.delete_session("bench-0")
        bases[0] = gw.create_session("bench-0", {"max_new_tokens": 64})
        cpu = time.process_time()  # this process runs only the gateway (engine and load are children)
        through = _drive("gateway", bases, calls, [], stagger=delay)
        cpu = time.process_time() - cpu
        # the direct baseline sends a prompt as long as a mid-conversation gateway prompt
        traces = gw.traces("bench-1")
        prompt_ids = traces[len(traces) // 2].prompt_token_ids
        direct = _drive("direct", (url, sessions), calls, prompt_ids, stagger=delay)
        recorded = [t for i in range(sessions) for t in gw.traces(f"bench-{i}")]
        modes = [t.token_mode for t in recorded]
        inside = [t.latency_ms for t in recorded]
    finally:
        gw.shutdown()
        stop.set()
        engine.join(30)
    report = {
        "calls": len(through),
        "gateway_cpu_ms_per_call": cpu / len(through) * 1e3,
        "bridged_fraction": modes.count("bridged") / max(1, len(modes)),
        "direct_p50_ms": percentile(direct, 50) * 1e3,
        "direct_p99_ms": percentile(direct, 99) * 1e3,
        "gateway_p50_ms": percentile(through, 50) * 1e3,
        "gateway_p99_ms": percentile(through, 99) * 1e3,
        "in_gateway_p50_ms": percentile(inside, 50),
        "in_gateway_p99_ms": percentile(inside, 99),
    }
    report["added_p50_ms"] = report["gateway_p50_ms"] - report["direct_p50_ms"]
    report["added_p99_ms"] = report["gateway_p99_ms"] - report["direct_p99_ms"]
    return report


# ----------------------------------------------------------------------------- prompt building
def bench_prompt(model_dir: str, turns: int, repeats: int = 30) -> dict[str, float]:
    from agentcore_slime.gateway.rendering import (
        ChainState,
        PromptBuilder,
        choose_renderer,
        load_tokenizer,
        normalize_messages,
        tools_key,
    )

    tok = load_tokenizer(model_dir)
    renderer, choice = choose_renderer(model_dir, tok, "auto", tool_call_parser="qwen", reasoning_parser=None)
    builder = PromptBuilder(renderer, tok, choice.family)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Add some numbers for me."}]
    chain = None
    per_turn: dict[int, float] = {}
    for turn in range(1, turns + 1):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            normalized = normalize_messages(messages)
            prompt = builder.build(normalized, TOOLS, chain, True)
            samples.append(time.perf_counter() - start)
        assert prompt.token_mode == ("rendered" if turn == 1 else "bridged"), prompt.chain_break
        per_turn[turn] = statistics.median(samples) * 1e3
        args = {"a": turn, "b": turn + 1}
        text = f"<tool_call>\n{json.dumps({'name': 'add', 'arguments': args})}\n</tool_call>"
        completion = [*tok.encode(text, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
        reply = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": "add", "arguments": json.dumps(args)},
                }
            ],
        }
        chain = ChainState(prompt.token_ids, completion, normalized, reply, tools_key(TOOLS))
        messages = [
            *messages,
            reply,
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": str(2 * turn + 1)},
        ]
    report = {f"turn_{t}_ms": per_turn[t] for t in sorted({1, 2, 8, 16, 32, turns}) if t in per_turn}
    report["prompt_tokens_last_turn"] = float(len(prompt.token_ids))
    report["ratio_last_over_first"] = per_turn[turns] / per_turn[1]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=10, help="sequential calls per session")
    parser.add_argument("--turns", type=int, default=64)
    parser.add_argument("--engine-delay", type=float, default=0.5, help="seconds the engine 'generates'")
    parser.add_argument("--part", choices=("all", "latency", "prompt"), default="all")
    args = parser.parse_args(argv)
    if args.sessions < 2 or args.calls < 2 or args.turns < 2:
        parser.error("--sessions, --calls and --turns must be >= 2")

    from fakes.toy_tokenizer import build_toy_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_toy_tokenizer(Path(tmp) / "toy"))
        results: dict[str, Any] = {}
        if args.part in ("all", "prompt"):
            results["prompt"] = bench_prompt(model_dir, args.turns)
        if args.part in ("all", "latency"):
            results["latency"] = bench_latency(model_dir, args.sessions, args.calls, args.engine_delay)
    for part, values in results.items():
        print(f"[{part}]")
        for key, value in values.items():
            print(f"  {key:28s} {value:10.3f}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
