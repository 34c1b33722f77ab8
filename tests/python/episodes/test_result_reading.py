"""Reading the agents' result objects (issue 29) and polling several prefixes (issue 28).

Real boto3 against moto's S3 server, through :class:`fakes.s3.S3Proxy` where S3's latency or
faults matter; the watcher is the production :class:`ResultWatcher`, on the path production takes (presigned
requests).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import boto3
import pytest
from agentcore_slime.episodes.results import ResultWatcher
from agentcore_slime.episodes.runner import s3_client
from botocore.config import Config
from fakes.s3 import LocalS3, S3Proxy


def _put(local_s3: LocalS3, bucket: str, keys: list[str]) -> None:
    client = local_s3.client()
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=json.dumps({"rewards": 1.0, "key": key}).encode())


def _watch(url: str, bucket: str, keys: list[str], **settings: Any) -> tuple[list[Any], ResultWatcher, float]:
    """Watch ``keys`` until every one resolves; their results (or errors), the watcher, seconds."""
    s3 = s3_client(boto3.session.Session(), bucket, Config(), endpoint_url=url)  # the rollout's client

    async def main() -> tuple[list[Any], ResultWatcher, float]:
        watcher = ResultWatcher(s3, bucket, poll_interval=0.05, **settings)
        started = time.monotonic()
        try:
            out = await asyncio.gather(*(watcher.watch(k) for k in keys), return_exceptions=True)
            return list(out), watcher, time.monotonic() - started
        finally:
            await watcher.close()

    return asyncio.run(main())


def test_a_burst_of_results_is_not_read_through_a_few_threads(local_s3: LocalS3, s3_bucket: str) -> None:
    """120 results already written: their GETs are sent at once, not through a pool of 8
    threads (each S3 GET's latency would then add up: 120 / 8 x 0.25 s = 3.75 s). Shown by events,
    not by a stopwatch a busy machine decides: the proxy holds every GET until 9 are in flight,
    more than 8 threads could ever have out (a client that had fewer waits GATHER_CEILING_S)."""
    keys = [f"exp/step-1/{uuid.uuid4()}.json" for _ in range(120)]
    _put(local_s3, s3_bucket, keys)
    with S3Proxy(local_s3.url) as proxy:
        proxy.gather_gets = 9
        results, watcher, _ = _watch(proxy.url, s3_bucket, keys)
    assert [r["key"] for r in results] == keys
    assert watcher.get_requests == 120 and sum(proxy.gets.values()) == 120
    assert proxy.most_in_flight >= 9, f"at most {proxy.most_in_flight} GETs at once: they were serialized"


def test_throttled_gets_are_retried_and_refused_ones_are_not(local_s3: LocalS3, s3_bucket: str) -> None:
    slow, denied = "exp/step-1/slow.json", "exp/step-1/denied.json"
    _put(local_s3, s3_bucket, [slow, denied])
    with S3Proxy(local_s3.url) as proxy:
        proxy.faults = {slow: [503, 500], denied: [403]}
        [ok, refused], _, _ = _watch(proxy.url, s3_bucket, [slow, denied])
    assert ok["key"] == slow and proxy.gets[slow] == 3  # two faults, then the object
    assert isinstance(refused, RuntimeError) and "AccessDenied" in str(refused)
    assert proxy.gets[denied] == 1


def test_several_prefixes_share_one_list_budget(local_s3: LocalS3, s3_bucket: str) -> None:
    """Three prefixes (an eval step over three datasets, each with an input id of its own) poll
    at most ``max_list_rate`` LISTs/s together, not three times that."""
    keys = [f"exp/eval-1-{n % 3}/{uuid.uuid4()}.json" for n in range(30)]
    s3 = boto3.client("s3", endpoint_url=local_s3.url)

    async def main() -> tuple[ResultWatcher, float, list[Any]]:
        watcher = ResultWatcher(s3, s3_bucket, poll_interval=0.05, max_list_rate=4.0)
        futures = [watcher.watch(k) for k in keys]
        started = time.monotonic()
        await asyncio.sleep(2.0)  # nothing written yet: only polling
        lists, seconds = watcher.list_requests, time.monotonic() - started
        await asyncio.to_thread(_put, local_s3, s3_bucket, keys)
        results = await asyncio.wait_for(asyncio.gather(*futures), 10)
        await watcher.close()
        return watcher, lists / seconds, results

    watcher, rate, results = asyncio.run(main())
    assert rate <= 4.0 + 1.5, f"{rate:.1f} LIST/s over three prefixes"  # 3 x 4 = 12 before
    assert [r["key"] for r in results] == keys


@pytest.fixture
def local_s3() -> Any:
    with LocalS3() as server:
        yield server


def test_the_watchers_links_are_signature_v4_in_the_buckets_region(
    local_s3: LocalS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore presigns S3 links with Signature Version 2 by default, which S3 refuses for
    buckets made since June 2020: the rollout's client signs version 4, for the bucket's region
    (asked of S3 once), whatever region the session has."""
    other = LocalS3(region="eu-west-1")
    other.url = local_s3.url  # the same server, a bucket in another region
    bucket = other.create_bucket()
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    client = s3_client(boto3.session.Session(), bucket, Config(), endpoint_url=local_s3.url)
    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k.json"})
    assert client.meta.region_name == "eu-west-1"
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "%2Feu-west-1%2Fs3%2Faws4_request" in url
    assert "Signature=" not in url.replace("X-Amz-Signature=", "")


@pytest.mark.timeout(30)  # a key read under another name is never found: the watch would wait on
def test_keys_listed_url_encoded_are_read_as_written(local_s3: LocalS3, s3_bucket: str) -> None:
    """The LIST asks for URL-encoded keys (botocore's encoding-type=url): a key with a space and
    a plus sign is found under the name it was written with."""
    keys = ["exp/step 1/a b+c.json", "exp/step 1/plain.json"]
    _put(local_s3, s3_bucket, keys)
    results, _, _ = _watch(local_s3.url, s3_bucket, keys)
    assert [r["key"] for r in results] == keys
