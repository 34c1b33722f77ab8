"""A training step: the over-sampling scheduler over prompt groups, then slime's output.

Groups are fetched from slime's data source and run through
:func:`~agentcore_slime.rollout.sampling.sample_groups` (over-sampling, the tail cut, the
dynamic-sampling filter); the kept groups are renumbered, padded for slime's data-parallel
split and returned as ``RolloutFnTrainOutput``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agentcore_slime.rollout.episode import _Episode, _input_id, _Result, _run_episode
from agentcore_slime.rollout.padding import dp_layout, pad_for_dp
from agentcore_slime.rollout.record import _log_failures, _record_step, charges
from agentcore_slime.rollout.routing import RoutingLayout, fill_routing, routing_layout
from agentcore_slime.rollout.runtime import Runtime
from agentcore_slime.rollout.samples import KIND_PADDING, ShimRecord, zero_gradient_sample
from agentcore_slime.rollout.sampling import (
    IF_INSUFFICIENT,
    SamplingOutcome,
    SamplingPlan,
    Verdict,
    sample_groups,
)
from agentcore_slime.rollout.step_stats import GroupRecord, StepStats
from agentcore_slime.rollout.trace_log import _write_trace_log
from agentcore_slime.settings.config import ConfigError, ToolkitConfig, load_function, sampling_settings

logger = logging.getLogger(__name__)


def _train_sampling(args: Any) -> dict[str, Any]:
    sampling = {
        "temperature": getattr(args, "rollout_temperature", None),
        "top_p": getattr(args, "rollout_top_p", None),
        "top_k": getattr(args, "rollout_top_k", None),
        "max_new_tokens": getattr(args, "rollout_max_response_len", None),
    }
    return {k: v for k, v in sampling.items() if v is not None}


def _padding_maker(sample: Any, rollout_id: int) -> Any:
    cls = type(sample)
    record = ShimRecord(kind=KIND_PADDING)
    return zero_gradient_sample(
        cls, template=sample, record=record, rollout_id=rollout_id, status=cls.Status.FAILED
    )


def _batch_size(args: Any) -> int:
    value = getattr(args, "rollout_batch_size", None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"rollout_batch_size: {value!r} is not a positive integer (pass --rollout-batch-size N)"
        )
    return value


@dataclass
class _Group:
    """One prompt group of a training step: its slot and its data-source samples."""

    slot: int
    templates: list[Any]


@dataclass
class _StepContext:
    """What the groups of one training step share."""

    rollout_id: int
    input_id: str
    sampling: dict[str, Any]
    slots: asyncio.Semaphore
    routing: RoutingLayout | None = None  #: rollout routing replay (None: off)
    slot_count: int = 0
    #: every episode started, kept or not (aborted and dropped ones are billed too)
    started: list[_Episode] = field(default_factory=list)


def _sampling_plan(args: Any, config: ToolkitConfig) -> SamplingPlan:
    settings = sampling_settings(args, config)
    return SamplingPlan(_batch_size(args), settings.fetch_size, settings.max_extra_groups)


def _judge(args: Any, config: ToolkitConfig, plan: SamplingPlan, dynamic_filter: Any) -> Any:
    """The verdict on a finished group: enough valid episodes, then the dynamic-sampling filter.

    Only when groups can be replaced (over-sampling or a filter) is a group with too few valid
    episodes dropped; the filter sees one sample per valid episode (its last segment), as
    slime's filters see one sample per generation. A rejection with slime's
    ``keep_when_insufficient`` (v0.3.1 on, e.g. ``check_reward_nonzero_std_with_fallback``) keeps
    the group when dropping it would leave too few groups to fill the step, as slime's own rollout
    does; the pinned fa3c990 has no such field (a plain rejection).
    """
    from slime.rollout.filter_hub.base_types import call_dynamic_filter

    replaceable = plan.cuts_the_tail or dynamic_filter is not None
    excluding = config.infra_failures == "exclude"

    def judge(results: list[_Result]) -> Verdict:
        valid = [r for r in results if r.ok] if excluding else results
        if replaceable and excluding and len(valid) < min(2, len(results)):
            return False, "too_few_valid_episodes"
        if dynamic_filter is None:
            return True, None
        verdict = call_dynamic_filter(dynamic_filter, args, [r.samples[-1] for r in valid])
        if not verdict.keep and getattr(verdict, "keep_when_insufficient", False):
            return IF_INSUFFICIENT, verdict.reason
        return bool(verdict.keep), verdict.reason

    return judge


async def _run_group(runtime: Runtime, context: _StepContext, group: _Group) -> list[_Result]:
    episodes = []
    for template in group.templates:
        number, context.slot_count = context.slot_count, context.slot_count + 1
        episode = _Episode(template, group.slot, number, context.input_id, context.sampling)
        episode.routing = context.routing
        episodes.append(episode)
    context.started.extend(episodes)
    tasks = [asyncio.create_task(_run_episode(runtime, e, context.slots)) for e in episodes]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:
        # gather gives up at the first cancelled episode; wait until every episode has
        # stopped its runtime session and ended its gateway session before the step returns
        await asyncio.wait(tasks)
        raise


def _renumber(groups: list[list[Any]]) -> int:
    """Give the returned episodes consecutive rollout ids in order (slime's split counts them)."""
    ids: dict[Any, int] = {}
    for group in groups:
        for sample in group:
            sample.rollout_id = ids.setdefault(sample.session_id, len(ids))
    return len(ids)


def _fill_from_dropped(
    outcome: SamplingOutcome[_Group, list[_Result]], target: int, stats: StepStats
) -> None:
    """When the cap stopped sampling short of the target, train the dropped groups too (zero signal)."""
    while len(outcome.kept) < target and outcome.dropped:
        outcome.kept.append(outcome.dropped.pop(0)[0])
        stats.groups_filled += 1
    if stats.groups_filled:
        logger.warning(
            "rollout %d: the cap on extra groups (MAX_EXTRA_GROUPS) was reached with %d groups kept; "
            "%d dropped groups are returned to keep the step's size",
            stats.rollout_id,
            target - stats.groups_filled,
            stats.groups_filled,
        )


async def _requeue(runtime: Runtime, data_source: Any, aborted: list[_Group], stats: StepStats) -> None:
    """``--partial-rollout``: aborted groups go back to the data source, as their original prompts
    (an agent episode cannot be resumed, so nothing of its partial run is kept)."""
    groups = [[copy.deepcopy(t) for t in g.templates] for g in aborted]
    if groups:
        await runtime.call(data_source.add_samples, groups)
        stats.groups_requeued = len(groups)


def _group_record(results: list[_Result]) -> GroupRecord:
    return GroupRecord(
        [r.reward for r in results if r.ok and r.reward is not None],
        [r.failure or "unknown" for r in results if not r.ok],
    )


async def _sample(
    runtime: Runtime,
    args: Any,
    rollout_id: int,
    data_source: Any,
    stats: StepStats,
    started: list[_Episode],
) -> list[list[_Result]]:
    plan = _sampling_plan(args, runtime.config)
    filter_path = getattr(args, "dynamic_sampling_filter_path", None)
    dynamic_filter = load_function(filter_path) if filter_path else None
    context = _StepContext(
        rollout_id,
        _input_id("train", rollout_id),
        _train_sampling(args),
        asyncio.Semaphore(runtime.config.max_concurrent),
        routing=routing_layout(args),
        started=started,
    )

    async def fetch(count: int) -> list[_Group]:
        groups = await runtime.call(data_source.get_samples, count)
        start = stats.groups_started
        stats.groups_started += len(groups)
        return [_Group(start + n, list(g)) for n, g in enumerate(groups)]

    outcome = await sample_groups(
        plan,
        fetch,
        partial(_run_group, runtime, context),
        _judge(args, runtime.config, plan, dynamic_filter),
    )
    for _, reason in outcome.dropped:
        stats.groups_dropped[reason or "filtered"] = stats.groups_dropped.get(reason or "filtered", 0) + 1
    _fill_from_dropped(outcome, plan.target, stats)
    stats.groups_aborted = len(outcome.aborted)
    if getattr(args, "partial_rollout", False):
        await _requeue(runtime, data_source, outcome.aborted, stats)
    return sorted(outcome.kept, key=lambda results: results[0].episode.slot)


async def _train_step(runtime: Runtime, args: Any, rollout_id: int, data_source: Any) -> Any:
    from slime.rollout.base_types import RolloutFnTrainOutput

    runtime.ledger.before_step(rollout_id, args)  # raises BudgetExhausted: nothing started yet
    started = time.monotonic()
    stats = StepStats(rollout_id)
    episodes_started: list[_Episode] = []
    kept = await _sample(runtime, args, rollout_id, data_source, stats, episodes_started)
    results = [r for group in kept for r in group]
    await _write_trace_log(runtime, rollout_id, "train", results)
    output: list[list[Any]] = [[s for r in group for s in r.samples] for group in kept]
    episodes = _renumber(output)
    stats.count_trained([_group_record(group) for group in kept])
    stats.sequences = sum(len(r.samples) for r in results if r.ok)
    if not any(r.ok for r in results):
        _log_failures(results)
        stats.seconds = time.monotonic() - started
        cost = runtime.charge("train", rollout_id, charges(episodes_started, results))
        await _record_step(
            runtime, "train", rollout_id, results, stats.seconds, sampling=stats.as_dict(), cost=cost
        )
        reasons = sorted({str(r.reason) for r in results})
        raise RuntimeError(
            f"rollout {rollout_id}: all {len(results)} episodes failed; not training on nothing. "
            f"Reasons: {'; '.join(reasons[:5])}"
        )
    stats.padding_samples = pad_for_dp(output, dp_layout(args), _padding_maker, next_rollout_id=episodes)
    layout = routing_layout(args)
    if layout is not None:  # slime reads the key from the first sample and wants it on every one
        fill_routing(output, layout)
    stats.seconds = time.monotonic() - started
    runtime.last_step = stats
    _log_failures(results)
    logger.info("%s", stats.log_line())
    cost = runtime.charge("train", rollout_id, charges(episodes_started, results))
    await _record_step(
        runtime, "train", rollout_id, results, stats.seconds, sampling=stats.as_dict(), cost=cost
    )
    return RolloutFnTrainOutput(samples=output, metrics=stats.metrics())
