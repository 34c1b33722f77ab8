#!/usr/bin/env python3
"""Benchmark: how fast finished episodes are noticed in S3, and at what request cost.

1,000 episodes of one rollout step are in flight; their agents write result objects
``{exp_id}/{input_id}/{session_id}.json`` at random times over a window (default 30 s)
to a local S3 server (moto in server mode on loopback, in its own process, reached by
boto3 through ``AWS_ENDPOINT_URL_S3``). The runner's :class:`~agentcore_slime.episodes.results.ResultWatcher`
waits for all of them exactly as a rollout step does: one paginated LIST of the step's
prefix per poll cycle, then one GET per found object, presigned by boto3, sent with aiohttp.

``--prefixes N`` spreads the episodes over N result prefixes (input ids), as an eval step over
N datasets did when each dataset had an input id of its own: the watcher's LIST budget
(``max_list_rate``) is one for all prefixes, so the polling rate stays the same.

Reported: detection latency (from the moment the result's PUT returned to the moment the
episode's future resolved with the parsed JSON) p50/p90/p99/max, and S3 requests per
second counted at the HTTP layer (botocore ``before-send`` events, so retries count),
LIST and GET separately (presigned requests go around botocore: the watcher counts them).
The target (p99 <= 1 s at <= 5 requests/s) counts the polling
requests (LIST): they are what grows with the number of in-flight episodes in a
HEAD-per-episode design (~N/30 HEAD/s at steady state upstream); GETs are exactly one
per finished episode in any design and follow the completion rate (here 1000/window).

Run: ``.venv/bin/python benchmarks/bench_result_detection.py [--episodes 1000] [--window 30] [--prefixes 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "python"
sys.path[:0] = [str(ROOT / "python"), str(TESTS), str(TESTS / "slime_standin")]

from agentcore_slime.episodes.results import ResultWatcher  # noqa: E402
from agentcore_slime.episodes.runner import boto_config  # noqa: E402
from fakes.s3 import LocalS3  # noqa: E402


def writer(local_s3: LocalS3, bucket: str, schedule: list[tuple[float, str]], done: dict[str, float]) -> None:
    """Write each result at its scheduled time; record when its PUT returned."""
    client = local_s3.client()
    start = time.monotonic()
    for at, key in schedule:
        delay = start + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        body = json.dumps({"rewards": 1.0, "status_code": 200, "result_key": key}).encode()
        client.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
        done[key] = time.monotonic()


async def watch_all(watcher: ResultWatcher, keys: list[str], detected: dict[str, float]) -> None:
    futures = []
    for key in keys:
        future = watcher.watch(key)
        future.add_done_callback(lambda f, k=key: detected.__setitem__(k, time.monotonic()))
        futures.append(future)
    await asyncio.gather(*futures)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--window", type=float, default=30.0, help="seconds over which results are written")
    parser.add_argument(
        "--poll-interval", type=float, default=0.25, help="the launcher's result_poll_interval"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prefixes", type=int, default=1, help="result prefixes (datasets) the episodes spread over"
    )
    options = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log

    with LocalS3(process=True) as local_s3:
        os.environ.update(local_s3.env())
        bucket = local_s3.create_bucket()
        import boto3
        from agentcore_slime.settings.config import load_config
        from fakes.standins import make_args

        config = load_config(make_args(agent_url="http://unused", s3_bucket=bucket, exp_id="bench"))
        s3 = boto3.session.Session().client("s3", config=boto_config(config))
        sent: Counter[str] = Counter()
        s3.meta.events.register(
            "before-send.s3.*", lambda event_name, **_: sent.update([event_name.split(".")[-1]])
        )

        rng = random.Random(options.seed)
        keys = [f"bench/step-1-{n % options.prefixes}/{uuid.uuid4()}.json" for n in range(options.episodes)]
        schedule = sorted((rng.uniform(0, options.window), key) for key in keys)
        written: dict[str, float] = {}
        detected: dict[str, float] = {}

        watcher = ResultWatcher(s3, bucket, poll_interval=options.poll_interval)  # as in production
        list_seconds: list[float] = []
        list_presigned = watcher._list_presigned

        async def timed_list(*args: Any) -> tuple[list[str], int]:
            begin = time.monotonic()
            try:
                return await list_presigned(*args)
            finally:
                list_seconds.append(time.monotonic() - begin)

        watcher._list_presigned = timed_list  # type: ignore[method-assign]
        thread = threading.Thread(target=writer, args=(local_s3, bucket, schedule, written), daemon=True)
        started = time.monotonic()

        async def run() -> None:
            thread.start()
            await watch_all(watcher, keys, detected)
            await watcher.close()

        asyncio.run(run())
        elapsed = time.monotonic() - started
        thread.join()

    latencies = [detected[k] - written[k] for k in keys]
    lists, gets = watcher.list_requests, watcher.get_requests
    print(
        f"episodes {options.episodes} over {options.prefixes} prefixes, "
        f"results written over {options.window:g} s, "
        f"poll interval {options.poll_interval:g} s, run {elapsed:.1f} s"
    )
    print(
        "detection latency after the PUT returned: "
        f"p50 {statistics.median(latencies):.3f} s, p90 {percentile(latencies, 0.9):.3f} s, "
        f"p99 {percentile(latencies, 0.99):.3f} s, max {max(latencies):.3f} s"
    )
    print(
        f"S3 requests: LIST {lists} ({lists / elapsed:.2f}/s), GET {gets} ({gets / elapsed:.2f}/s), "
        f"other {sum(sent.values()) - sent['ListObjectsV2'] - sent['GetObject']}"
    )
    print(
        f"LIST call duration: median {statistics.median(list_seconds):.3f} s, max {max(list_seconds):.3f} s"
    )
    print(f"watcher counters: list_requests {watcher.list_requests}, get_requests {watcher.get_requests}")
    ok = percentile(latencies, 0.99) <= 1.0 and lists / elapsed <= 5.0
    print(f"target p99 <= 1 s at <= 5 polling (LIST) requests/s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
