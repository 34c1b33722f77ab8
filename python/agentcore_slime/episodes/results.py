"""Find the agents' result objects in S3.

Every rollout step uses one ``input_id``, so one paginated ``list_objects_v2`` of the
step's prefix per poll cycle finds every finished episode of the step (instead of one HEAD
per episode); each found object is then fetched once with GET, at most
:data:`~.wire.MAX_RESULT_BYTES` of it.

One read path, for S3 and for the S3 server the tests and benchmarks run (moto): every
request is a URL presigned by the boto3 client (its credentials, endpoint and region; no
request is sent to sign) fetched with aiohttp, up to :data:`MAX_GETS` at once, with the
retries botocore would make (connection errors, 5xx, throttling), on an event loop in a
thread of the watcher's own (``agentcore-s3-get``: reading results costs the rollout's loop
nothing but the hand-over). A thousand episodes ending together are a thousand GETs of 20-50 ms
each (S3's latency): concurrent, not seconds in a few threads' turn. LISTs go the same way,
their XML scanned for keys (botocore's parser is the costly part of a LIST of a thousand keys).
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import re
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentcore_slime.episodes.wire import MAX_RESULT_BYTES, parse_result

logger = logging.getLogger(__name__)
T = TypeVar("T")

_FATAL_S3_CODES = {
    "NoSuchBucket",
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
}
#: result GETs in flight at once (each mostly waits on S3's latency)
MAX_GETS = 256
_GET_ATTEMPTS = 5
_GET_BACKOFF = 0.1  # seconds before the second attempt, doubled after each
_PRESIGN_SECONDS = 900
_S3_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")
_S3_KEY = re.compile(rb"<Key>([^<]*)</Key>")
_S3_TOKEN = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")


class S3Error(RuntimeError):
    """S3 refused a presigned request; ``response`` has its code where botocore's errors have it."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.response = {"Error": {"Code": code}}


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

    :param s3: a boto3 S3 client (it presigns the requests; it sends none itself).
    :param bucket: the results bucket.
    :param poll_interval: seconds between LIST cycles of one prefix.
    :param max_list_rate: at most this many LIST requests per second, all prefixes together
        (a prefix with many pages, or several prefixes at once, poll less often).
    :param page_size: keys per LIST page (None = S3's maximum, 1000).
    """

    def __init__(
        self,
        s3: Any,
        bucket: str,
        poll_interval: float = 0.25,
        max_list_rate: float = 4.0,
        page_size: int | None = None,
    ) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.poll_interval = poll_interval
        self.max_list_rate = max_list_rate
        self.page_size = page_size
        self.max_result_bytes = MAX_RESULT_BYTES
        self.list_requests = 0
        self.get_requests = 0
        self.max_gets = MAX_GETS
        self._prefixes: dict[str, _Prefix] = {}
        self._http: Any = None  # aiohttp session for presigned GETs, made on the GET loop
        self._gets: asyncio.Semaphore | None = None
        self._get_loop: asyncio.AbstractEventLoop | None = None
        self._get_thread: threading.Thread | None = None
        self._get_lock = threading.Lock()
        self._proxies: dict[tuple[str, str], str | None] = {}

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

    def _loop_for_gets(self) -> asyncio.AbstractEventLoop:
        """The GETs' event loop, in its own daemon thread (started at the first GET)."""
        with self._get_lock:
            if self._get_loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agentcore-s3-get", daemon=True)
                thread.start()
                self._get_loop, self._get_thread = loop, thread
            return self._get_loop

    async def _on_get_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the GETs' loop and await its result from the caller's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop_for_gets()))

    async def _session(self) -> Any:
        import aiohttp

        if self._http is None or self._http.closed:
            bundle = os.environ.get("AWS_CA_BUNDLE") or None
            context = ssl.create_default_context(cafile=bundle)
            connector = aiohttp.TCPConnector(limit=self.max_gets, ssl=context)
            timeout = aiohttp.ClientTimeout(total=60, connect=10)
            # the environment's proxy is looked up once per host (_proxy_for), not per request
            self._http = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)
            self._gets = asyncio.Semaphore(self.max_gets)
        return self._http

    def _proxy_for(self, url: str) -> str | None:
        """The proxy the environment sets for ``url``'s host (HTTPS_PROXY, NO_PROXY...), as boto3
        would use it; looked up once per scheme and host."""
        parts = urllib.parse.urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._proxies:
            proxy = urllib.request.getproxies().get(parts.scheme)
            self._proxies[key] = None if not proxy or urllib.request.proxy_bypass(key[1]) else proxy
        return self._proxies[key]

    async def _send(self, url: str, limit: int, what: str) -> bytes:
        """GET a presigned URL (at most ``limit`` bytes of its body, -1: all), retrying what
        botocore retries (connection errors, 5xx, 429).

        :raises S3Error: S3 refused (its error code in the message and in ``response``).
        """
        import aiohttp

        http = await self._session()
        assert self._gets is not None
        delay = _GET_BACKOFF
        for attempt in range(1, _GET_ATTEMPTS + 1):
            try:
                async with self._gets, http.get(url, proxy=self._proxy_for(url)) as response:
                    body = await response.content.read(limit)
                    if response.status == 200:
                        return bytes(body)
                    retry = response.status >= 500 or response.status == 429
                    found = _S3_CODE.search(body)
                    code = found.group(1).decode(errors="replace") if found else f"HTTP {response.status}"
                    error: Exception = S3Error(f"{what}: {code}", code)
            except (aiohttp.ClientError, TimeoutError) as exc:
                retry, error = True, exc
            if not retry or attempt == _GET_ATTEMPTS:
                raise error
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    async def _get_presigned(self, key: str) -> dict[str, Any]:
        """GET ``key`` through a presigned URL."""
        url = self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=_PRESIGN_SECONDS
        )
        body = await self._send(url, self.max_result_bytes + 1, f"GET s3://{self.bucket}/{key}")
        return parse_result(body, key, self.max_result_bytes)

    async def _list_presigned(self, prefix: str, first: str, last: str) -> tuple[list[str], int]:
        """Keys under ``prefix`` from ``first`` to at least ``last`` (sorted), and the pages used.

        Keys below the smallest awaited key or above the largest cannot be awaited, so the
        listing starts just before ``first`` and stops paginating after ``last``. The listing's
        XML is scanned for its keys, not parsed into objects (botocore's parser costs ~80 us of
        CPU per key, and a step of a thousand results lists a thousand keys a cycle at its end)."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "StartAfter": first[:-1]}
        if self.page_size:
            params["MaxKeys"] = self.page_size
        keys: list[str] = []
        pages = 0
        while True:
            url = self.s3.generate_presigned_url("list_objects_v2", Params=params, ExpiresIn=_PRESIGN_SECONDS)
            body = await self._send(url, -1, f"LIST s3://{self.bucket}/{prefix}")
            pages += 1
            # botocore asks for URL-encoded keys (encoding-type=url); a listing that says so has them
            encoded = b"<EncodingType>url</EncodingType>" in body
            for found in _S3_KEY.findall(body):
                key = html.unescape(found.decode())
                keys.append(urllib.parse.unquote_plus(key) if encoded else key)
            token = _S3_TOKEN.search(body)
            if b"<IsTruncated>true</IsTruncated>" not in body or token is None or (keys and keys[-1] >= last):
                return keys, pages
            params["ContinuationToken"] = html.unescape(token.group(1).decode())

    async def _close_http(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def close(self) -> None:
        """Close the GETs' HTTP session and stop their loop (the runner's close calls it)."""
        with self._get_lock:
            loop, thread = self._get_loop, self._get_thread
            self._get_loop = self._get_thread = None
        if loop is None or thread is None:
            return
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close_http(), loop))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, 10)
            if not thread.is_alive():
                loop.close()

    async def _fetch(self, key: str, prefix: _Prefix) -> None:
        self.get_requests += 1
        try:
            result = await self._on_get_loop(self._get_presigned(key))
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
            return await self._on_get_loop(self._list_presigned(name, min(awaited), max(awaited)))
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

    def _interval(self) -> float:
        """Seconds between two LIST cycles of a prefix: ``poll_interval``, or longer when the
        pages of every prefix being watched would exceed ``max_list_rate`` (one budget for the
        whole watcher: an eval step over several datasets, or steps that overlap, poll no more
        than one)."""
        pages = sum(p.last_pages for p in self._prefixes.values() if p.waiters)
        return max(self.poll_interval, pages / self.max_list_rate)

    async def _poll(self, name: str, prefix: _Prefix) -> None:
        """Start a LIST every ``poll_interval`` (at most two in flight, at most ``max_list_rate``
        pages/s over all prefixes), so a slow LIST does not delay the next one by its whole duration."""
        while prefix.waiters:
            awaited = [key for key in prefix.waiters if key not in prefix.fetching]
            if awaited and len(prefix.lists) < 2:
                task = asyncio.create_task(self._cycle(name, prefix, awaited))
                prefix.lists.add(task)
                task.add_done_callback(prefix.lists.discard)
            await asyncio.sleep(self._interval())
        if self._prefixes.get(name) is prefix and not prefix.waiters:
            del self._prefixes[name]
