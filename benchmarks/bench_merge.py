#!/usr/bin/env python3
"""Benchmark: trace-merging throughput on long episodes and its scaling with turns.

Builds synthetic multi-turn episodes (every call's prompt = previous prompt + completion
+ bridge tokens, fresh int objects per call as if each came off the wire) and times
``agentcore_slime.rollout.traces.merge_traces`` on them:

- 64, 128 and 256 turns at the same tokens per turn (~32k, ~64k, ~128k tokens). Linear
  merging means each doubling of turns about doubles the time; the target is at most 2.2x.
- three kinds of traces: ``bridged`` (the default, cumulative token mode: the gateway extended
  the previous call, its verdict ``extended``), ``rerendered`` (CUMULATIVE_TOKEN_MODE=false, or
  a call the bridge declined: rendered in full, the gateway's verdict ``rerendered`` says it
  matched) and ``unverified`` (rendered traces without a verdict, as recorded before there was
  one: the whole running sequence compared per call, quadratic in turns; no target).

Run: ``.venv/bin/python benchmarks/bench_merge.py [--repeat 40]`` from the repo root.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from agentcore_slime.gateway.trace import CallTrace  # noqa: E402
from agentcore_slime.rollout.traces import merge_traces  # noqa: E402


def episode(turns: int, tokens_per_turn: int, mode: str, seed: int = 0) -> list[CallTrace]:
    """``turns`` calls; each adds ``tokens_per_turn`` tokens (40% bridge, 60% completion)."""
    rng = random.Random(seed)
    bridge_len = tokens_per_turn * 2 // 5
    completion_len = tokens_per_turn - bridge_len
    seq: list[int] = []
    traces = []
    for turn in range(turns):
        seq = seq + [rng.randrange(1000, 150_000) for _ in range(bridge_len + (200 if turn == 0 else 0))]
        completion = [rng.randrange(1000, 150_000) for _ in range(completion_len)]
        prompt = json.loads(json.dumps(seq))  # fresh int objects, as parsed from the wire
        token_mode = "bridged" if mode == "bridged" else "rendered"
        joined = {"bridged": "extended", "rerendered": "rerendered"}.get(mode, "")
        traces.append(
            CallTrace(
                prompt,
                completion,
                [-0.5] * completion_len,
                "stop",
                token_mode=token_mode if turn else "rendered",  # type: ignore[arg-type]
                joined=(joined if turn else "start") if joined else "",  # type: ignore[arg-type]
            )
        )
        seq = seq + completion
    return traces


def timings(cases: dict[int, list[CallTrace]], repeat: int) -> dict[int, list[float]]:
    """Time every case ``repeat`` times, interleaved, so load changes on a shared machine hit all cases."""
    times: dict[int, list[float]] = {turns: [] for turns in cases}
    for _ in range(repeat):
        for turns, traces in cases.items():
            started = time.perf_counter()
            segments = merge_traces(traces)
            times[turns].append(time.perf_counter() - started)
            assert len(segments) == 1 and len(segments[0].calls) == turns
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeat", type=int, default=40, help="timed repetitions per case (best is reported)"
    )
    parser.add_argument(
        "--tokens-per-turn", type=int, default=500, help="tokens each turn adds (default 500)"
    )
    options = parser.parse_args()
    print(f"{'mode':10} {'turns':>5} {'tokens':>7} {'best ms':>8} {'median ms':>10} {'Mtok/s':>7}")
    failed = False
    for mode in ("bridged", "rerendered", "unverified"):
        cases = {turns: episode(turns, options.tokens_per_turn, mode) for turns in (64, 128, 256)}
        times = timings(cases, options.repeat)
        for turns, traces in cases.items():
            tokens = len(traces[-1].prompt_token_ids) + len(traces[-1].completion_token_ids)
            best, median = min(times[turns]), statistics.median(times[turns])
            rate = tokens / best / 1e6
            print(f"{mode:10} {turns:5d} {tokens:7d} {best * 1e3:8.2f} {median * 1e3:10.2f} {rate:7.1f}")
        for low, high in ((64, 128), (128, 256)):
            ratio = min(times[high]) / min(times[low])
            target = mode != "unverified"
            verdict = ("ok" if ratio <= 2.2 else "ABOVE 2.2x") if target else "no target"
            print(f"{mode:10} {high}/{low} turns time ratio: {ratio:.2f} ({verdict})")
            failed |= target and ratio > 2.2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
