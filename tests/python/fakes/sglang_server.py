"""A scripted server that speaks SGLang's native HTTP protocol (``/generate`` and friends).

Stand-in for an SGLang engine (or the sgl-router in front of engines), faithful to
../shared/reference/gateway-contract.md §5 (SGLang 0.5.23):

- ``POST /generate``: exactly one of ``input_ids`` / ``text``; ``sampling_params``;
  ``return_logprob``; ``rid``. The *policy* decides what the model "samples"; the server
  then applies SGLang's own rules on top: ``max_new_tokens`` (default 128) cuts the output
  with ``{"type": "length", "length": n}``; a matched stop token stays the last element of
  ``output_ids``; ``meta_info.output_token_logprobs`` holds one ``[logprob, id, null]`` per
  output id (stop token included); ``completion_tokens == len(output_ids)``.
- Errors as SGLang sends them: 400 ``{"error": {"message": ...}}`` for a prompt longer than
  the context, prompt + ``max_new_tokens`` over the context, a duplicate in-flight rid, or
  a body without exactly one of ``input_ids``/``text``. Scriptable faults: the first N calls
  answer 503, the first N calls abort (200 + ``{"type": "abort"}``, partial output), a delay.
- ``GET /health``, ``/health_generate``, ``/ready`` (200, empty), ``GET /model_info``,
  ``GET /v1/models`` (with ``max_model_len``), ``POST /abort_request``.

It runs an aiohttp app on 127.0.0.1 (port 0) in its own thread with its own event loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default when the request does not say


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


class FakeSGLang:
    """The scripted SGLang server. Use as a context manager or call start()/stop().

    :param policy: ``(input_ids, sampling_params) -> Completion``.
    :param fail_first: answer the first N ``/generate`` calls with 503.
    :param abort_first: answer the first N ``/generate`` calls with 200 + abort finish.
    :param delay: seconds to sleep before answering each ``/generate`` (or a function
        returning them, e.g. random generation times).
    :param context_length: the model's context length (400 errors past it).
    :param model_name: the served model name (``/v1/models``, ``/model_info``).
    :param tokenizer: optional; when given, responses carry a decoded ``text``.
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
    ) -> None:
        self.policy = policy
        self.fail_first = fail_first
        self.abort_first = abort_first
        self.delay = delay
        self.context_length = context_length
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.aborted_rids: list[str] = []
        self.generate_calls = 0
        self._in_flight: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> str:
        """Serve on 127.0.0.1:<free port> in a background thread; returns the base url."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._serve())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-sglang", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake SGLang server did not start within 10 s")
        return self.url

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        for path in ("/health", "/health_generate", "/ready"):
            app.router.add_get(path, self._health)
        app.router.add_get("/model_info", self._model_info)
        app.router.add_get("/get_model_info", self._model_info)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/abort_request", self._abort_request)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        if self._loop is None:
            return
        loop, self._loop = self._loop, None
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()

    def __enter__(self) -> FakeSGLang:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- handlers
    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.model_name,
                "served_model_name": self.model_name,
                "tokenizer_path": self.model_name,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
            }
        )

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
            return web.json_response(self._complete(body, rid, aborted=call <= self.abort_first))
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
        """SGLang's per-token check order: stop strings, stop token ids, then length.

        Returns (number of ids to keep, finish_reason) when a rule ends the output
        before the policy's own end; the matched stop token/string stays in the ids.
        """
        stops = params.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        stop_ids = set() if params.get("ignore_eos") else set(params.get("stop_token_ids") or [])
        for i, token in enumerate(ids):
            if stops and self.tokenizer is not None:
                text = self.tokenizer.decode(ids[: i + 1], skip_special_tokens=False)
                hit = next((s for s in stops if s in text), None)
                if hit is not None:
                    return i + 1, {"type": "stop", "matched": hit}
            if token in stop_ids and i + 1 < len(ids):
                return i + 1, {"type": "stop", "matched": token}
            if i + 1 >= max_new and i + 1 < len(ids):
                return max_new, {"type": "length", "length": max_new}
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
            finish = {"type": "abort", "message": "Abort", "status_code": None}
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "weight_version": "default",
            "e2e_latency": 0.001,
        }
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, ids, strict=True)]
            meta["output_token_logprobs_length"] = len(ids)
        text = ""
        if self.tokenizer is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        assert all(math.isfinite(x) and x <= 0 for x in logprobs), "logprobs must be finite and <= 0"
        return {"text": text, "output_ids": ids, "meta_info": meta}
