"""A local stand-in of the Amazon Bedrock AgentCore Runtime (ACR) data plane, plus the container side.

Real ACR receives ``invoke_agent_runtime`` / ``stop_runtime_session`` calls from boto3, starts (or
reuses) a microVM per runtime session, and POSTs the payload to the agent container's
``/invocations`` with the ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` header. This module
speaks the same HTTP wire protocol boto3 uses (agentcore-contract.md section 2.3, verified with
boto3 1.43), so production code reaches it unchanged once ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``
points at :attr:`AcrDataPlane.url`:

- ``POST /runtimes/{quote(arn, safe='')}/invocations[?qualifier=Q]``: validates the session header
  (33-256 chars, like botocore/ACR), forwards the raw body to the agent registered for that ARN and
  returns its reply with its ``Content-Type`` and the session header echoed. A container 5xx or an
  unreachable container becomes ``424 RuntimeClientError`` (ACR's sender-fault code for container
  failures; inferred, see the reference's open points).
- ``POST /runtimes/{arn}/stopruntimesession``: records the stop, replies ``200 {}``.
- Fault modes for the non-idempotent cases (issue 18): for chosen sessions the stand-in forwards the
  invocation to the agent (which starts working) and then answers ``504`` (``gateway_timeout_sessions``),
  resets the connection (``reset_sessions``), or never answers (``hang_sessions``, until the client
  gives up or the server stops).
- Errors carry ``x-amzn-ErrorType`` and a JSON ``message``, so botocore raises the modeled exception
  (``ThrottlingException`` 429 is retried by botocore, ``ResourceNotFoundException`` 404 is not).

:class:`AgentServer` plays the container: it serves an agent's ASGI app (e.g. an
``AgentCoreRLApp``) with uvicorn on loopback, exactly as ``AgentCoreRLApp.run`` does, but on an
ephemeral port in a background thread.

Not modelled: microVM lifecycle (cold starts, idle reaping), stopping a running handler on
``stop_runtime_session`` (the agent keeps running; the stop is only recorded), quotas, auth.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from fakes.http import ThreadedAiohttpServer

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
MIN_SESSION_ID, MAX_SESSION_ID = 33, 256


@dataclass
class Invocation:
    """One ``invoke_agent_runtime`` call as the data plane received it.

    :param arn: the runtime ARN from the path (URL-decoded).
    :param session_id: the runtime session id header.
    :param qualifier: the ``qualifier`` query parameter, if any.
    :param body: the raw payload bytes.
    :param status: the HTTP status returned to the caller.
    """

    arn: str
    session_id: str
    qualifier: str | None
    body: bytes
    status: int = 0


@dataclass
class _Faults:
    throttle_first: int = 0
    fail_sessions: set[str] = field(default_factory=set)
    gateway_timeout_sessions: set[str] = field(default_factory=set)
    reset_sessions: set[str] = field(default_factory=set)
    hang_sessions: set[str] = field(default_factory=set)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status, headers={"x-amzn-ErrorType": code})


class AcrDataPlane(ThreadedAiohttpServer):
    """The ACR data-plane stand-in.

    :param runtimes: runtime ARN -> base url of the agent container serving it (``/invocations``).
    :param throttle_first: answer the first N invocations with 429 ``ThrottlingException``.
    :param fail_sessions: session ids whose invocations fail with 424 ``RuntimeClientError``.
    :param gateway_timeout_sessions: forward, then answer 504 (the agent runs; the reply is lost).
    :param reset_sessions: forward, then reset the connection without a reply.
    :param hang_sessions: forward, then never answer.
    """

    def __init__(self, runtimes: dict[str, str], throttle_first: int = 0,
                 fail_sessions: set[str] | None = None,
                 gateway_timeout_sessions: set[str] | None = None,
                 reset_sessions: set[str] | None = None,
                 hang_sessions: set[str] | None = None) -> None:
        app = web.Application()
        app.router.add_post("/runtimes/{arn}/invocations", self._invoke)
        app.router.add_post("/runtimes/{arn}/stopruntimesession", self._stop)
        super().__init__(app, name="acr-dataplane")
        self.runtimes = dict(runtimes)
        self.invocations: list[Invocation] = []
        self.stops: list[tuple[str, str]] = []
        self._faults = _Faults(throttle_first, set(fail_sessions or ()), set(gateway_timeout_sessions or ()),
                               set(reset_sessions or ()), set(hang_sessions or ()))
        self._lock = threading.Lock()
        self._client: aiohttp.ClientSession | None = None
        self._hung: list[asyncio.Future[None]] = []

    def _check_session(self, request: web.Request) -> str | web.Response:
        session_id = request.headers.get(SESSION_HEADER, "")
        if not MIN_SESSION_ID <= len(session_id) <= MAX_SESSION_ID:
            return _error(400, "ValidationException",
                          f"runtimeSessionId must be {MIN_SESSION_ID}-{MAX_SESSION_ID} characters")
        return session_id

    def _agent_url(self, arn: str) -> str | web.Response:
        if arn not in self.runtimes:
            return _error(404, "ResourceNotFoundException", f"No agent runtime found for {arn}")
        return self.runtimes[arn]

    async def _invoke(self, request: web.Request) -> web.Response:
        arn = unquote(request.match_info["arn"])
        body = await request.read()
        session_id = self._check_session(request)
        if isinstance(session_id, web.Response):
            return session_id
        record = Invocation(arn, session_id, request.query.get("qualifier"), body)
        with self._lock:
            self.invocations.append(record)
            throttled = self._faults.throttle_first > 0
            self._faults.throttle_first -= int(throttled)
        response = await self._dispatch(record, throttled)
        record.status = response.status
        return await self._after_forward(request, record, response)

    async def _after_forward(self, request: web.Request, record: Invocation,
                             response: web.Response) -> web.Response:
        """Apply the lost-reply faults to an invocation the agent has already received."""
        faults = self._faults
        if record.session_id in faults.gateway_timeout_sessions:
            record.status = 504
            return web.Response(status=504, text="upstream request timeout")
        if record.session_id in faults.reset_sessions:
            record.status = -1
            if request.transport is not None:
                request.transport.abort()  # RST: the client sees a connection reset, no reply
            raise asyncio.CancelledError
        if record.session_id in faults.hang_sessions:
            record.status = -2
            hung = asyncio.get_running_loop().create_future()
            self._hung.append(hung)
            await hung  # until the server stops (the client gives up long before)
        return response

    async def _dispatch(self, record: Invocation, throttled: bool) -> web.Response:
        if throttled:
            return _error(429, "ThrottlingException", "Rate exceeded")
        agent_url = self._agent_url(record.arn)
        if isinstance(agent_url, web.Response):
            return agent_url
        if record.session_id in self._faults.fail_sessions:
            return _error(424, "RuntimeClientError", "Received error from runtime (injected fault)")
        return await self._forward(agent_url, record)

    async def _forward(self, agent_url: str, record: Invocation) -> web.Response:
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        headers = {SESSION_HEADER: record.session_id, "Content-Type": "application/json"}
        url = f"{agent_url}/invocations"
        try:
            async with self._client.post(url, data=record.body, headers=headers) as reply:
                payload = await reply.read()
                content_type = reply.headers.get("Content-Type", "application/json")
                status = reply.status
        except aiohttp.ClientError as err:
            return _error(424, "RuntimeClientError", f"Could not reach the runtime container: {err}")
        if status >= 500:
            return _error(424, "RuntimeClientError",
                          f"Received error ({status}) from runtime: {payload.decode(errors='replace')}")
        if status >= 400:
            return _error(400, "ValidationException", payload.decode(errors="replace"))
        return web.Response(body=payload, status=200,
                            headers={"Content-Type": content_type, SESSION_HEADER: record.session_id})

    async def _stop(self, request: web.Request) -> web.Response:
        arn = unquote(request.match_info["arn"])
        session_id = self._check_session(request)
        if isinstance(session_id, web.Response):
            return session_id
        agent_url = self._agent_url(arn)
        if isinstance(agent_url, web.Response):
            return agent_url
        with self._lock:
            self.stops.append((arn, session_id))
        return web.json_response({}, headers={SESSION_HEADER: session_id})

    async def _release_hung(self) -> None:
        for hung in self._hung:
            hung.cancel()

    def stop(self) -> None:
        """Release hung invocations, close the forwarding client, then stop serving."""
        if self._loop is not None:
            self._loop.call(self._release_hung())
        if self._client is not None and self._loop is not None:
            self._loop.call(self._client.close())
            self._client = None
        super().stop()


class AgentServer:
    """Serve an agent's ASGI app with uvicorn on 127.0.0.1:<free port> in a background thread.

    This is what ``AgentCoreRLApp.run(port=...)`` does inside the ACR container (``uvicorn.run(app)``),
    minus the fixed port and the blocking call.

    :param app: the ASGI application (e.g. ``examples/math_agent/agent.py:create_app()``).
    """

    def __init__(self, app: Any) -> None:
        import uvicorn

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="agent-server", daemon=True)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def start(self, timeout: float = 10.0) -> str:
        """Start serving; returns the base url once the server accepts connections."""
        self._thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout / 0.02)):
            if self._server.started:
                return self.url
            deadline.wait(0.02)
        raise RuntimeError(f"agent server did not start within {timeout}s")

    def stop(self) -> None:
        """Ask uvicorn to exit and join its thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> AgentServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
