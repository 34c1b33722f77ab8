"""Start agent episodes and collect their results.

One episode: invoke the agent with the row's payload plus the ``_rollout`` config
(agentcore-rl-toolkit's wire format), wait until the agent's result object
``{exp_id}/{input_id}/{session_id}.json`` appears in S3, read the reward from it, and
stop the runtime session. Two transports sit behind the same call:

- :class:`AcrTransport`: boto3 ``bedrock-agentcore`` (``invoke_agent_runtime``,
  ``stop_runtime_session``) in the runtime ARN's region, adaptive retries.
- :class:`LocalTransport`: ``POST <agent_url>/invocations`` with the session header ACR
  would send, so an agent container on the user's own machine works unchanged.

Results are found by :class:`ResultWatcher`: every rollout step uses one ``input_id``,
so one paginated ``list_objects_v2`` of the step's prefix per poll cycle finds every
finished episode of the step (instead of one HEAD per episode); each found object is
then fetched once with GET. All blocking boto3 calls run in a bounded thread pool,
never on the event loop. New invocations and stops share one TPS limiter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from agentcore_slime.config import ToolkitConfig

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
MIN_SESSION_ID, MAX_SESSION_ID = 33, 256
_FATAL_S3_CODES = {
    "NoSuchBucket",
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
}
_RESULT_THREADS = 8
T = TypeVar("T")


class InvokeError(RuntimeError):
    """The agent could not be started (transport error or an error reply)."""


def new_session_id() -> str:
    """A fresh session id valid for ACR (36 chars: within 33-256) and safe in URLs and S3 keys."""
    session_id = str(uuid.uuid4())
    assert MIN_SESSION_ID <= len(session_id) <= MAX_SESSION_ID
    return session_id


def result_key(exp_id: str, input_id: str, session_id: str) -> str:
    """The S3 key an ``AgentCoreRLApp`` writes the episode's result to."""
    return f"{exp_id}/{input_id}/{session_id}.json"


def agent_sampling_params(sampling: dict[str, Any]) -> dict[str, Any]:
    """The trainer's sampling params in the OpenAI form agents forward to the gateway.

    ``max_new_tokens`` becomes ``max_tokens``; ``top_k`` is dropped (not an OpenAI chat
    parameter); the gateway applies the trainer's values anyway.

    :param sampling: ``{"temperature", "top_p", "top_k", "max_new_tokens"}``.
    """
    params = {k: sampling[k] for k in ("temperature", "top_p") if sampling.get(k) is not None}
    if sampling.get("max_new_tokens") is not None:
        params["max_tokens"] = sampling["max_new_tokens"]
    return params


def build_payload(
    metadata: dict[str, Any],
    *,
    exp_id: str,
    input_id: str,
    s3_bucket: str,
    base_url: str,
    model_id: str,
    sampling: dict[str, Any],
    episode_timeout: float | None = None,
) -> dict[str, Any]:
    """The invocation payload: a shallow copy of the row's metadata plus ``_rollout``.

    :param metadata: the dataset row's ``metadata`` dict (the agent's input).
    :param exp_id: experiment id (first part of the result key).
    :param input_id: the step's input id (second part of the result key).
    :param s3_bucket: bucket the agent writes its result to.
    :param base_url: the gateway session's OpenAI base URL (ends in ``/v1``).
    :param model_id: the model name the agent sends.
    :param sampling: the trainer's sampling params (see :func:`agent_sampling_params`).
    :param episode_timeout: seconds the rollout waits for the result (``acr_timeout``), sent as
        ``_rollout.episode_timeout`` so an agent can bound its model calls below it (agents
        that do not read it ignore it, as they do any extra ``_rollout`` key).
    """
    payload = dict(metadata)
    payload["_rollout"] = {
        "exp_id": exp_id,
        "input_id": input_id,
        "s3_bucket": s3_bucket,
        "base_url": base_url,
        "model_id": model_id,
        "sampling_params": agent_sampling_params(sampling),
    }
    if episode_timeout is not None:
        payload["_rollout"]["episode_timeout"] = episode_timeout
    return payload


def extract_reward(result: dict[str, Any]) -> tuple[float | None, str | None]:
    """The episode's reward from the agent's result, or why there is none.

    A ``status_code`` other than 200 is a failed episode; ``rewards`` may be a number or
    a non-empty list (its last element counts). Booleans, non-numbers and non-finite
    numbers are rejected: they are contract bugs, not a reward of 0.

    :returns: ``(reward, None)`` or ``(None, reason)``.
    """
    status = result.get("status_code", 200)
    if status != 200:
        return None, f"agent error result (status_code {status}): {str(result.get('stop_reason', ''))[:200]}"
    if "rewards" not in result:
        return None, "result has no 'rewards' key (the agent must return {'rewards': <number>})"
    value = result["rewards"]
    if isinstance(value, list):
        if not value:
            return None, "result 'rewards' is an empty list"
        value = value[-1]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"result 'rewards' is {value!r}, not a number"
    if not math.isfinite(value):
        return None, f"result 'rewards' is {value!r}, not a finite number"
    return float(value), None


class RateLimiter:
    """Spaces calls at least ``1/tps`` seconds apart (one shared budget per process).

    :param tps: calls per second.
    """

    def __init__(self, tps: float) -> None:
        self._interval = 1.0 / tps
        self._next = 0.0

    async def acquire(self) -> None:
        """Wait for the next free slot."""
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + self._interval
        if slot > now:
            await asyncio.sleep(slot - now)


class Transport(Protocol):
    """How an agent episode is started and stopped.

    ``stops_sessions`` says whether :meth:`stop` ends a billed session (and so spends
    the TPS budget); the local transport has nothing to stop.
    """

    stops_sessions: bool

    async def invoke(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]: ...

    async def stop(self, session_id: str) -> None: ...

    async def close(self) -> None: ...


async def _in_pool(executor: Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor, partial(fn, *args, **kwargs))


class AcrTransport:
    """Invoke and stop agent sessions on AgentCore Runtime with boto3.

    :param arn: the agent runtime ARN.
    :param client: a boto3 ``bedrock-agentcore`` client.
    :param executor: the bounded thread pool for blocking calls.
    """

    stops_sessions = True

    def __init__(self, arn: str, client: Any, executor: Executor) -> None:
        self.arn = arn
        self.client = client
        self.executor = executor

    def _invoke_blocking(self, session_id: str, body: bytes) -> dict[str, Any]:
        try:
            response = self.client.invoke_agent_runtime(
                agentRuntimeArn=self.arn,
                runtimeSessionId=session_id,
                payload=body,
                contentType="application/json",
                accept="application/json",
            )
            raw = response["response"].read()
        except Exception as exc:  # botocore raises many types; all mean "not started"
            raise InvokeError(f"{type(exc).__name__}: {exc}") from exc
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            raise InvokeError(f"agent reply is not JSON: {raw[:200]!r}") from exc
        return reply if isinstance(reply, dict) else {"reply": reply}

    async def invoke(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(payload).encode()
        return await _in_pool(self.executor, self._invoke_blocking, session_id, body)

    async def stop(self, session_id: str) -> None:
        await _in_pool(
            self.executor,
            self.client.stop_runtime_session,
            agentRuntimeArn=self.arn,
            runtimeSessionId=session_id,
        )

    async def close(self) -> None:
        return None


class LocalTransport:
    """POST the payload to a locally running agent's ``/invocations``, as ACR would.

    :param agent_url: the agent's root URL, e.g. ``http://127.0.0.1:8080``.
    :param timeout: seconds to wait for the agent's immediate reply.
    """

    stops_sessions = False

    def __init__(self, agent_url: str, timeout: float = 60.0) -> None:
        self.url = agent_url.rstrip("/") + "/invocations"
        self.timeout = timeout
        self._session: Any = None

    async def _client(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def invoke(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        client = await self._client()
        try:
            async with client.post(self.url, json=payload, headers={SESSION_HEADER: session_id}) as response:
                text = await response.text()
                if response.status != 200:
                    raise InvokeError(f"HTTP {response.status} from {self.url}: {text[:200]}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise InvokeError(f"{type(exc).__name__} calling {self.url}: {exc}") from exc
        try:
            reply = json.loads(text)
        except ValueError as exc:
            raise InvokeError(f"agent reply is not JSON: {text[:200]!r}") from exc
        return reply if isinstance(reply, dict) else {"reply": reply}

    async def stop(self, session_id: str) -> None:
        return None  # a local agent has no runtime session to end

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


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
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        result = json.loads(body)
        if not isinstance(result, dict):
            raise ValueError(f"result {key} is {type(result).__name__} JSON, not an object")
        return result

    async def _fetch(self, key: str, prefix: _Prefix) -> None:
        self.get_requests += 1
        try:
            result = await _in_pool(self.executor, self._get_blocking, key)
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
            return await _in_pool(self.executor, self._list_blocking, name, min(awaited), max(awaited))
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


@dataclass
class EpisodeRequest:
    """What one episode needs.

    :param payload_metadata: the row's metadata dict (the agent's input).
    :param session_id: the episode's session id (ACR runtime session, gateway session).
    :param input_id: the step's input id.
    :param base_url: the gateway session's OpenAI base URL.
    :param sampling: the trainer's sampling params.
    """

    payload_metadata: dict[str, Any]
    session_id: str
    input_id: str
    base_url: str
    sampling: dict[str, Any]


@dataclass
class EpisodeOutcome:
    """How an episode ended.

    :param session_id: the episode's session id.
    :param reward: the reward (None when the episode failed).
    :param reason: why the episode failed (None on success).
    :param result: the agent's result JSON, when one was read.
    :param seconds: wall time from start to result or failure.
    """

    session_id: str
    reward: float | None
    reason: str | None = None
    result: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None


class Launcher:
    """Runs agent episodes through a transport and a result watcher.

    :param config: the rollout settings (exp id, bucket, model id, timeout).
    :param transport: ACR or local transport.
    :param watcher: the S3 result watcher.
    :param limiter: the TPS limiter shared by invoke and stop.
    """

    def __init__(
        self, config: ToolkitConfig, transport: Transport, watcher: ResultWatcher, limiter: RateLimiter
    ):
        self.config = config
        self.transport = transport
        self.watcher = watcher
        self.limiter = limiter
        self.stop_failures = 0
        self.own_executor: ThreadPoolExecutor | None = None

    async def _stop(self, session_id: str) -> None:
        if not self.transport.stops_sessions:
            return
        try:
            await self.limiter.acquire()
            await self.transport.stop(session_id)
        except Exception as exc:  # best effort: ACR reaps idle sessions anyway
            self.stop_failures += 1
            logger.debug("stop_runtime_session %s failed: %s", session_id, exc)

    async def _invoke_and_wait(self, request: EpisodeRequest, key: str) -> dict[str, Any]:
        await self.limiter.acquire()
        payload = build_payload(
            request.payload_metadata,
            exp_id=self.config.exp_id,
            input_id=request.input_id,
            s3_bucket=self.config.s3_bucket,
            base_url=request.base_url,
            model_id=self.config.model_id,
            sampling=request.sampling,
            episode_timeout=self.config.acr_timeout,
        )
        future = self.watcher.watch(key)
        reply = await self.transport.invoke(request.session_id, payload)
        reply_key = reply.get("result_key")
        if reply_key is not None and reply_key != key:
            raise InvokeError(
                f"agent writes its result to {reply_key!r}, expected {key!r} "
                "(does the agent read the session id header?)"
            )
        return await future

    async def run_episode(self, request: EpisodeRequest) -> EpisodeOutcome:
        """Invoke the agent, wait for its result (bounded by ``acr_timeout``), stop the session.

        Never raises for an episode-level problem: failures come back with a reason.
        """
        started = time.monotonic()
        key = result_key(self.config.exp_id, request.input_id, request.session_id)
        result: dict[str, Any] | None = None
        reason: str | None
        try:
            async with asyncio.timeout(self.config.acr_timeout):
                result = await self._invoke_and_wait(request, key)
        except TimeoutError:
            reason = (
                f"timeout: no result at s3://{self.config.s3_bucket}/{key} after {self.config.acr_timeout:g}s"
            )
        except InvokeError as exc:
            reason = f"invoke failed: {exc}"
        except Exception as exc:
            reason = f"reading the result failed: {type(exc).__name__}: {exc}"
        else:
            reason = None
        finally:
            self.watcher.unwatch(key)
        await self._stop(request.session_id)
        reward = None
        if result is not None:
            reward, reason = extract_reward(result)
        return EpisodeOutcome(request.session_id, reward, reason, result, time.monotonic() - started)

    async def close(self) -> None:
        await self.transport.close()
        if self.own_executor is not None:
            self.own_executor.shutdown(wait=False, cancel_futures=True)


def boto_config(config: ToolkitConfig, read_timeout: float = 60.0) -> Any:
    """botocore Config: adaptive retries, the configured connection pool size."""
    from botocore.config import Config

    return Config(
        retries={"max_attempts": 5, "mode": "adaptive"},
        max_pool_connections=config.max_pool_connections,
        connect_timeout=10,
        read_timeout=read_timeout,
    )


def make_launcher(config: ToolkitConfig, executor: Executor) -> Launcher:
    """Build the launcher for ``config``: boto3 clients in the ARN's region, the transport.

    Result polling (LIST/GET) gets its own small thread pool, so detecting results never
    waits behind invocations blocked in cold starts.

    :param config: validated rollout settings.
    :param executor: the bounded thread pool for invoke and stop calls.
    """
    import boto3

    session = boto3.session.Session(region_name=config.region) if config.region else boto3.session.Session()
    s3 = session.client("s3", config=boto_config(config))
    transport: Transport
    if config.agent_runtime_arn:
        read_timeout = max(60.0, min(config.acr_timeout, 900.0))
        client = session.client("bedrock-agentcore", config=boto_config(config, read_timeout))
        transport = AcrTransport(config.agent_runtime_arn, client, executor)
    else:
        assert config.agent_url is not None
        transport = LocalTransport(config.agent_url, timeout=min(config.acr_timeout, 900.0))
    results_pool = ThreadPoolExecutor(max_workers=_RESULT_THREADS, thread_name_prefix="agentcore-s3")
    watcher = ResultWatcher(s3, config.s3_bucket, results_pool, poll_interval=config.result_poll_interval)
    launcher = Launcher(config, transport, watcher, RateLimiter(config.acr_tps_limit))
    launcher.own_executor = results_pool
    return launcher
