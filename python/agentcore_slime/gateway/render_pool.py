"""Full renders of long conversations in a separate process.

Rendering is CPU work under the GIL: a thread renders a 32k-token first turn (a long system
prompt and tool schemas) for tens of milliseconds, and meanwhile the event loop gets the GIL
only every switch interval, so every other session's call waits. Conversations longer than
:data:`OFFLOAD_CHARS` of text are therefore rendered by a worker process with its own
tokenizer and renderer (the same model directory, family and parsers: the same ids).
Short renders and cumulative bridges stay in the gateway's threads, where they cost less
than the round trip. The pool starts on first use (most sessions never need it) and is
rebuilt if its process dies; a render it cannot do is done in the calling thread.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

OFFLOAD_CHARS = 48_000  # ~16k tokens of text: rendering it takes tens of ms


@dataclass(frozen=True)
class RendererSpec:
    """What a worker needs to build the same renderer as the gateway."""

    model_dir: str
    family: str
    tool_call_parser: str | None
    reasoning_parser: str | None


_WORKER: dict[str, Any] = {}  # the worker process's renderer (set once by _init_worker)


def _init_worker(spec: RendererSpec) -> None:
    from .family import build_renderer, load_tokenizer
    from .rendering import PromptBuilder

    tokenizer = load_tokenizer(spec.model_dir)
    renderer = build_renderer(
        tokenizer, spec.family, tool_call_parser=spec.tool_call_parser, reasoning_parser=spec.reasoning_parser
    )
    # the gateway renders here only when it cannot release the GIL itself (a renderers family,
    # or a tokenizer whose own encoding differs): the worker renders exactly as the renderer does
    _WORKER["builder"] = PromptBuilder(renderer, tokenizer, spec.family, release_gil=False)


def _render_in_worker(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    return list(_WORKER["builder"].render(messages, tools))


def text_size(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """Characters of message text (a cheap proxy for rendering cost)."""
    size = sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))
    return size + (len(str(tools)) if tools else 0)


class RenderTimeout(Exception):
    """A render did not finish within the call's render timeout (the caller answers 503)."""


class RenderPool:
    """One worker process for long full renders.

    :param spec: the renderer to rebuild in the worker.
    """

    def __init__(self, spec: RendererSpec) -> None:
        self.spec = spec
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.rendered = 0  # renders the worker did

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:  # spawn: the gateway's process has threads, fork is unsafe
                context = multiprocessing.get_context("spawn")
                self._pool = ProcessPoolExecutor(1, context, _init_worker, (self.spec,))
            return self._pool

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, timeout: float
    ) -> list[int] | None:
        """The rendered ids, or None when the worker could not render (render in-thread then).

        Blocks the calling thread (a render-pool thread), not the event loop, for at most
        ``timeout`` seconds.

        :raises RenderTimeout: not rendered in time (a render not yet started is cancelled;
            one in progress finishes in the worker, its ids unused).
        """
        pool = self._executor()
        future = pool.submit(_render_in_worker, messages, tools)
        try:
            ids = future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise RenderTimeout(f"the render worker did not render the prompt within {timeout:g} s") from None
        except BrokenProcessPool:
            logger.warning("the render worker process died; it is restarted for the next long prompt")
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            return None
        except Exception as err:  # noqa: BLE001 - the in-thread render reports the request's error
            logger.info("render worker: %s: %s; rendering in-thread", type(err).__name__, err)
            return None
        self.rendered += 1
        return ids

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
