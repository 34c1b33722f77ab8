"""A scripted server that speaks SGLang's native HTTP protocol (``/generate`` and friends).

Stand-in for an SGLang engine, faithful to SGLang **0.5.13** (the version the toolkit's
installer pins; read in the 0.5.13 wheel, paths under ``sglang/srt/``) and, with
``sglang_version="0.5.23"``, to 0.5.23 where the two differ (the version
../shared/reference/gateway-contract.md §5 was read in). :class:`FakeRouter` stands in for
slime's sglang-router 0.3.2 in front of such engines.

- ``POST /generate``: exactly one of ``input_ids`` / ``text``; ``sampling_params``;
  ``return_logprob``; ``rid``. The *policy* decides what the model "samples"; the server
  then applies SGLang's finish rules to every sampled token, in the version's order:
  0.5.13 checks ``max_new_tokens`` (default 128) first, then stop token ids, then stop
  strings (``managers/schedule_batch.py:1314-1335`` ``update_finish_state``), so a stop
  token sampled as the ``max_new_tokens``-th token finishes ``{"type": "length"}`` with the
  stop token still the last output id; 0.5.23 checks stop strings, then stop token ids,
  then the length cap (so the same output finishes ``stop``). A matched stop token stays the
  last element of ``output_ids`` (``output_ids_through_stop``, ``schedule_batch.py:1005-1009``);
  a stop string keeps the ids through the token that completes it.
  ``meta_info.output_token_logprobs`` holds one ``[logprob, id, null]`` per output id (stop
  token included); ``completion_tokens == len(output_ids)``; meta keys as 0.5.13's
  ``tokenizer_manager.py:1827-1873`` (id, finish_reason, prompt_tokens, weight_version,
  num_retractions, reasoning_tokens, completion_tokens, cached_tokens, e2e_latency).
- Errors as SGLang sends them: 400 ``{"error": {"message": ...}}`` for a prompt longer than
  the context, prompt + ``max_new_tokens`` over the context, a duplicate in-flight rid, or
  a body without exactly one of ``input_ids``/``text``. Scriptable faults: the first N calls
  answer 503, the first N calls abort (200 + ``{"type": "abort"}``, partial output), a delay.
- Routed experts (an MoE engine started with ``--enable-return-routed-experts``: pass
  ``routed_experts=MoeShape(...)``), as SGLang 0.5.13 and 0.5.15.post1 return them: a request
  with ``return_routed_experts`` gets ``meta_info["routed_experts"]``, base64 of the int32
  rows of positions ``[min(routed_experts_start_len, seqlen - 1), seqlen - 1)`` of prompt +
  output (``state_capturer/base.py`` ``get_topk``, ``detokenizer_manager.py``
  ``_b64_encode_per_request``); a start below 0 or past the prompt is a 400 (the scheduler's
  ``set_finish_with_abort``); an engine without the flag returns none. The rows are
  :func:`routed_rows`, a function of each position's context, as a real model's routing is.
- ``GET /health``, ``/health_generate`` (200, empty), ``GET /model_info`` and
  ``/get_model_info`` (0.5.13 keys), ``GET /v1/models`` (with ``max_model_len``),
  ``POST /abort_request``; ``GET /ready`` only as 0.5.23 (0.5.13 has no such route).

It runs an aiohttp app on 127.0.0.1 (port 0) in its own thread with its own event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from fakes.http import ThreadedAiohttpServer

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default when the request does not say
SGLANG_VERSIONS = ("0.5.13", "0.5.23")


@dataclass
class Completion:
    """What the policy "sampled" for one request.

    :param output_ids: the sampled ids; a sampled stop token is the last element.
    :param finish: SGLang ``finish_reason``: ``{"type": "stop", "matched": <id or str>}``,
        ``{"type": "length", "length": n}`` or ``{"type": "abort", "message": ...}``.
    :param logprobs: one per output id; ``None`` = deterministic values derived from the ids.
    """

    output_ids: list[int]
    finish: dict[str, Any]
    logprobs: list[float] | None = None


Policy = Callable[[list[int], dict[str, Any]], Completion]


@dataclass(frozen=True)
class MoeShape:
    """An MoE model's routing shape: ``layers`` (HF ``num_hidden_layers``), ``topk``
    (``num_experts_per_tok``) and ``experts`` (routed experts per layer)."""

    layers: int = 4
    topk: int = 2
    experts: int = 8


def routed_rows(tokens: list[int], start: int, end: int, shape: MoeShape) -> np.ndarray:
    """The experts the scripted model routes the tokens of positions ``[start, end)`` to:
    ``(end - start, layers, topk)`` int32, ``topk`` distinct ids per layer, each row a function
    of its token, the token before it and its position (a real model's routing depends on the
    context; this one on enough of it that a token's row changes with its neighbour)."""
    ids = np.asarray(tokens, dtype=np.int64)
    positions = np.arange(start, end, dtype=np.int64)
    before = np.where(positions > 0, ids[np.maximum(positions - 1, 0)], -1)
    base = (ids[start:end] * 2654435761 + before * 40503 + positions * 97) % 1_000_003
    layers = np.arange(shape.layers, dtype=np.int64)[None, :, None]
    picks = np.arange(shape.topk, dtype=np.int64)[None, None, :]
    return ((base[:, None, None] + layers * 5 + picks) % shape.experts).astype(np.int32)


def fake_logprob(token_id: int, position: int) -> float:
    """A deterministic logprob (< 0) for ``token_id`` sampled at ``position``."""
    return -((token_id * 2654435761 + position * 40503) % 9973 + 1) / 10000.0


def text_policy(tokenizer: Any, respond: Callable[[str], str]) -> Policy:
    """A policy that answers with text chosen by ``respond(prompt_text)``.

    The prompt ids are decoded (special tokens kept), ``respond`` returns the assistant
    text, which is encoded without special tokens additions (special tokens written in
    the text, such as ``<tool_call>``, become their ids) and followed by ``<|im_end|>`` as
    the sampled stop token (finish ``stop``, ``matched`` = its id). When the reply does not
    fit ``max_new_tokens`` it is cut there with finish ``length`` and no stop token, like
    SGLang.

    :param tokenizer: a HF tokenizer (e.g. from ``fakes.toy_tokenizer``).
    :param respond: prompt text -> assistant text.
    """
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def policy(input_ids: list[int], sampling_params: dict[str, Any]) -> Completion:
        prompt = tokenizer.decode(input_ids, skip_special_tokens=False)
        ids = [*tokenizer.encode(respond(prompt), add_special_tokens=False), stop_id]
        limit = int(sampling_params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        if len(ids) > limit:
            return Completion(ids[:limit], {"type": "length", "length": limit})
        return Completion(ids, {"type": "stop", "matched": stop_id})

    return policy


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


class FakeSGLang(ThreadedAiohttpServer):
    """The scripted SGLang server. Use as a context manager or call start()/stop().

    :param policy: ``(input_ids, sampling_params) -> Completion``.
    :param fail_first: answer the first N ``/generate`` calls with 503.
    :param abort_first: answer the first N ``/generate`` calls with 200 + abort finish.
    :param delay: seconds to sleep before answering each ``/generate`` (or a function
        returning them, e.g. random generation times).
    :param context_length: the model's context length (400 errors past it).
    :param model_name: the served model name (``/v1/models``, ``/model_info``).
    :param tokenizer: optional; when given, responses carry a decoded ``text`` (and stop
        strings are matched).
    :param sglang_version: ``0.5.13`` (default, the pinned version) or ``0.5.23``: the
        order of the finish checks and the side routes follow that version.
    :param corrupt: a fault mode: edits every ``/generate`` answer in place before it is sent
        (a broken engine or router: float or out-of-vocabulary ids, NaN or positive logprobs).
    :param keep_requests: keep every request body and its headers in ``requests`` and
        ``headers`` for tests to read; a benchmark turns it off (thousands of 10k-id bodies
        kept would make the stand-in's own garbage collections the bottleneck).
    :param routed_experts: an MoE model's shape: the engine was started with
        ``--enable-return-routed-experts`` (None: it was not; a request asking gets none).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        fail_first: int = 0,
        abort_first: int = 0,
        delay: float | Callable[[], float] = 0.0,
        context_length: int = 32768,
        model_name: str = "toy-qwen2.5",
        tokenizer: Any = None,
        sglang_version: str = "0.5.13",
        corrupt: Callable[[dict[str, Any]], None] | None = None,
        keep_requests: bool = True,
        routed_experts: MoeShape | None = None,
    ) -> None:
        self.routed_experts = routed_experts
        if sglang_version not in SGLANG_VERSIONS:
            raise ValueError(f"sglang_version {sglang_version!r} is not one of {SGLANG_VERSIONS}")
        self.sglang_version = sglang_version
        self.corrupt = corrupt
        self.policy = policy
        self.fail_first = fail_first
        self.abort_first = abort_first
        self.delay = delay
        self.context_length = context_length
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.keep_requests = keep_requests
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.aborted_rids: list[str] = []
        self.generate_calls = 0
        self._in_flight: set[str] = set()
        super().__init__(self._app_routes(), name="fake-sglang")

    def _app_routes(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        paths = ["/health", "/health_generate"] + (["/ready"] if self.sglang_version != "0.5.13" else [])
        for path in paths:
            app.router.add_get(path, self._health)
        app.router.add_get("/model_info", self._model_info)
        app.router.add_get("/get_model_info", self._model_info)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/abort_request", self._abort_request)
        return app

    # ----------------------------------------------------------------- handlers
    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _model_info(self, request: web.Request) -> web.Response:
        info: dict[str, Any] = {
            "model_path": self.model_name,
            "tokenizer_path": self.model_name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
        }
        if self.sglang_version != "0.5.13":  # 0.5.23 also names the served model (and more)
            info["served_model_name"] = self.model_name
        return web.json_response(info)

    async def _models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.context_length,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def _abort_request(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.aborted_rids.append(str(body.get("rid", "")))
        return web.Response(status=200)

    async def _generate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "request body is not JSON")
        if self.keep_requests:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        self.generate_calls += 1
        call = self.generate_calls
        delay = self.delay() if callable(self.delay) else self.delay
        if delay:
            await asyncio.sleep(delay)
        if call <= self.fail_first:
            return _error(503, "Service Unavailable (scripted)")
        problem = self._validate(body)
        if problem:
            return _error(400, problem)
        rid = str(body.get("rid") or f"rid-{call}")
        if rid in self._in_flight:
            return _error(400, f"Duplicate request ID detected: {rid}")
        self._in_flight.add(rid)
        try:
            answer = self._complete(body, rid, aborted=call <= self.abort_first)
            if self.corrupt is not None:
                self.corrupt(answer)
            return web.json_response(answer)
        finally:
            self._in_flight.discard(rid)

    def _validate(self, body: dict[str, Any]) -> str | None:
        if ("input_ids" in body) == ("text" in body):
            return "Either text or input_ids should be provided (exactly one)."
        if "input_ids" not in body:
            return "this fake engine only serves input_ids requests (the gateway never sends text)"
        n_in = len(body["input_ids"])
        if n_in >= self.context_length:
            return (
                f"The input ({n_in} tokens) is longer than the model's context length "
                f"({self.context_length} tokens)."
            )
        start = body.get("routed_experts_start_len", 0)
        if body.get("return_routed_experts") and not 0 <= start <= n_in:  # scheduler.py:2109-2128
            return f"routed_experts_start_len={start} is outside 0..{n_in} (the input's tokens)"
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        if n_in + max_new > self.context_length:
            return (
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.context_length} tokens. You requested a total of {n_in + max_new} tokens: "
                f"{n_in} tokens from the input messages and {max_new} tokens for the completion."
            )
        return None

    def _first_stop(
        self, ids: list[int], params: dict[str, Any], max_new: int
    ) -> tuple[int, dict[str, Any]] | None:
        """SGLang's per-token finish checks, in the order of ``sglang_version``.

        Returns (number of ids to keep, finish_reason) for the first token a rule fires
        on (the matched stop token/string stays in the ids), or None when no rule fires
        (the policy's own finish stands, e.g. a model EOS not listed in the request).
        """
        stops = params.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        stop_ids = set() if params.get("ignore_eos") else set(params.get("stop_token_ids") or [])

        def length(n: int) -> dict[str, Any] | None:
            return {"type": "length", "length": max_new} if n >= max_new else None

        def token(t: int) -> dict[str, Any] | None:
            return {"type": "stop", "matched": t} if t in stop_ids else None

        def string(n: int) -> dict[str, Any] | None:
            if not stops or self.tokenizer is None:
                return None
            text = self.tokenizer.decode(ids[:n], skip_special_tokens=False)
            hit = next((s for s in stops if s in text), None)
            return {"type": "stop", "matched": hit} if hit is not None else None

        if self.sglang_version == "0.5.13":  # schedule_batch.py:1314-1335
            order = ("length", "token", "string")
        else:  # 0.5.23 schedule_batch.py:2026-2043
            order = ("string", "token", "length")
        for i, t in enumerate(ids):
            n = i + 1
            for rule in order:
                finish = length(n) if rule == "length" else token(t) if rule == "token" else string(n)
                if finish is not None:
                    return n, finish
        return None

    def _complete(self, body: dict[str, Any], rid: str, *, aborted: bool) -> dict[str, Any]:
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        completion = self.policy(list(body["input_ids"]), dict(params))
        ids = list(completion.output_ids)
        logprobs = completion.logprobs or [fake_logprob(t, i) for i, t in enumerate(ids)]
        finish = dict(completion.finish)
        cut = self._first_stop(ids, params, max_new)
        if cut is not None:
            end, finish = cut
            ids, logprobs = ids[:end], logprobs[:end]
        if aborted:
            ids, logprobs = ids[: len(ids) // 2], logprobs[: len(ids) // 2]
            finish = {"type": "abort", "message": "Abort", "status_code": None, "err_type": None}
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "reasoning_tokens": 0,
            "num_retractions": 0,
            "weight_version": "default",
            "e2e_latency": 0.001,
        }
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, ids, strict=True)]
            meta["output_token_logprobs_length"] = len(ids)
        if body.get("return_routed_experts") and self.routed_experts is not None:
            sequence = [*body["input_ids"], *ids]
            start = min(int(body.get("routed_experts_start_len", 0)), len(sequence) - 1)
            rows = routed_rows(sequence, start, len(sequence) - 1, self.routed_experts)
            meta["routed_experts"] = base64.b64encode(rows.tobytes()).decode("utf-8")
        text = ""
        if self.tokenizer is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        assert all(math.isfinite(x) and x <= 0 for x in logprobs), "logprobs must be finite and <= 0"
        return {"text": text, "output_ids": ids, "meta_info": meta}


class FakeRouter(ThreadedAiohttpServer):
    """slime's sglang-router 0.3.2 in front of fake engines, as observed on loopback.

    Behaviour taken from running the PyPI ``sglang-router==0.3.2`` wheel against
    :class:`FakeSGLang` workers (slime installs a 0.3.2 build of its own; same routes):

    - ``POST /generate`` is proxied to one worker: with a ``X-SMG-Routing-Key`` header
      (policy ``manual``) the key sticks to the worker it was first given, otherwise round
      robin. The header is forwarded to the worker. ``sampling_params`` reach the worker
      without ``spaces_between_special_tokens`` (the router's typed request drops it).
      Integer fields sent as JSON floats (``"top_k": 20.0``, ``"max_new_tokens": 2.0``) are
      rejected with 422 ``Failed to deserialize the JSON body ...`` (typed i32/u32).
    - ``GET /health`` answers 200 ``OK`` (router liveness, workers not probed);
      ``/health_generate``, ``/liveness``, ``/readiness`` answer 200.
    - ``GET /v1/models`` is answered by the router itself, **without** ``max_model_len``:
      ``{"object": "list", "data": [{"id": "unknown", "object": "model", "owned_by": "local"}]}``.
    - ``GET /workers`` lists the workers (``{"workers": [{"url": ..., ...}]}``);
      ``GET /get_model_info`` is proxied to the first worker; ``/model_info`` and
      ``POST /abort_request`` are 404 (the router does not route them).
    - A worker that cannot be reached (it died) answers 500 ``Request failed: ...`` (sglang-router's
      ``send_typed_request``); :meth:`remove_worker` (what slime's
      health monitor does to a dead engine: ``DELETE /workers/{id}``) takes it out, and a key
      stuck to it moves to a worker left (the manual policy reassigns an unhealthy worker's keys).
    """

    def __init__(self, workers: list[FakeSGLang]) -> None:
        self.workers = workers
        self.sticky: dict[str, int] = {}
        self.routed: list[tuple[str | None, int]] = []  # (routing key, worker index) per /generate
        self.removed: set[int] = set()
        self._next = 0
        super().__init__(self._app_routes(), name="fake-sglang-router")

    def _app_routes(self) -> web.Application:
        """The router's routes (start the workers before the router; stop leaves them running)."""
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_get("/health", lambda r: web.Response(text="OK"))
        for path in ("/health_generate", "/liveness", "/readiness"):
            app.router.add_get(path, lambda r: web.Response(text="OK"))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/workers", self._workers)
        app.router.add_delete("/workers/{id}", self._remove)
        app.router.add_get("/get_model_info", self._model_info)
        return app

    def remove_worker(self, index: int) -> None:
        """Take worker ``index`` out of the rotation (slime removes a dead engine so)."""
        self.removed.add(index)

    def _pick(self, key: str | None) -> int:
        live = [i for i in range(len(self.workers)) if i not in self.removed]
        if key:
            if key not in self.sticky or self.sticky[key] in self.removed:
                self.sticky[key] = live[len(self.sticky) % len(live)]
            return self.sticky[key]
        self._next = (self._next + 1) % len(live)
        return live[self._next]

    async def _generate(self, request: web.Request) -> web.Response:
        import aiohttp

        body = await request.json()
        params = body.get("sampling_params")
        if isinstance(params, dict):
            params.pop("spaces_between_special_tokens", None)
            for key in ("top_k", "max_new_tokens", "min_new_tokens"):
                if isinstance(params.get(key), float):
                    message = (
                        "Failed to deserialize the JSON body into the target type: "
                        f"sampling_params.{key}: invalid type: floating point `{params[key]}`"
                    )
                    return web.Response(status=422, text=message)
        key = request.headers.get("X-SMG-Routing-Key")
        index = self._pick(key)
        self.routed.append((key, index))
        headers = {"X-SMG-Routing-Key": key} if key else {}
        url = f"{self.workers[index].url}/generate"
        try:
            async with aiohttp.ClientSession() as client:
                resp = await client.post(url, json=body, headers=headers)
                answer = await resp.read()
                return web.Response(body=answer, status=resp.status, content_type="application/json")
        except aiohttp.ClientConnectionError as err:  # the worker died: the router's own 500
            return web.Response(status=500, text=f"Request failed: {err}")

    async def _remove(self, request: web.Request) -> web.Response:
        """``DELETE /workers/w<i>``: what slime's health monitor sends for a dead engine."""
        self.remove_worker(int(request.match_info["id"].lstrip("w")))
        return web.Response(status=202)

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": "unknown", "object": "model", "owned_by": "local"}
        return web.json_response({"object": "list", "data": [card]})

    async def _workers(self, request: web.Request) -> web.Response:
        workers = [
            {"id": f"w{i}", "url": w.url, "model_id": "unknown", "worker_type": "regular", "is_healthy": True}
            for i, w in enumerate(self.workers)
        ]
        return web.json_response({"workers": workers})

    async def _model_info(self, request: web.Request) -> web.Response:
        import aiohttp

        url = f"{self.workers[0].url}/get_model_info"
        async with aiohttp.ClientSession() as client, client.get(url) as resp:
            return web.Response(body=await resp.read(), status=resp.status, content_type="application/json")
