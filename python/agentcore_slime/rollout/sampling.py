"""Over-sampling with a tail cut: start more prompt groups than a step needs, keep the first complete ones.

This is the scheduling of slime's own ``generate_rollout_async`` (fa3c990,
``slime/rollout/sglang_rollout.py``) for agent episodes: groups are fetched from the data
source ``fetch_size`` (``--over-sampling-batch-size``) at a time whenever the groups kept plus
those still running fall below the target (``--rollout-batch-size``); each finished group
is judged (the dynamic-sampling filter, and whether it has enough valid episodes); as soon
as ``target`` groups are kept the rest are cancelled, which aborts their episodes. A cap on
the groups started beyond the target bounds the cost when the filter keeps dropping groups.

The scheduler is generic (groups and results are opaque), so the benchmark runs the same
code with simulated agents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

G = TypeVar("G")
R = TypeVar("R")

#: ``keep`` of a group the filter rejects but asks to keep when dropping it would leave too few
#: groups to fill the step (slime's ``DynamicFilterOutput.keep_when_insufficient``, v0.3.1 on):
#: kept when the groups kept, running and not yet judged, this one included, are at most the target
IF_INSUFFICIENT: Final = "if_insufficient"
#: a group's verdict: (keep, reason for dropping it)
Verdict = tuple[bool | Literal["if_insufficient"], str | None]


@dataclass(frozen=True)
class SamplingPlan:
    """How many groups a step starts and keeps.

    :param target: groups the step returns (``--rollout-batch-size``).
    :param fetch_size: groups fetched at a time (``--over-sampling-batch-size``, at least ``target``).
    :param max_extra_groups: at most this many groups are started beyond ``target`` in one step.
    """

    target: int
    fetch_size: int
    max_extra_groups: int

    @property
    def cuts_the_tail(self) -> bool:
        """True when more groups than needed may start (and the slowest are aborted)."""
        return self.fetch_size > self.target


@dataclass
class SamplingOutcome(Generic[G, R]):
    """What one step's sampling produced.

    :param kept: results of the groups to train on, in completion order (at most ``target``).
    :param dropped: results judged not worth training, with the reason.
    :param aborted: groups cancelled before they finished.
    :param started: groups started.
    """

    kept: list[R] = field(default_factory=list)
    dropped: list[tuple[R, str | None]] = field(default_factory=list)
    aborted: list[G] = field(default_factory=list)
    started: int = 0


async def _cancel_all(pending: dict[asyncio.Task[Any], Any]) -> None:
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def sample_groups(
    plan: SamplingPlan,
    fetch: Callable[[int], Awaitable[list[G]]],
    run_group: Callable[[G], Coroutine[Any, Any, R]],
    judge: Callable[[R], Verdict],
) -> SamplingOutcome[G, R]:
    """Run groups until ``plan.target`` are kept (or the cap is reached), then abort the rest.

    :param plan: target, fetch size and cap.
    :param fetch: ``n -> groups`` (the data source's ``get_samples``).
    :param run_group: runs one group; cancelling it must abort and clean up its episodes.
    :param judge: ``result -> (keep, reason)``.
    """
    outcome: SamplingOutcome[G, R] = SamplingOutcome()
    pending: dict[asyncio.Task[R], G] = {}
    budget = plan.target + plan.max_extra_groups
    exhausted = False
    try:
        while len(outcome.kept) < plan.target:
            if len(outcome.kept) + len(pending) < plan.target and outcome.started < budget and not exhausted:
                groups = await fetch(min(plan.fetch_size, budget - outcome.started))
                exhausted = not groups
                for group in groups:
                    pending[asyncio.create_task(run_group(group))] = group
                outcome.started += len(groups)
                continue
            if not pending:
                break  # the cap is reached and every started group is judged
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:  # done is no longer pending: counted once, as unjudged, below
                pending.pop(task)
            unjudged = len(done)
            for task in done:
                result = task.result()
                verdict, reason = judge(result)
                # as slime counts it: every group not dropped yet (kept, running, unjudged)
                remaining = len(outcome.kept) + len(pending) + unjudged
                unjudged -= 1
                keep = remaining <= plan.target if verdict == IF_INSUFFICIENT else bool(verdict)
                if keep and len(outcome.kept) < plan.target:
                    outcome.kept.append(result)
                else:
                    outcome.dropped.append((result, reason if not keep else "surplus"))
    finally:
        outcome.aborted = list(pending.values())
        await _cancel_all(pending)
    return outcome
