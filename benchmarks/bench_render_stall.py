"""Reproduce the render stall of issue 23 (finding 5): huge prompts must not stall other sessions.

Usage:
    .venv/bin/python benchmarks/bench_render_stall.py [--big 12] [--big-mb 2.7]
        [--context 262144] [--tries 5]

Three processes, as in training: the scripted SGLang engine (tests/python/fakes/
sglang_server.py, answering at once), the gateway in its own child process
(``GatewayProcess``, started as the rollout starts it) with the toy Qwen2.5-like tokenizer
(its chat-template render path: the one real Qwen-family checkpoints take), and this client.
``--big`` sessions each send one first call of ``--big-mb`` MB of text at the same time; once
they are all sent, other sessions send a 2-character first call, one after the other
(``--tries`` of them): the time each takes is the figure. Issue 23 measured 16.8 s for it
(target: under 50 ms). The big calls are sent by a process of their own (as agents are), so
the timing client shares no GIL with them. The big calls' outcomes are counted too (with the default context
every one is refused: 400 ``context_length_exceeded``).

One JSON line per figure: ``{"figure": ..., "value": ..., "unit": ...}``.
Everything is on loopback; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "python")]

WORDS = ["alpha", "beta", "gamma", "delta", "système", "tool", "result", "value", "x1", "42"]


def emit(figure: str, value: Any, unit: str = "") -> None:
    print(json.dumps({"figure": figure, "value": value, "unit": unit}), flush=True)


def big_text(megabytes: float, seed: int) -> str:
    """About ``megabytes`` MB of varied words (no two sessions' texts are equal)."""
    words = [WORDS[(i * 7 + seed) % len(WORDS)] + str(i % 97) for i in range(4096)]
    chunk = " ".join(words) + "\n"
    return chunk * max(1, int(megabytes * 1e6 / len(chunk)))


def stall(model_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start engine + gateway process, send the big calls, time the small first calls."""
    import httpx
    from agentcore_slime.gateway import GatewayConfig, GatewayProcess
    from fakes.sglang_server import FakeSGLang, text_policy
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with FakeSGLang(
        text_policy(tokenizer, lambda _: "ok"), tokenizer=tokenizer, context_length=args.context
    ) as engine:
        gateway = GatewayProcess(GatewayConfig(model_dir, host="127.0.0.1", port=0), ready_timeout=120)
        gateway.start(engine.url)
        try:
            return _measure(gateway, httpx, args)
        finally:
            gateway.shutdown()


def _send_big(bases: list[str], megabytes: float, verbose: bool, started: Any, out: Any) -> None:
    """In a process of its own (the agents' side: its GIL is not the measuring client's): one
    huge first call per session, all at once; their outcomes go to ``out``."""
    import httpx

    outcomes: Counter[str] = Counter()
    bodies = [
        json.dumps({"model": "m", "messages": [{"role": "user", "content": big_text(megabytes, i)}]}).encode()
        for i in range(len(bases))
    ]

    def send(i: int) -> None:
        begun = time.perf_counter()
        try:
            reply = httpx.post(
                f"{bases[i]}/chat/completions", content=bodies[i], timeout=600, trust_env=False
            )
            code = str(reply.status_code)
            if reply.status_code >= 400:
                code += " " + str(reply.json()["error"].get("code"))
        except httpx.HTTPError as err:
            code = type(err).__name__
        outcomes[f"{code} ({time.perf_counter() - begun:.1f} s)" if verbose else code] += 1

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bases))]
    for thread in threads:
        thread.start()
    started.set()
    for thread in threads:
        thread.join()
    out.put(dict(outcomes))


def _measure(gateway: Any, httpx: Any, args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    started, out = context.Event(), context.Queue()
    bases = [gateway.create_session(f"big-{i}") for i in range(args.big)]
    sender = context.Process(target=_send_big, args=(bases, args.big_mb, args.verbose, started, out))
    sender.start()
    if not started.wait(120):
        raise RuntimeError("the sender process did not start")
    time.sleep(args.settle)  # the big bodies are on their way / being parsed and rendered
    small_ms = []
    with httpx.Client(timeout=600, trust_env=False) as client:  # made before: its set-up is not timed
        for n in range(args.tries):
            base = gateway.create_session(f"small-{n}")
            started = time.perf_counter()
            reply = client.post(
                f"{base}/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            small_ms.append((time.perf_counter() - started) * 1000)
            assert reply.status_code == 200, reply.text
            time.sleep(args.pause)
    busy = sender.is_alive()
    outcomes = out.get(timeout=900)
    sender.join()
    return {"small_ms": small_ms, "big_in_flight_after": busy, "big_outcomes": outcomes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=12, help="concurrent huge first calls")
    parser.add_argument("--big-mb", type=float, default=2.7, help="MB of text in each huge call")
    parser.add_argument("--context", type=int, default=32768, help="the engine's context length (tokens)")
    parser.add_argument("--tries", type=int, default=5, help="small first calls timed")
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds between the big calls and the first small one"
    )
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between two small calls")
    parser.add_argument("--verbose", action="store_true", help="each big call's outcome with its time")
    args = parser.parse_args(argv)
    if args.big < 1 or args.tries < 1 or args.big_mb <= 0:
        parser.error("--big and --tries must be >= 1, --big-mb > 0")
    from fakes.toy_tokenizer import build_toy_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        result = stall(str(build_toy_tokenizer(Path(tmp) / "toy")), args)
    emit("small_first_call_ms", [round(v, 1) for v in result["small_ms"]], "ms")
    emit("small_first_call_median_ms", round(statistics.median(result["small_ms"]), 1), "ms")
    emit("small_first_call_max_ms", round(max(result["small_ms"]), 1), "ms")
    emit("big_calls_still_in_flight_after_the_small_ones", result["big_in_flight_after"])
    emit("big_call_outcomes", result["big_outcomes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
