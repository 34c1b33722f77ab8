"""Find the agents' result objects in S3.

Every rollout step uses one ``input_id``, so one paginated ``list_objects_v2`` of the
step's prefix per poll cycle finds every finished episode of the step (instead of one HEAD
per episode); each found object is then fetched once with GET, at most
:data:`~.wire.MAX_RESULT_BYTES` of it. Blocking calls run in the watcher's own pool, so
detecting results never waits behind invocations.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from agentcore_slime.episodes.transports import in_pool
from agentcore_slime.episodes.wire import MAX_RESULT_BYTES, parse_result

logger = logging.getLogger(__name__)

_FATAL_S3_CODES = {
    "NoSuchBucket",
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
}
#: threads of the result watcher's pool
RESULT_THREADS = 8


@dataclass
class _Prefix:
    waiters: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    fetching: set[str] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    lists: set[asyncio.Task[int]] = field(default_factory=set)
    last_pages: int = 1
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class ResultWatcher:
    """Finds result objects with one paginated LIST of their prefix per poll cycle.

    :param s3: a boto3 S3 client.
    :param bucket: the results bucket.
    :param executor: the bounded thread pool for blocking calls.
    :param poll_interval: seconds between LIST cycles of one prefix.
    :param max_list_rate: at most this many LIST requests per second per prefix (a
        prefix with many pages polls less often).
    :param page_size: keys per LIST page (None = S3's maximum, 1000).
    """

    def __init__(
        self,
        s3: Any,
        bucket: str,
        executor: Executor,
        poll_interval: float = 0.25,
        max_list_rate: float = 4.0,
        page_size: int | None = None,
    ) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.executor = executor
        self.poll_interval = poll_interval
        self.max_list_rate = max_list_rate
        self.page_size = page_size
        self.max_result_bytes = MAX_RESULT_BYTES
        self.list_requests = 0
        self.get_requests = 0
        self._prefixes: dict[str, _Prefix] = {}

    def watch(self, key: str) -> asyncio.Future[dict[str, Any]]:
        """A future resolved with the parsed JSON of ``key`` once it exists."""
        prefix_name = key.rsplit("/", 1)[0] + "/"
        prefix = self._prefixes.setdefault(prefix_name, _Prefix())
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        prefix.waiters[key] = future
        if prefix.task is None or prefix.task.done():
            prefix.task = asyncio.create_task(self._poll(prefix_name, prefix))
        return future

    def unwatch(self, key: str) -> None:
        """Stop waiting for ``key`` (after a timeout or an invoke failure)."""
        prefix = self._prefixes.get(key.rsplit("/", 1)[0] + "/")
        if prefix is not None:
            future = prefix.waiters.pop(key, None)
            if future is not None and not future.done():
                future.cancel()

    def _list_blocking(self, prefix: str, first: str, last: str) -> tuple[list[str], int]:
        """Keys under ``prefix`` from ``first`` to at least ``last`` (sorted), and the pages used.

        Keys below the smallest awaited key or above the largest cannot be awaited, so
        the listing starts just before ``first`` and stops paginating after ``last``.
        """
        keys: list[str] = []
        pages = 0
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "StartAfter": first[:-1]}
        if self.page_size:
            kwargs["MaxKeys"] = self.page_size
        while True:
            page = self.s3.list_objects_v2(**kwargs)
            pages += 1
            keys.extend(item["Key"] for item in page.get("Contents", ()))
            if not page.get("IsTruncated") or (keys and keys[-1] >= last):
                return keys, pages
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def _get_blocking(self, key: str) -> dict[str, Any]:
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read(self.max_result_bytes + 1)
        return parse_result(body, key, self.max_result_bytes)

    async def _fetch(self, key: str, prefix: _Prefix) -> None:
        self.get_requests += 1
        try:
            result = await in_pool(self.executor, self._get_blocking, key)
        except Exception as exc:
            outcome: BaseException | dict[str, Any] = exc
        else:
            outcome = result
        future = prefix.waiters.pop(key, None)
        prefix.fetching.discard(key)
        if future is not None and not future.done():
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _fail_all(self, prefix: _Prefix, exc: BaseException) -> None:
        for future in prefix.waiters.values():
            if not future.done():
                future.set_exception(exc)
        prefix.waiters.clear()

    async def _list(self, name: str, prefix: _Prefix, awaited: list[str]) -> tuple[list[str], int] | None:
        """One LIST cycle; None when listing can never work (the waiters have been failed)."""
        try:
            return await in_pool(self.executor, self._list_blocking, name, min(awaited), max(awaited))
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in _FATAL_S3_CODES:
                self._fail_all(prefix, RuntimeError(f"cannot list s3://{self.bucket}/{name}: {exc}"))
                return None
            logger.warning("listing s3://%s/%s failed, retrying: %s", self.bucket, name, exc)
            return [], 1

    async def _cycle(self, name: str, prefix: _Prefix, awaited: list[str]) -> int:
        """LIST once and start a GET for every awaited key found; returns the pages used."""
        listed = await self._list(name, prefix, awaited)
        if listed is None:
            return 0
        keys, pages = listed
        self.list_requests += pages
        prefix.last_pages = pages
        for key in keys:
            if key in prefix.waiters and key not in prefix.fetching:
                prefix.fetching.add(key)
                task = asyncio.create_task(self._fetch(key, prefix))
                prefix.tasks.add(task)
                task.add_done_callback(prefix.tasks.discard)
        return pages

    async def _poll(self, name: str, prefix: _Prefix) -> None:
        """Start a LIST every ``poll_interval`` (at most two in flight, at most ``max_list_rate``
        pages/s), so a slow LIST does not delay the next one by its whole duration."""
        while prefix.waiters:
            awaited = [key for key in prefix.waiters if key not in prefix.fetching]
            if awaited and len(prefix.lists) < 2:
                task = asyncio.create_task(self._cycle(name, prefix, awaited))
                prefix.lists.add(task)
                task.add_done_callback(prefix.lists.discard)
            await asyncio.sleep(max(self.poll_interval, prefix.last_pages / self.max_list_rate))
        if self._prefixes.get(name) is prefix and not prefix.waiters:
            del self._prefixes[name]
