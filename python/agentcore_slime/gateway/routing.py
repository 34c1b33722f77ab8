"""Rollout routing replay (slime's ``--use-rollout-routing-replay``): what a call asks the
engine for, and which of the engine's routed experts it keeps.

An MoE engine started with ``--enable-return-routed-experts`` answers a ``/generate`` that
sets ``return_routed_experts`` with ``meta_info["routed_experts"]``: base64 of int32, one row
of ``num_layers x num_experts_per_tok`` per position in ``[routed_experts_start_len, seqlen -
1)`` of prompt + output (SGLang 0.5.13 and 0.5.15.post1: ``tokenizer_manager.py`` and
``detokenizer_manager.py`` encode ``tensor.numpy().tobytes()``; the scheduler's
``_maybe_collect_routed_experts`` slices the rows; a start past the prompt aborts the request).
A call asks only for the positions its session does not hold yet
(:meth:`~.store.SessionTraces.routed_experts_start`), so bytes follow the tokens a call adds,
not the episode's history.

What the engine returned is checked against the call: exactly the rows asked for, else the
call's trace says why it has none (the rollout then fails the samples that need them as an
infrastructure failure, never trains with wrong routing). A router that drops
``routed_experts_start_len`` (the engine then returns every row from position 0) is recognized
by the count, and the rows the session holds are cut off.

At start (:func:`check_engine`) one token goes through the engine asking for its row: engines
without the flag, a router that drops ``return_routed_experts`` (the PyPI sglang-router 0.3.2
does) or a model whose rows are not ``num_layers x moe_router_topk`` stop the gateway's start,
before any agent runs, instead of failing every episode.
"""

from __future__ import annotations

import binascii
import logging
from dataclasses import dataclass

from .engine import EngineClient, EngineError, EngineResult

logger = logging.getLogger(__name__)

#: bytes of one routed expert id (SGLang captures ``topk_ids`` as int32)
ID_BYTES = 4
NO_ROWS = (
    "the engine returned no routed_experts (it needs --enable-return-routed-experts, which slime "
    "sets with --use-rollout-routing-replay; a router in front of it must forward return_routed_experts)"
)


@dataclass(frozen=True)
class Routing:
    """A call's routed experts as its trace keeps them.

    :param start: the first position asked for (None: not asked, the run does not replay).
    :param rows: the rows of positions ``[start, len(prompt) + len(output) - 1)``, raw int32.
    :param problem: why ``rows`` is None although asked for ("" otherwise).
    """

    start: int | None = None
    rows: bytes | None = None
    problem: str = ""


NOT_ASKED = Routing()
_warned_full = False


def row_bytes(layers: int, topk: int) -> int:
    """Bytes of one position's row: ``layers x topk`` int32 (0 when replay is off)."""
    return ID_BYTES * layers * topk


def take(result: EngineResult, start: int | None, prompt_length: int, row_size: int) -> Routing:
    """The call's routed experts from the engine's answer, checked against what was asked.

    :param result: the engine's answer (``routed_experts``: its base64 text, if any).
    :param start: the position asked from (None: not asked; then nothing is kept).
    :param prompt_length: the prompt's ids.
    :param row_size: bytes of one row (:func:`row_bytes`).
    """
    if start is None:
        return NOT_ASKED
    if result.routed_experts is None:
        return Routing(start, None, NO_ROWS)
    try:
        data = binascii.a2b_base64(result.routed_experts, strict_mode=True)
    except (binascii.Error, ValueError) as err:
        return Routing(start, None, f"routed_experts is not base64: {err}")
    positions = prompt_length + len(result.output_ids) - 1
    asked = max(0, positions - start) * row_size
    if len(data) == asked:
        return Routing(start, data)
    if start and len(data) == positions * row_size:  # the start was dropped on the way
        _warn_full_rows()
        return Routing(start, data[start * row_size :])
    return Routing(
        start,
        None,
        f"routed_experts has {len(data)} bytes, not the {asked} of {positions - start} rows x "
        f"{row_size} bytes asked for (positions {start}..{positions - 1}: is the model's "
        "num_layers x num_experts_per_tok what slime's --num-layers x --moe-router-topk say?)",
    )


async def check_engine(engine: EngineClient, layers: int, topk: int) -> None:
    """Ask the engine for the routed experts of one token (the id 0, one sampled token: one row).

    :raises EngineError: it returned none, or not one row of ``layers x topk`` ids.
    """
    result = await engine.generate([0], {"max_new_tokens": 1, "temperature": 0.0}, routed_experts_start=0)
    routing = take(result, 0, 1, row_bytes(layers, topk))
    if routing.problem:
        raise EngineError(
            f"rollout routing replay (--use-rollout-routing-replay, {layers} layers x top-{topk}): "
            f"{routing.problem}",
            retryable=False,
        )


def _warn_full_rows() -> None:
    global _warned_full
    if not _warned_full:
        _warned_full = True
        logger.warning(
            "the engine returned routed experts from position 0 although a later start was asked "
            "for: the router drops routed_experts_start_len, so every call carries its whole "
            "history's rows (bytes grow with the square of an episode's turns); the rows are right"
        )
