"""Client for SGLang's native ``/generate``: an engine, the sgl-router in front of engines
(training: slime's), or several engines the client spreads sessions over itself (bin/eval,
which starts no router: see docs/eval.md "Several engines").

One aiohttp ``ClientSession`` with keep-alive connections and a long read timeout. A call
sends ``input_ids`` with ``return_logprob`` and explicit sampling params, retries connection
errors and 5xx answers with bounded exponential backoff (a fresh ``rid`` per attempt), and
returns the sampled ids exactly as the engine reports them (stop token included, reference
§5.2) with one logprob per id, checked, and how many attempts it took. An ``abort`` finish is
an error, never a stop. A read timeout is not retried: a call waits at most ``read_timeout``
for its answer (then the engine is told to abort it).

An engine that went away (connection refused or reset, a router's 502/503/504 for a dead
worker) is retried for ``outage_seconds`` from the first such failure, with backoff up to
:data:`MAX_OUTAGE_BACKOFF`: with slime's ``--use-fault-tolerance`` that is as long as slime's
health monitor takes to kill the engine and remove it from the router (its check interval +
timeout + :data:`OUTAGE_SLACK_SECONDS`), so the retry lands on the engines left. With
``outage_seconds`` 0 (fault tolerance off) such failures get the ``retries`` of any other.

Pinned versions (docs/gateway.md "SGLang and router versions"): SGLang 0.5.13 behind slime's
sglang-router 0.3.2. The router answers ``/v1/models`` itself without ``max_model_len`` and
does not route ``/abort_request``, so the client asks the router's ``GET /workers`` for the
engines and reads the context length from, and sends aborts to, the engines directly.
SGLang 0.5.13 checks the length cap before stop tokens, so a turn whose last sampled token
is a stop token can come back as ``length``; :func:`settle_finish` reports it as the stop
it is (0.5.23 already does).

A router and an engine see a session only as :func:`routing_key`, a digest of its id: the id is
the session's only credential on the gateway, and any local user can join an unauthenticated
router as a worker and read the headers it forwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import orjson

from .wire import dump_json, new_id

logger = logging.getLogger(__name__)

#: the environment variable holding the engine's API key (set by bin/eval's eval.sh)
ENGINE_KEY_ENV = "TOOLKIT_ENGINE_API_KEY"
#: the header a router keeps a session on one engine by (sglang-router's manual policy)
ROUTING_HEADER = "X-SMG-Routing-Key"
#: with several engines and no router: seconds an engine that refused or dropped a connection
#: is passed over (its sessions go to the next engine meanwhile)
ENGINE_DOWN_SECONDS = 5.0
#: a router's answers when the worker it chose is gone (or none is left for a moment)
GONE_STATUSES = frozenset({502, 503, 504})
#: how sglang-router's 500 begins when sending to the worker, or reading its answer, failed
GONE_500_PREFIXES = ("Request failed", "Failed to get response body")
#: the longest wait between two attempts at an engine that went away
MAX_OUTAGE_BACKOFF = 5.0
#: beyond slime's health check interval + timeout: the dead engine's shutdown and its removal
#: from the router (slime's health monitor does both before it checks the next engine)
OUTAGE_SLACK_SECONDS = 30.0


def outage_seconds(args: Any) -> float:
    """How long a call retries an engine that went away, from slime's args: 0 without
    ``--use-fault-tolerance`` (nothing removes a dead engine then), else slime's
    ``--rollout-health-check-interval`` + ``--rollout-health-check-timeout`` (30 + 30 s by
    default at the pinned commit) + :data:`OUTAGE_SLACK_SECONDS`."""
    if not getattr(args, "use_fault_tolerance", False):
        return 0.0
    interval = getattr(args, "rollout_health_check_interval", None)
    timeout = getattr(args, "rollout_health_check_timeout", None)
    numbers = [
        v if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf else 30.0
        for v in (interval, timeout)
    ]
    return float(sum(numbers)) + OUTAGE_SLACK_SECONDS


def routing_key(session_id: str) -> str:
    """What engines and routers see of a session: a digest of its id, stable (a router keeps
    the session on one engine by it) and not the id, which cannot be recovered from it."""
    raw = session_id.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=16, person=b"acs-routing").hexdigest()


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
    attempts: int = 1  # /generate requests it took (retries after a failure included)
    #: ``meta_info.routed_experts`` as the engine sent it (base64 of int32), when asked for:
    #: kept out of ``meta`` (it is the largest part of the answer; gateway/routing.py decodes it)
    routed_experts: str | None = None

    @property
    def finish_type(self) -> str:
        return str(self.finish.get("type"))


@dataclass
class EngineClient:
    """Talks to one engine or router URL, or to several engines.

    :param url: base url, e.g. ``http://10.0.0.5:3000``; several engines' urls joined by commas
        are used without a router: each session goes to the engine its routing key picks, and to
        the next one while that engine refuses connections (see :data:`ENGINE_DOWN_SECONDS`).
    :param retries: extra attempts after the first on connection errors / 5xx.
    :param backoff: first retry delay in seconds, doubled per attempt.
    :param read_timeout: seconds to wait for a completion (long: generations are slow); a call
        that waited that long is not retried.
    :param outage_seconds: how long an engine that went away is retried (see the module's
        docstring; 0 = the ``retries`` of any failure).
    :param max_connections: connection pool size (0 = unlimited).
    :param vocab_size: ids at or above it are not the model's (0 = unchecked).
    :param api_key: sent as ``Authorization: Bearer`` on every call when the engine requires a
        key (SGLang ``--api-key``; bin/eval's server does), from ``TOOLKIT_ENGINE_API_KEY``;
        several engines may each have their own (bin/eval's: one key per engine, so a key one
        engine's port leaked opens no other): as many keys as urls, joined by commas, in order.
    """

    url: str
    retries: int = 3
    backoff: float = 0.5
    read_timeout: float = 900.0
    outage_seconds: float = 0.0
    max_connections: int = 0
    vocab_size: int = 0
    _session: aiohttp.ClientSession | None = None
    workers: list[str] = field(default_factory=list)  # engines behind a router ([] = bare engine)
    api_key: str = field(default_factory=lambda: os.environ.get(ENGINE_KEY_ENV, ""), repr=False)
    engines: list[str] = field(init=False)  # the urls given (one: an engine or a router)
    _down: dict[str, float] = field(init=False, default_factory=dict)  # engine -> passed over until
    _keys: dict[str, str] = field(init=False, default_factory=dict, repr=False)  # engine -> its own key

    def __post_init__(self) -> None:
        self.engines = [u.strip().rstrip("/") for u in self.url.split(",") if u.strip()]
        if len(self.engines) > 1:
            self.workers = list(self.engines)

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.read_timeout)
        keys = self.api_key.split(",")
        if len(keys) > 1 and len(keys) != len(self.engines):
            raise ValueError(f"{len(keys)} engine API keys for {len(self.engines)} engine urls (one each)")
        self._keys = dict(zip(self.engines, keys, strict=True)) if len(keys) > 1 else {}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key and not self._keys else None
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers)

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
        for url in self.engines:
            await self._health(url, attempts, delay)

    async def _health(self, url: str, attempts: int, delay: float) -> None:
        last = ""
        for attempt in range(attempts):
            try:
                async with self.session.get(
                    f"{url}/health", timeout=aiohttp.ClientTimeout(total=30), headers=self._auth(url)
                ) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except (TimeoutError, aiohttp.ClientError) as err:
                last = f"{type(err).__name__}: {err}"
            if attempt + 1 < attempts:
                await asyncio.sleep(delay)
        raise EngineError(f"engine {url} is not healthy: {last}", retryable=True)

    async def discover(self) -> None:
        """Learn the engines behind a router (``GET /workers``); a bare engine has none."""
        if len(self.engines) > 1:
            return  # several engines given: no router
        try:
            async with self.session.get(
                f"{self.url}/workers", timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                data = await resp.json(content_type=None) if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, ValueError):
            data = None
        workers = data.get("workers") if isinstance(data, dict) else None
        urls = [w.get("url") for w in workers or [] if isinstance(w, dict)]
        self.workers = [u.rstrip("/") for u in urls if isinstance(u, str) and u.startswith("http")]

    async def context_length(self) -> int | None:
        """The engines' context length: ``max_model_len`` of ``/v1/models`` (smallest over
        the workers when the url is a router, whose own list carries none); None if unknown."""
        found = await self._max_model_len(self.url) if len(self.engines) == 1 else None
        if found is not None:
            return found
        lengths = [n for n in [await self._max_model_len(w) for w in self.workers] if n is not None]
        return min(lengths) if lengths else None

    async def _max_model_len(self, url: str) -> int | None:
        try:
            async with self.session.get(
                f"{url}/v1/models", timeout=aiohttp.ClientTimeout(total=10), headers=self._auth(url)
            ) as resp:
                data = await resp.json(content_type=None)
            value = data["data"][0].get("max_model_len")
            return int(value) if value else None
        except (TimeoutError, aiohttp.ClientError, ValueError, LookupError, TypeError, AttributeError):
            return None

    async def generate(
        self,
        input_ids: list[int] | array[int],
        sampling_params: dict[str, Any],
        *,
        routing_key: str | None = None,
        routed_experts_start: int | None = None,
    ) -> EngineResult:
        """One ``/generate`` call with retries.

        :param routed_experts_start: ask for the routed experts of positions
            ``[routed_experts_start, len(prompt) + len(output) - 1)`` (SGLang's
            ``return_routed_experts`` and ``routed_experts_start_len``); None: do not ask.

        :raises EngineError: exhausted retries (or the outage window), a read timeout, a 4xx, an
            abort finish or a malformed answer.
        """
        headers = {"Content-Type": "application/json"}
        if routing_key:
            headers[ROUTING_HEADER] = routing_key
        last, attempt, others, gone_since = "", 0, 0, None
        while True:
            attempt += 1
            rid = new_id("")
            body = generate_body(rid, input_ids, sampling_params, routed_experts_start)
            url = self._engine_for(routing_key)
            gone, payload = False, None
            try:
                async with self.session.post(
                    f"{url}/generate", data=body, headers={**headers, **self._auth(url)}
                ) as resp:
                    if resp.status >= 500:
                        text = (await resp.text())[:200]
                        last = f"HTTP {resp.status}: {text}"
                        gone = resp.status in GONE_STATUSES or (
                            resp.status == 500 and text.startswith(GONE_500_PREFIXES)
                        )
                    elif resp.status != 200:  # SGLang: JSON {"error": ...}; a router's 422: plain text
                        text = await resp.text()
                        try:
                            detail = _error_message(json.loads(text))
                        except ValueError:
                            detail = text[:200]
                        raise EngineError(
                            f"engine rejected the request (HTTP {resp.status}): {detail}", retryable=False
                        )
                    else:
                        payload = _load_answer(await resp.read())
            except aiohttp.ConnectionTimeoutError as err:  # a TimeoutError too: no connection, no request
                last, gone = f"{type(err).__name__}: {err}", True
                self._pass_over(url)
            except TimeoutError:
                await self._abort(rid)
                raise EngineError(
                    f"engine {url} gave no answer within {self.read_timeout:g} s (ENGINE_TIMEOUT; "
                    "not retried)",
                    retryable=True,
                ) from None
            except asyncio.CancelledError:  # the session was aborted: free the engine's work too
                await asyncio.shield(self._abort(rid))
                raise
            except aiohttp.ClientResponseError as err:  # e.g. a non-JSON 200 body
                raise EngineError(f"malformed /generate answer: {err.message}", retryable=False) from None
            except aiohttp.ClientError as err:
                last = f"{type(err).__name__}: {err}"
                gone = isinstance(err, aiohttp.ClientConnectionError)
                if gone:
                    self._pass_over(url)
            except ValueError as err:
                raise EngineError(f"malformed /generate answer: {err}", retryable=False) from None
            if payload is not None:
                result = _result(payload, self.vocab_size)
                result.attempts = attempt
                return result
            outage = gone and self.outage_seconds > 0
            if outage and gone_since is None:
                gone_since = time.monotonic()
            others += not outage
            delay = self._retry_delay(attempt, others, gone_since if outage else None)
            if delay is None:
                break
            await asyncio.sleep(delay)
        raise EngineError(f"engine {self.url} failed after {attempt} attempts: {last}", retryable=True)

    def _retry_delay(self, attempt: int, others: int, gone_since: float | None) -> float | None:
        """Seconds before the next attempt, or None: give up. ``attempt`` failed (1-based);
        ``others`` of the attempts so far failed in another way than an engine that went away.
        Within an outage (``gone_since``: its first failure) the call is retried until
        ``outage_seconds`` have passed; other failures (and every failure without an outage
        window) are retried ``retries`` times, counted apart from an outage's."""
        if gone_since is not None:
            delay = min(self.backoff * 2 ** min(attempt - 1, 16), MAX_OUTAGE_BACKOFF)
            return delay if time.monotonic() - gone_since < self.outage_seconds else None
        return self.backoff * 2 ** (others - 1) if others <= self.retries else None

    def _pass_over(self, url: str) -> None:
        """Several engines: the next ones serve ``url``'s sessions for a while (it went away)."""
        if len(self.engines) > 1:
            self._down[url] = time.monotonic() + ENGINE_DOWN_SECONDS

    def _auth(self, url: str) -> dict[str, str]:
        """The Authorization header of ``url``'s own key (none: the session's one key, or none)."""
        key = self._keys.get(url) if self._keys else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _engine_for(self, key: str | None) -> str:
        """The engine a session's call goes to: the url given, or (several engines) the one its
        routing key picks, else the next that is not passed over."""
        if len(self.engines) == 1:
            return self.engines[0]
        count, now = len(self.engines), time.monotonic()
        start = int(key[:8], 16) if key else random.randrange(count)
        order = [self.engines[(start + i) % count] for i in range(count)]
        return next((url for url in order if self._down.get(url, 0.0) <= now), order[0])

    async def _abort(self, rid: str) -> None:
        """Free the engine's KV cache for a request we gave up on (best effort).

        A router does not route ``/abort_request`` (404), so behind one the abort goes to
        every engine; the rid is unique, so only the engine running it acts on it.
        """
        for url in self.workers or [self.url]:
            try:
                async with self.session.post(
                    f"{url}/abort_request", json={"rid": rid}, timeout=aiohttp.ClientTimeout(total=5),
                    headers=self._auth(url),
                ):
                    pass
            except (TimeoutError, aiohttp.ClientError):
                logger.debug("abort_request for %s at %s failed", rid, url)


def generate_body(
    rid: str,
    input_ids: list[int] | array[int],
    sampling_params: dict[str, Any],
    routed_experts_start: int | None = None,
) -> bytes:
    """The ``/generate`` request body (with ``return_routed_experts`` and
    ``routed_experts_start_len`` when ``routed_experts_start`` is given).

    Ids held as a 32-bit ``array`` are written by orjson straight from their buffer (a numpy
    view, no copy): a 10k-id prompt is written about 5x faster than through ``tolist()``,
    which also made 10k int objects per call. Params orjson refuses (see
    :func:`~.wire.dump_json`) go through the standard encoder with the ids as a list.
    """
    ids: Any = input_ids
    if isinstance(input_ids, array) and input_ids.typecode == "i" and input_ids.itemsize == 4:
        ids = np.frombuffer(input_ids, dtype=np.int32)
    routing: dict[str, Any] = {}
    if routed_experts_start is not None:
        routing = {"return_routed_experts": True, "routed_experts_start_len": routed_experts_start}
    body = {"rid": rid, "input_ids": ids, "return_logprob": True, "sampling_params": sampling_params}
    body.update(routing)
    try:
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:  # orjson.JSONEncodeError
        pass
    # outside the except clause: no later exception may chain a frame that holds the view
    # (an array exporting its buffer cannot be resized)
    del body, ids
    return dump_json(
        {
            "rid": rid,
            "input_ids": list(input_ids),
            "return_logprob": True,
            "sampling_params": sampling_params,
            **routing,
        }
    )


def _load_answer(raw: bytes) -> Any:
    """A ``/generate`` answer: orjson, or the standard parser for what orjson refuses (an
    engine may write NaN for a logprob; the checks in :func:`_result` then name it)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message"))
    return str(payload)[:200]


PER_TOKEN_META = (
    "output_token_logprobs",
    "input_token_logprobs",
    "output_top_logprobs",
    "input_top_logprobs",
)
LOGPROB_SLACK = 1e-4  # float rounding may put a certain token's logprob a hair above 0


def _result(payload: Any, vocab_size: int = 0) -> EngineResult:
    """Validate a ``/generate`` answer and return its ids, logprobs and finish reason.

    Values are checked, not only shapes: ids are integers (not 15.7, not true) inside the
    vocabulary, logprobs are finite and <= 0. A bad answer would otherwise be trained on.
    """
    try:
        raw_ids = payload["output_ids"]
        meta = payload["meta_info"]
        finish = dict(meta["finish_reason"] or {})
        entries = meta.get("output_token_logprobs") or []
        logprobs = _logprobs([e[0] for e in entries])
        lp_ids = [e[1] for e in entries]
        ids = _token_ids(list(raw_ids), vocab_size)
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
    # the per-token entries are in ids and logprobs now; kept, they are hundreds of small
    # lists per call in flight for the garbage collector to walk
    routed = meta.get("routed_experts")
    meta = {k: v for k, v in meta.items() if k not in PER_TOKEN_META and k != "routed_experts"}
    routed_text = routed if isinstance(routed, str) else None
    return EngineResult(ids, logprobs, finish, meta, routed_experts=routed_text)


def _token_ids(values: list[Any], vocab_size: int) -> list[int]:
    bad = next((v for v in values if type(v) is not int), None)  # noqa: E721 - bool, float are not ids
    if bad is not None:
        raise ValueError(f"output id {bad!r} is not an integer")
    if values and (min(values) < 0 or (vocab_size and max(values) >= vocab_size)):
        bad = next(v for v in values if v < 0 or (vocab_size and v >= vocab_size))
        raise ValueError(f"output id {bad} is outside the vocabulary (0..{vocab_size - 1})")
    return values


def _logprobs(values: list[Any]) -> list[float]:
    bad = next((v for v in values if type(v) is not float and type(v) is not int), None)  # noqa: E721
    if bad is not None:
        raise ValueError(f"logprob {bad!r} is not a number")
    logprobs = [float(v) for v in values]
    if logprobs and (not math.isfinite(sum(logprobs)) or max(logprobs) > LOGPROB_SLACK):
        worst = next((v for v in logprobs if not math.isfinite(v) or v > LOGPROB_SLACK), None)
        if worst is not None:  # else only their sum overflowed
            raise ValueError(f"logprob {worst!r} is not a finite number <= 0")
    return logprobs


def settle_finish(
    result: EngineResult, stop_ids: list[int], stop_strings: list[str], decode: Any
) -> EngineResult:
    """The finish reason the completion really has, the same on SGLang 0.5.13 and 0.5.23.

    SGLang 0.5.13 checks ``len(output_ids) >= max_new_tokens`` before stop tokens and stop
    strings (``managers/schedule_batch.py:1314-1335``), so when the token that ends the turn
    is also the ``max_new_tokens``-th one it reports ``{"type": "length"}`` (0.5.23 checks
    stops first and reports ``stop``). Such a completion is complete, not truncated: a
    ``length`` whose last id is a stop token becomes ``{"type": "stop", "matched": <id>}``,
    and one whose text (``decode(ids)``) contains a requested stop string becomes
    ``{"type": "stop", "matched": <string>}``. The ids and logprobs are unchanged; the
    engine's own answer stays in ``meta["finish_reason"]``.
    """
    if result.finish_type != "length" or not result.output_ids:
        return result
    finish: dict[str, Any] | None = None
    if result.output_ids[-1] in stop_ids:
        finish = {"type": "stop", "matched": result.output_ids[-1]}
    elif stop_strings:
        text = decode(result.output_ids)
        hit = next((s for s in stop_strings if s in text), None)
        if hit is not None:
            finish = {"type": "stop", "matched": hit}
    if finish is None:
        return result
    return dataclasses.replace(result, finish=finish)
