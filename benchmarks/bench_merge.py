#!/usr/bin/env python3
"""Benchmark: trace-merging throughput on long episodes and its scaling with turns.

Builds synthetic multi-turn episodes (every call's prompt = previous prompt + completion
+ bridge tokens, fresh int objects per call as if each came off the wire) and times
``agentcore_slime.rollout.traces.merge_traces`` on them:

- 64 turns, ~32k tokens (the issue's "long episode"), and 128 turns at the same tokens
  per turn (~64k tokens). Linear merging means the 128-turn time is about 2x the 64-turn
  time; the target is at most 2.2x.
- once with calls marked ``bridged`` (cumulative token mode: only new tokens compared) and
  once ``rendered`` (each prompt re-rendered by the gateway: the whole running sequence is
  compared, one C-level list compare per call, which is quadratic in turns).

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
        traces.append(
            CallTrace(
                prompt, completion, [-0.5] * completion_len, "stop", token_mode=mode if turn else "rendered"
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
    print(f"{'mode':9} {'turns':>5} {'tokens':>7} {'best ms':>8} {'median ms':>10} {'Mtok/s':>7}")
    failed = False
    for mode in ("bridged", "rendered"):
        cases = {turns: episode(turns, options.tokens_per_turn, mode) for turns in (64, 128)}
        times = timings(cases, options.repeat)
        for turns, traces in cases.items():
            tokens = len(traces[-1].prompt_token_ids) + len(traces[-1].completion_token_ids)
            best, median = min(times[turns]), statistics.median(times[turns])
            rate = tokens / best / 1e6
            print(f"{mode:9} {turns:5d} {tokens:7d} {best * 1e3:8.2f} {median * 1e3:10.2f} {rate:7.1f}")
        ratio = min(times[128]) / min(times[64])
        verdict = "ok" if ratio <= 2.2 else "ABOVE 2.2x"
        print(f"{mode:9} 128/64 turns time ratio: {ratio:.2f} (target <= 2.2: {verdict})")
        failed |= mode == "bridged" and ratio > 2.2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
