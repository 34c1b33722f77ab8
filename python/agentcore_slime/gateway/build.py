"""Building a call: the body parsed into chat form, its prompt ids (bridged or rendered in a
render lane), its sampling params; and, once the engine answered, the reply in its protocol.

Two render lanes (thread pools): bodies over :data:`LARGE_BODY_BYTES` are parsed and rendered
in the large one, everything else in the small one, so a queue of huge prompts never delays
another session's call. A body of ordinary size and a cumulative bridge cost less than the
hand-off to a thread, so they are built on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from .config import GatewayConfig
from .conversation import Prompt, RenderError, normalize_messages, tools_key
from .family import choose_renderer, generation_stop_ids, load_tokenizer
from .limits import TokenFloor, fits
from .protocols.base import Body, Completion, Protocol
from .record import join
from .render_pool import OFFLOAD_CHARS, RendererSpec, RenderPool, RenderTimeout, text_size
from .rendering import PromptBuilder
from .sessions import Call, Session
from .side_calls import side_call
from .store import shared_messages
from .wire import BadRequest, ChatRequest

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

RENDER_THREADS = 4  # the small lane: renders of bodies up to LARGE_BODY_BYTES, trace encoding
LARGE_RENDER_THREADS = 2  # the large lane: a queue of huge prompts never delays the small ones
LARGE_BODY_BYTES = 64 * 1024  # a body over it (~16k tokens of text) is built in the large lane
INLINE_BODY_BYTES = 256 * 1024  # larger chat bodies are parsed in a render thread, not on the loop
INLINE_NEW_BYTES = 16 * 1024  # a body this much larger than the last one is bridged in a thread too


def guarded(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``; a recursion error (input nested beyond what the parsers take) is the request's fault."""
    try:
        return fn(*args)
    except RecursionError:
        raise BadRequest("the request is nested too deeply") from None


def load_prompts(config: GatewayConfig) -> tuple[PromptBuilder, RenderPool]:
    """The model's tokenizer and renderer (warmed up), and the render process spec'd like them.

    :raises ValueError: no model directory, or a renderer that cannot render a one-message chat.
    """
    model_dir = config.model_dir
    if not Path(model_dir).is_dir():
        raise ValueError(f"model dir {model_dir!r} does not exist (set MODEL_DIR / --hf-checkpoint)")
    tokenizer = load_tokenizer(model_dir)
    renderer, choice = choose_renderer(
        model_dir,
        tokenizer,
        config.renderer_family,
        tool_call_parser=config.tool_call_parser,
        reasoning_parser=config.reasoning_parser,
    )
    logger.info("renderer family %s (%s)", choice.family, choice.reason)
    render_pool = RenderPool(  # the parsers as chosen (auto resolved from the model)
        RendererSpec(model_dir, choice.family, choice.tool_call_parser, choice.reasoning_parser)
    )
    prompts = PromptBuilder(
        renderer, tokenizer, choice.family, generation_stop_ids(model_dir), bridge=config.cumulative_bridge,
        tool_call_parser=choice.tool_call_parser,
    )
    try:  # compiles the chat template now rather than in the first agent call
        prompts.render([{"role": "user", "content": "warm-up"}], None)
    except RenderError as err:
        raise ValueError(
            f"the renderer cannot render a one-message chat: {err} (check RENDERER_FAMILY)"
        ) from None
    return prompts, render_pool


def vocab_size(prompts: PromptBuilder, model_dir: str) -> int:
    """Ids the model can sample: the tokenizer's, or the model's padded vocab when larger."""
    size = len(prompts.tokenizer)
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        size = max(size, int(config.get("vocab_size") or 0))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return size


class CallBuilder:
    """Builds the calls of every session: prompt ids, sampling params, the reply's body.

    :param config: the gateway's settings.
    :param prompts: the model's prompt builder (:func:`load_prompts`).
    :param render_pool: renders long conversations in another process (see render_pool).
    """

    def __init__(self, config: GatewayConfig, prompts: PromptBuilder, render_pool: RenderPool) -> None:
        self.config = config
        self.prompts = prompts
        self.render_pool = render_pool
        self.context_length: int | None = config.context_length  # the engine's, once asked
        self.floor = TokenFloor(prompts.tokenizer)
        self.pool = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="agentcore-gateway-render")
        self.large_pool = ThreadPoolExecutor(
            LARGE_RENDER_THREADS, thread_name_prefix="agentcore-gateway-large"
        )

    def shutdown(self) -> None:
        for pool in (self.pool, self.large_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        self.render_pool.shutdown()

    # ------------------------------------------------------------------ lanes
    async def off_loop(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run CPU work (trace encoding, a deep walk) in the small lane: the loop keeps serving."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, guarded, fn, *args)

    async def build_off_loop(
        self, call_deadline: float, large: bool, fn: Callable[..., _T], *args: Any
    ) -> _T:
        """Build a prompt in a render lane, waiting at most until ``call_deadline``.

        :raises RenderTimeout: not built in time; a build not yet started is dropped, one in
            progress finishes in its thread and is discarded (the session is left as it was).
        """
        pool = self.large_pool if large else self.pool
        future = asyncio.get_running_loop().run_in_executor(pool, guarded, fn, *args)
        try:
            return await asyncio.wait_for(future, max(0.0, call_deadline - time.monotonic()))
        except TimeoutError:
            raise RenderTimeout(
                f"the prompt was not built within {self.config.render_timeout:g} s (the gateway is "
                "busy rendering other long prompts, or this one is too long: shorten it or retry later)"
            ) from None

    # ------------------------------------------------------------------ calls
    async def prepare(self, raw: bytes, session: Session, protocol: Protocol) -> Call:
        """Parse and validate the body, build the prompt ids and the sampling params.

        A body of ordinary size and a cumulative bridge cost less than handing them to a
        thread (a wake-up, the GIL handed over and back), so they run on the event loop; a
        full render, and every step of a body over :data:`INLINE_BODY_BYTES`, run in the
        render threads, and so does a bridge over a body that grew by more than
        :data:`INLINE_NEW_BYTES` (a long tool result to tokenize).
        """
        grown = len(raw) - session.body_bytes
        session.body_bytes = len(raw)
        deadline = time.monotonic() + self.config.render_timeout
        large = len(raw) > LARGE_BODY_BYTES  # big bodies, and renders of them, take the large lane
        if len(raw) > INLINE_BODY_BYTES or grown > INLINE_NEW_BYTES:
            return await self.build_off_loop(
                deadline, large, self._prepare_all, raw, session, protocol, deadline
            )
        call = guarded(self._parse_call, raw, session, protocol, deadline)
        if call.prompt is None:
            call.prompt = await self.build_off_loop(deadline, large, self._render_call, call)
        join(session, call)
        call.params = self.sampling(session, call.request, len(call.prompt.ids))
        return call

    def _prepare_all(self, raw: bytes, session: Session, protocol: Protocol, deadline: float) -> Call:
        call = self._parse_call(raw, session, protocol, deadline)
        if call.prompt is None:
            call.prompt = self._render_call(call)
        join(session, call)
        call.params = self.sampling(session, call.request, len(call.prompt.ids))
        return call

    async def count(self, raw: bytes, protocol: Protocol) -> int:
        """The prompt length of a body rendered in full (count_tokens: nothing else is built).

        :raises RenderTimeout: not rendered within the render bound.
        """
        deadline = time.monotonic() + self.config.render_timeout
        large = len(raw) > LARGE_BODY_BYTES
        return await self.build_off_loop(deadline, large, self._count_all, raw, protocol, deadline)

    def _count_all(self, raw: bytes, protocol: Protocol, deadline: float) -> int:
        chat = protocol.parse(raw)
        messages = normalize_messages(chat.messages)
        large = len(raw) > LARGE_BODY_BYTES
        call = Call(protocol, chat, messages, tools_key(chat.tools), time.perf_counter(), deadline, large)
        if call.large:
            self._check_floor(messages)
        return len(self._render_call(call).ids)

    def _parse_call(self, raw: bytes, session: Session, protocol: Protocol, deadline: float) -> Call:
        """The request, its messages normalized, and the prompt when a bridge builds it.

        :raises BadRequest: ``context_length_exceeded`` when the messages' text alone is more
            tokens than the context holds (checked before any tokenizing, for large bodies).
        """
        started = time.perf_counter()
        chat = protocol.parse(raw)
        messages = self._messages(chat, session)
        large = len(raw) > LARGE_BODY_BYTES
        call = Call(protocol, chat, messages, tools_key(chat.tools), started, deadline, large)
        if call.large:
            self._check_floor(messages)
        # issue 45: a side call (a title, a classifier) is rendered in full and leaves the chain as it was
        call.side_call = side_call(chat, messages, session.chain)
        if call.side_call:
            return call
        call.repeat = session.last_request == (call.messages, call.tools_key)
        base = session.chain_before if call.repeat else session.chain
        if self.config.cumulative_token_mode and base is not None:
            call.prompt, call.chain_break = self.prompts.bridge(messages, chat.tools, base)
        return call

    def _check_floor(self, messages: list[dict[str, Any]]) -> None:
        """Refuse a prompt whose text alone cannot fit the context (see limits.TokenFloor)."""
        if self.context_length is None:
            return
        floor = self.floor.floor(messages)
        if not fits(floor, self.context_length):
            raise BadRequest(
                f"the prompt has at least {floor} tokens (its messages' text alone); the model's context "
                f"length is {self.context_length} (shorten the conversation)",
                param="messages",
                code="context_length_exceeded",
            )

    @staticmethod
    def _messages(chat: ChatRequest, session: Session) -> list[dict[str, Any]]:
        """The request's messages normalized. Those equal to the last call's become the objects
        the session holds already, raw and normalized: the request's copies are freed now,
        not after the engine answered (hundreds of calls in flight kept tens of thousands of
        such dicts for the garbage collector to walk), and later comparisons with them are
        identity checks."""
        held = session.last_raw
        n = shared_messages(chat.messages, held)
        if n == 0 or session.chain is None or len(session.chain.messages) != len(held):
            return normalize_messages(chat.messages)
        chat.messages[:n] = held[:n]
        return [*session.chain.messages[:n], *normalize_messages(chat.messages[n:], n)]

    def _render_call(self, call: Call) -> Prompt:
        """A full render: long conversations in the render process (see render_pool)."""
        messages, tools = call.messages, call.request.tools
        remaining = call.deadline - time.monotonic()
        if remaining <= 0:  # it waited its whole time in the queue (its caller has given up)
            raise RenderTimeout("the prompt was not built in time")
        ids: array[int] | None = None
        if not self.prompts.releases_gil and text_size(messages, tools) > OFFLOAD_CHARS:
            rendered = self.render_pool.render(messages, tools, remaining)
            ids = None if rendered is None else array("i", rendered)
        if ids is None:
            ids = self.prompts.render_array(messages, tools)
        return Prompt(ids, "rendered", call.chain_break)

    def sampling(self, session: Session, chat: ChatRequest, prompt_len: int) -> dict[str, Any]:
        """Engine sampling params: the trainer's session values win; the agent may lower max tokens."""
        params: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
        params.update(chat.agent_sampling)
        params.update({k: v for k, v in session.sampling.items() if k != "max_new_tokens"})
        limits = [v for v in (session.sampling.get("max_new_tokens"), chat.max_tokens) if v]
        max_new = min(limits) if limits else self.config.default_max_new_tokens
        if self.context_length is not None:
            room = self.context_length - prompt_len
            if room < 1:
                raise BadRequest(
                    f"the prompt has {prompt_len} tokens; the model's context length is "
                    f"{self.context_length} (shorten the conversation)",
                    param="messages",
                    code="context_length_exceeded",
                )
            max_new = min(max_new, room)
        params["max_new_tokens"] = max_new
        params["stop_token_ids"] = list(self.prompts.stop_ids)
        if chat.stop:
            params["stop"] = list(chat.stop)
        params.update(
            {"skip_special_tokens": False, "spaces_between_special_tokens": False, "no_stop_trim": True}
        )
        return params

    # ------------------------------------------------------------------ replies
    def reply(
        self, call: Call, output_ids: list[int], finish: str, matched: str | None
    ) -> tuple[dict[str, Any], list[str], Body]:
        """Parse the sampled ids into the assistant message (and the tool calls that could not
        be read) and serialize the reply in the call's protocol (on the loop)."""
        assert call.prompt is not None
        turn = self.prompts.parse(output_ids, call.prompt.ids, call.request.tools)
        message = turn.message
        completion = Completion(
            call.request.model or self.config.model_id,
            message,
            finish,
            matched,
            len(call.prompt.ids),
            len(output_ids),
        )
        return message, turn.tool_call_errors, call.protocol.reply(call.request, completion)

    def decode(self, ids: list[int]) -> str:
        return str(self.prompts.tokenizer.decode(ids, skip_special_tokens=False))
