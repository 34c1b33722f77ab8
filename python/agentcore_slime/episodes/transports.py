"""How an agent episode is started and stopped: AgentCore Runtime (boto3) or a local URL.

- :class:`AcrTransport`: boto3 ``bedrock-agentcore`` ``invoke_agent_runtime`` /
  ``stop_runtime_session``. The invocation is not idempotent (the runtime may start the
  agent and then lose the reply), so botocore never retries it; this module retries only
  what certainly did not reach the agent (throttling, no connection), and reports a lost
  reply as :class:`~.wire.AmbiguousInvokeError`. Blocking invocations run in a pool of
  their own, with a read timeout of at most the episode timeout, so hung invocations
  cannot starve the gateway calls and trace merges of the step.
- :class:`LocalTransport`: ``POST <agent_url>/invocations`` with the session header ACR
  would send, so an agent container on the user's own machine works unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any, Protocol, TypeVar

from agentcore_slime.episodes.log_ids import redact, short_id
from agentcore_slime.episodes.wire import (
    MAX_REPLY_BYTES,
    SESSION_HEADER,
    AmbiguousInvokeError,
    InvokeError,
    parse_reply,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: error codes meaning the runtime refused the call before starting anything
_THROTTLED = {"ThrottlingException", "ServiceQuotaExceededException", "TooManyRequestsException"}
_NOT_CONNECTED = ("EndpointConnectionError", "ConnectTimeoutError", "NoCredentialsError")
_INVOKE_ATTEMPTS = 5
_BACKOFF = 0.5


async def in_pool(executor: Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call in ``executor`` without blocking the event loop."""
    return await asyncio.get_running_loop().run_in_executor(executor, partial(fn, *args, **kwargs))


class Transport(Protocol):
    """How an agent episode is started and stopped.

    ``stops_sessions`` says whether :meth:`stop` ends a billed session (and so spends
    the TPS budget); the local transport has nothing to stop.
    """

    stops_sessions: bool

    async def invoke(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]: ...

    async def stop(self, session_id: str) -> None: ...

    async def close(self) -> None: ...


def classify_boto_error(exc: Exception) -> InvokeError:
    """Turn a botocore exception of ``invoke_agent_runtime`` into a started / not started error.

    - throttling (429) and failed connections: the agent was not started (safe to retry);
    - a 5xx answer (e.g. 504), a reset connection or a read timeout: the runtime may have
      forwarded the payload, so the agent may be running (:class:`AmbiguousInvokeError`);
    - any other answer (4xx, 424 container error): refused, not retried.
    """
    text = f"{type(exc).__name__}: {exc}"
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _THROTTLED or status == 429:
            return InvokeError(text, code="throttled", retryable=True)
        if status >= 500 or status == 0:
            return AmbiguousInvokeError(text)
        return InvokeError(text)
    if type(exc).__name__ in _NOT_CONNECTED:
        return InvokeError(text, retryable=type(exc).__name__ != "NoCredentialsError")
    return AmbiguousInvokeError(text)  # reset, read timeout, protocol error: outcome unknown


class AcrTransport:
    """Invoke and stop agent sessions on AgentCore Runtime with boto3.

    :param arn: the agent runtime ARN.
    :param invoke_client: a ``bedrock-agentcore`` client without botocore retries.
    :param control_client: a ``bedrock-agentcore`` client for stops (retried: stopping twice is harmless).
    :param invoke_pool: threads for blocking invocations only.
    :param control_pool: threads for stops.
    """

    stops_sessions = True

    def __init__(
        self, arn: str, invoke_client: Any, control_client: Any, invoke_pool: Executor, control_pool: Executor
    ) -> None:
        self.arn = arn
        self.invoke_client = invoke_client
        self.control_client = control_client
        self.invoke_pool = invoke_pool
        self.control_pool = control_pool

    def _invoke_blocking(self, session_id: str, body: bytes) -> dict[str, Any]:
        try:
            response = self.invoke_client.invoke_agent_runtime(
                agentRuntimeArn=self.arn,
                runtimeSessionId=session_id,
                payload=body,
                contentType="application/json",
                accept="application/json",
            )
            raw = response["response"].read(MAX_REPLY_BYTES + 1)
        except Exception as exc:  # botocore raises many types; classify_boto_error sorts them
            raise classify_boto_error(exc) from exc
        return parse_reply(raw)

    async def invoke(self, session_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """One invocation; throttling and failed connections are retried with backoff, nothing else."""
        body = json.dumps(payload).encode()
        for attempt in range(_INVOKE_ATTEMPTS):
            try:
                return await in_pool(self.invoke_pool, self._invoke_blocking, session_id, body)
            except AmbiguousInvokeError:
                raise
            except InvokeError as exc:
                if not exc.retryable or attempt == _INVOKE_ATTEMPTS - 1:
                    raise
                logger.debug(
                    "invoke %s not started (%s); retrying", short_id(session_id), redact(exc, session_id)
                )
                await asyncio.sleep(_BACKOFF * 2**attempt)
        raise AssertionError("unreachable")

    async def stop(self, session_id: str) -> None:
        await in_pool(
            self.control_pool,
            self.control_client.stop_runtime_session,
            agentRuntimeArn=self.arn,
            runtimeSessionId=session_id,
        )

    async def close(self) -> None:
        return None


class LocalTransport:
    """POST the payload to a locally running agent's ``/invocations``, as ACR would.

    A connection that could not be made is an :class:`InvokeError`; one that broke or
    timed out after the request was sent is an :class:`AmbiguousInvokeError` (never retried).

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
                raw = await response.content.read(MAX_REPLY_BYTES + 1)
                if response.status != 200:
                    text = raw[:200].decode(errors="replace")
                    raise InvokeError(f"HTTP {response.status} from {self.url}: {text}")
        except aiohttp.ClientConnectorError as exc:
            raise InvokeError(f"{type(exc).__name__} calling {self.url}: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AmbiguousInvokeError(f"{type(exc).__name__} calling {self.url}: {exc}") from exc
        return parse_reply(raw)

    async def stop(self, session_id: str) -> None:
        return None  # a local agent has no runtime session to end

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
