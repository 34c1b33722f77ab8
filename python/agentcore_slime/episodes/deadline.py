"""The eval tail cut, shared by the eval step (rollout/eval_step.py) and bin/eval
(evaluate/episodes.py): episodes not done by a deadline are cancelled and fail with one code."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: the reason code of an eval episode cut at its deadline (EVAL_TIMEOUT)
EVAL_TIMEOUT = "eval_timeout"


async def finish_by(runs: list[Coroutine[Any, Any, T]], limit: float | None) -> list[T | None]:
    """Run ``runs`` as tasks; those not done ``limit`` seconds from now (None: no limit) are
    cancelled, awaited (so their cleanup ran: sessions ended) and given as None, in order."""
    tasks = [asyncio.create_task(run) for run in runs]
    if not tasks:
        return []
    _, pending = await asyncio.wait(tasks, timeout=limit)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [None if task in pending else task.result() for task in tasks]


def cut_reason(limit: float | None, what: str) -> str:
    """The reason of an episode cut at ``limit`` (``what``: whose tail cut it was)."""
    return f"{EVAL_TIMEOUT}: still running when EVAL_TIMEOUT={limit}s ended ({what})"
