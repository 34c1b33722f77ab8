"""Run one agent episode: invoke, wait for the result in S3, stop the session, classify the outcome.

The agent's own outcome is the reward it wrote (any number, 0 included): that is reward
signal. Everything else ends the episode as an *infrastructure* failure with a short reason
code (see :data:`FAILURE_REASONS`), which the rollout keeps out of the gradient. The boundary
for an agent that crashed (an uncaught exception: ``AgentCoreRLApp`` writes ``status_code``
500) is on the infrastructure side: the crash does not say whether the policy or the agent's
environment (a tool outage, a bug) caused it, and training on it would teach the policy to
avoid agent bugs. An agent that wants a bad model output penalised catches it and returns a
reward (e.g. 0), which is signal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentcore_slime.cost import cost_problem
from agentcore_slime.episodes.log_ids import redact, short_id
from agentcore_slime.episodes.pacing import RateLimiter
from agentcore_slime.episodes.results import ResultWatcher
from agentcore_slime.episodes.transports import AcrTransport, LocalTransport, Transport
from agentcore_slime.episodes.wire import InvokeError, build_payload, extract_reward, result_key
from agentcore_slime.settings.config import ToolkitConfig

logger = logging.getLogger(__name__)

#: every reason an episode can fail for; all of them are infrastructure failures
FAILURE_REASONS = {
    "invoke_error": "the runtime refused the invocation or could not be reached (after retries)",
    "throttled": "the runtime throttled the invocation (after retries)",
    "invoke_ambiguous": "the runtime may have started the agent but its reply was lost; not repeated",
    "timeout": "no result within ACR_TIMEOUT",
    "result_unreadable": "the result object could not be listed, read or parsed",
    "agent_crashed": "the agent wrote an error result (status_code other than 200)",
    "bad_reward": "the result has no numeric, finite 'rewards'",
    "bad_cost": "the result reports a cost (AGENT_COST_KEY) that is not a number in 0..MAX_AGENT_COST_USD",
    "gateway_error": "the gateway could not open the session or return its traces",
    "no_traces": "the agent returned a reward but made no usable model call",
    "routing_replay": "--use-rollout-routing-replay: a sample's routed experts could not be rebuilt exactly",
    "bad_metadata": "the row's metadata is not an object",
}


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
    :param failure: the reason code (a key of :data:`FAILURE_REASONS`), None on success.
    """

    session_id: str
    reward: float | None
    reason: str | None = None
    result: dict[str, Any] | None = None
    seconds: float = 0.0
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


class EpisodeRunner:
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
        self.own_executors: list[ThreadPoolExecutor] = []

    async def _stop(self, session_id: str) -> None:
        if not self.transport.stops_sessions:
            return
        try:
            await self.limiter.acquire()
            await self.transport.stop(session_id)
        except Exception as exc:  # best effort: ACR reaps idle sessions anyway
            self.stop_failures += 1
            logger.debug("stop_runtime_session %s failed: %s", short_id(session_id), redact(exc, session_id))

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

    async def _result_or_failure(
        self, request: EpisodeRequest, key: str
    ) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """``(result, reason, code)``: the result, or why and under which reason code there is none."""
        try:
            async with asyncio.timeout(self.config.acr_timeout):
                return await self._invoke_and_wait(request, key), None, None
        except TimeoutError:
            where = f"s3://{self.config.s3_bucket}/{key}"
            return None, f"timeout: no result at {where} after {self.config.acr_timeout:g}s", "timeout"
        except InvokeError as exc:
            return None, f"invoke failed: {exc}", exc.code
        except Exception as exc:
            return None, f"reading the result failed: {type(exc).__name__}: {exc}", "result_unreadable"
        finally:
            self.watcher.unwatch(key)

    async def run_episode(self, request: EpisodeRequest) -> EpisodeOutcome:
        """Invoke the agent once, wait for its result (bounded by ``acr_timeout``), stop the session.

        Never raises for an episode-level problem: failures come back with a reason. When
        the episode is cancelled (aborted), the runtime session is stopped before the
        cancellation propagates.
        """
        started = time.monotonic()
        key = result_key(self.config.exp_id, request.input_id, request.session_id)
        try:
            result, reason, code = await self._result_or_failure(request, key)
        except asyncio.CancelledError:
            await asyncio.shield(self._stop(request.session_id))
            raise
        await self._stop(request.session_id)
        reward = None
        if result is not None:
            reward, reason = extract_reward(result)
            if reason is not None:
                code = "agent_crashed" if result.get("status_code", 200) != 200 else "bad_reward"
            elif (reason := cost_problem(result, self.config.agent_cost_key)) is not None:
                reward, code = None, "bad_cost"
        return EpisodeOutcome(request.session_id, reward, reason, result, time.monotonic() - started, code)

    async def close(self) -> None:
        await self.transport.close()
        await self.watcher.close()
        for executor in self.own_executors:
            executor.shutdown(wait=False, cancel_futures=True)


def boto_config(config: ToolkitConfig, read_timeout: float = 60.0, attempts: int = 5) -> Any:
    """botocore Config: ``attempts`` adaptive attempts (1 = no retries), the configured pool size."""
    from botocore.config import Config

    return Config(
        retries={"total_max_attempts": attempts, "mode": "adaptive"},
        max_pool_connections=config.max_pool_connections,
        connect_timeout=10,
        read_timeout=read_timeout,
    )


def _acr_transport(config: ToolkitConfig, session: Any, control_pool: Executor) -> tuple[AcrTransport, Any]:
    """The ACR transport: invocations without botocore retries, in a pool of their own."""
    assert config.agent_runtime_arn is not None
    read_timeout = max(1.0, min(config.acr_timeout, 900.0))
    invoke_client = session.client("bedrock-agentcore", config=boto_config(config, read_timeout, attempts=1))
    control_client = session.client("bedrock-agentcore", config=boto_config(config))
    invoke_pool = ThreadPoolExecutor(max_workers=config.max_concurrent, thread_name_prefix="agentcore-invoke")
    transport = AcrTransport(
        config.agent_runtime_arn, invoke_client, control_client, invoke_pool, control_pool
    )
    return transport, invoke_pool


def s3_client(session: Any, bucket: str, config: Any, endpoint_url: str | None = None) -> Any:
    """The S3 client the result watcher presigns its GETs and LISTs with: Signature Version 4
    (botocore presigns with version 2 by default, which S3 refuses for buckets made since June
    2020) in the bucket's own region (a version 4 link names its region; the bucket's comes from
    its ``x-amz-bucket-region`` header, asked once), virtual-hosted addressing.

    :param session: the boto3 session (its credentials, and region when the bucket's is unknown).
    :param bucket: the results bucket.
    :param config: the botocore Config to sign with (timeouts, retries, pool size).
    :param endpoint_url: another S3 endpoint (tests: a local server); default boto3's.
    """
    from botocore.config import Config

    config = config.merge(Config(signature_version="s3v4", s3={"addressing_style": "virtual"}))
    client = session.client("s3", config=config, endpoint_url=endpoint_url)
    region = bucket_region(client, bucket)
    if region and region != client.meta.region_name:
        client.close()  # its connection to S3 (the HEAD's) closed now, not when collected
        client = session.client("s3", region_name=region, config=config, endpoint_url=endpoint_url)
    return client


def bucket_region(s3: Any, bucket: str) -> str | None:
    """The bucket's region, from the ``x-amz-bucket-region`` header S3 sends with a HEAD of it,
    also when it refuses the HEAD (wrong region, no ListBucket right); ``None`` if it sends none."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        headers = s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPHeaders"]
    except ClientError as err:
        headers = err.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    except BotoCoreError:
        return None
    region = headers.get("x-amz-bucket-region")
    return str(region) if region else None


def make_runner(config: ToolkitConfig, executor: Executor) -> EpisodeRunner:
    """Build the episode runner for ``config``: boto3 clients in the ARN's region, the transport.

    Invocations (ACR) and result polling each get a thread pool of their own, so neither
    hung invocations nor slow listings hold up each other or the rollout's own calls.

    :param config: validated rollout settings.
    :param executor: the rollout's bounded thread pool (stops of runtime sessions).
    """
    import boto3

    session = boto3.session.Session(region_name=config.region) if config.region else boto3.session.Session()
    s3 = s3_client(session, config.s3_bucket, boto_config(config))
    transport: Transport
    own: list[ThreadPoolExecutor] = []
    if config.agent_runtime_arn:
        transport, invoke_pool = _acr_transport(config, session, executor)
        own.append(invoke_pool)
    else:
        assert config.agent_url is not None
        transport = LocalTransport(config.agent_url, timeout=min(config.acr_timeout, 900.0))
    watcher = ResultWatcher(s3, config.s3_bucket, poll_interval=config.result_poll_interval)
    runner = EpisodeRunner(config, transport, watcher, RateLimiter(config.acr_tps_limit))
    runner.own_executors = own
    return runner
