"""Client for SGLang's native ``/generate`` (an engine or the sgl-router in front of engines).

One aiohttp ``ClientSession`` with keep-alive connections and a long read timeout. A call
sends ``input_ids`` with ``return_logprob`` and explicit sampling params, retries connection
errors and 5xx answers with bounded exponential backoff (a fresh ``rid`` per attempt), and
returns the sampled ids exactly as the engine reports them (stop token included, reference
§5.2) with one logprob per id, checked. An ``abort`` finish is an error, never a stop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

logger = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """The engine could not produce a completion (down, aborted, malformed answer).

    :param retryable: whether a client retry could succeed (drives ``x-should-retry``).
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass
class EngineResult:
    """One completion as the engine reported it."""

    output_ids: list[int]
    logprobs: list[float]
    finish: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def finish_type(self) -> str:
        return str(self.finish.get("type"))


@dataclass
class EngineClient:
    """Talks to one engine URL.

    :param url: base url, e.g. ``http://10.0.0.5:3000``.
    :param retries: extra attempts after the first on connection errors / 5xx.
    :param backoff: first retry delay in seconds, doubled per attempt.
    :param read_timeout: seconds to wait for a completion (long: generations are slow).
    :param max_connections: connection pool size (0 = unlimited).
    """

    url: str
    retries: int = 3
    backoff: float = 0.5
    read_timeout: float = 900.0
    max_connections: int = 0
    _session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.read_timeout)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("EngineClient.open() was not called")
        return self._session

    async def health(self, attempts: int = 5, delay: float = 1.0) -> None:
        """Wait until ``GET /health`` answers 200.

        :raises EngineError: when it never does within ``attempts``.
        """
        last = ""
        for attempt in range(attempts):
            try:
                async with self.session.get(
                    f"{self.url}/health", timeout=aiohttp.ClientTimeout(total=30)
                ) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except (TimeoutError, aiohttp.ClientError) as err:
                last = f"{type(err).__name__}: {err}"
            if attempt + 1 < attempts:
                await asyncio.sleep(delay)
        raise EngineError(f"engine {self.url} is not healthy: {last}", retryable=True)

    async def generate(
        self, input_ids: list[int], sampling_params: dict[str, Any], *, routing_key: str | None = None
    ) -> EngineResult:
        """One ``/generate`` call with retries.

        :raises EngineError: exhausted retries, a 4xx, an abort finish or a malformed answer.
        """
        headers = {"X-SMG-Routing-Key": routing_key} if routing_key else {}
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
            body = {
                "rid": uuid.uuid4().hex,
                "input_ids": input_ids,
                "return_logprob": True,
                "sampling_params": sampling_params,
            }
            try:
                async with self.session.post(f"{self.url}/generate", json=body, headers=headers) as resp:
                    if resp.status >= 500:
                        last = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                        continue
                    payload = await resp.json(content_type=None)
                    if resp.status != 200:
                        raise EngineError(
                            f"engine rejected the request (HTTP {resp.status}): {_error_message(payload)}",
                            retryable=False,
                        )
            except TimeoutError:
                await self._abort(body["rid"])
                last = f"no answer within {self.read_timeout:g} s"
                continue
            except aiohttp.ClientResponseError as err:  # e.g. a non-JSON 200 body
                raise EngineError(f"malformed /generate answer: {err.message}", retryable=False) from None
            except aiohttp.ClientError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            except ValueError as err:
                raise EngineError(f"malformed /generate answer: {err}", retryable=False) from None
            return _result(payload)
        raise EngineError(
            f"engine {self.url} failed after {self.retries + 1} attempts: {last}", retryable=True
        )

    async def _abort(self, rid: str) -> None:
        """Free the engine's KV cache for a request we gave up on (best effort)."""
        try:
            async with self.session.post(
                f"{self.url}/abort_request", json={"rid": rid}, timeout=aiohttp.ClientTimeout(total=5)
            ):
                pass
        except (TimeoutError, aiohttp.ClientError):
            logger.debug("abort_request for %s failed", rid)


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message"))
    return str(payload)[:200]


def _result(payload: Any) -> EngineResult:
    """Validate a ``/generate`` answer and return its ids, logprobs and finish reason."""
    try:
        ids = [int(t) for t in payload["output_ids"]]
        meta = payload["meta_info"]
        finish = dict(meta["finish_reason"] or {})
        entries = meta.get("output_token_logprobs") or []
        logprobs = [float(e[0]) for e in entries]
        lp_ids = [int(e[1]) for e in entries]
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise EngineError(
            f"malformed /generate answer ({type(err).__name__}: {err})", retryable=False
        ) from None
    if finish.get("type") == "abort":
        raise EngineError(f"engine aborted the request: {finish.get('message') or 'abort'}", retryable=True)
    if finish.get("type") not in ("stop", "length"):
        raise EngineError(f"unknown finish reason {finish!r}", retryable=False)
    if lp_ids != ids:
        raise EngineError(
            f"engine returned {len(logprobs)} logprobs for {len(ids)} output ids (or different ids)",
            retryable=False,
        )
    return EngineResult(ids, logprobs, finish, meta)
