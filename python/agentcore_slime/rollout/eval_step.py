"""The eval step: every eval dataset's rows, each ``n_samples`` times, as ``RolloutFnEvalOutput``.

What slime gets per dataset follows the eval figures (:mod:`agentcore_slime.observe.figures`):
``rewards``, ``samples`` and ``truncated`` hold the valid episodes only, aligned, so slime's own
``eval/<name>`` (``sum(rewards) / len(rewards)``) is the figures' ``reward_mean``, the number
bin/eval's summary.json, metrics.jsonl and the report show. When every episode of a dataset
failed, the lists hold one entry (reward NaN, the first failed episode's zero-length sample):
``eval/<name>`` is NaN (no value, a gap in the plot) instead of a ZeroDivisionError in slime.
The failures are counted apart in ``eval/<name>/failed`` and ``eval/<name>/failures/<code>``.

No over-sampling: every row runs ``n_samples`` times. The tail cut is a deadline: with
``EVAL_TIMEOUT`` set, an episode still running (or waiting for a slot) that many seconds after
its episodes started is cancelled (its ACR and gateway sessions ended) and fails with the code
``eval_timeout``; the step never waits longer. Unset, each episode is bounded by ``ACR_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from agentcore_slime.datasets import EvalRow, EvalSpec, eval_specs, load_rows
from agentcore_slime.episodes.deadline import EVAL_TIMEOUT, cut_reason, finish_by
from agentcore_slime.observe.figures import eval_figures, slime_value
from agentcore_slime.rollout.episode import _Episode, _failed, _input_id, _Result, _run_episode
from agentcore_slime.rollout.record import _log_summary, _record_step, charges
from agentcore_slime.rollout.runtime import Runtime
from agentcore_slime.rollout.trace_log import _write_trace_log


async def _eval_rows(runtime: Runtime, spec: EvalSpec) -> list[EvalRow]:
    rows = runtime.eval_cache.get(spec.cache_key)
    if rows is None:
        rows = await runtime.call(load_rows, spec)
        runtime.eval_cache[spec.cache_key] = rows
    return rows


async def _eval_step(runtime: Runtime, args: Any, rollout_id: int) -> Any:
    from slime.rollout.base_types import RolloutFnEvalOutput
    from slime.utils.types import Sample

    started = time.monotonic()
    specs = eval_specs(args)
    episodes: list[_Episode] = []
    # one input id (one S3 prefix) for every dataset of the step: one LIST finds all their
    # results, so polling does not grow with the number of datasets (issue 28)
    input_id = _input_id("eval", rollout_id)
    for slot, spec in enumerate(specs):
        spec_rows = await _eval_rows(runtime, spec)
        if not spec_rows:
            # slime logs eval/<name> = sum(rewards) / len(rewards) (slime/ray/rollout.py:1267 at
            # fa3c990): an empty dataset would crash the run with ZeroDivisionError after the fact.
            raise ValueError(
                f"eval dataset {spec.name!r} ({spec.path}) has no rows "
                "(check the file, its @[start:end] slice and --eval-prompt-data / --eval-config)"
            )
        for number, row in enumerate(spec_rows):
            for repeat in range(spec.n_samples):
                template = Sample(
                    group_index=number,
                    index=number * spec.n_samples + repeat,
                    prompt=row.prompt,
                    label=row.label,
                    metadata=row.metadata,
                )
                episodes.append(_Episode(template, slot, len(episodes), input_id, spec.sampling))
    results = await _run_until(runtime, episodes, runtime.config.eval_timeout)
    await _write_trace_log(runtime, rollout_id, "eval", results)
    data: dict[str, dict[str, Any]] = {}
    metrics: dict[str, Any] = {}
    seconds = time.monotonic() - started
    for slot, spec in enumerate(specs):
        mine = [r for r in results if r.episode.slot == slot]
        data[spec.name] = _slime_entry(mine, Sample.Status.TRUNCATED)
        metrics.update(_figure_metrics(spec.name, mine))
        # billed: every episode of the dataset that started (cut ones too: AgentCore bills them)
        billed = charges([e for e in episodes if e.slot == slot], mine)
        cost = runtime.charge("eval", rollout_id, billed)
        await _record_step(runtime, "eval", rollout_id, mine, seconds, dataset=spec.name, cost=cost)
    _log_summary("eval", rollout_id, results, sum(len(r.samples) for r in results if r.ok), started)
    return RolloutFnEvalOutput(data=data, metrics=metrics)


async def _run_until(runtime: Runtime, episodes: list[_Episode], limit: float | None) -> list[_Result]:
    """Every episode, at most ``max_concurrent`` at once; those not done ``limit`` seconds from
    now are cancelled (their sessions ended) and fail with :data:`EVAL_TIMEOUT`."""
    slots = asyncio.Semaphore(runtime.config.max_concurrent)
    results = await finish_by([_run_episode(runtime, e, slots) for e in episodes], limit)
    reason = cut_reason(limit, "the eval step's tail cut")
    return [
        _failed(episode, EVAL_TIMEOUT, reason) if result is None else result
        for result, episode in zip(results, episodes, strict=True)
    ]


def _slime_entry(results: list[_Result], truncated_status: Any) -> dict[str, Any]:
    """``rewards`` / ``samples`` / ``truncated`` of the valid episodes (aligned); one NaN entry
    when none is valid (see the module docstring)."""
    valid = [r for r in results if r.ok and r.reward is not None]
    if not valid:
        placeholder = results[0].samples[-1]
        return {"rewards": [math.nan], "truncated": [False], "samples": [placeholder]}
    last = [r.samples[-1] for r in valid]
    return {
        "rewards": [float(r.reward) for r in valid if r.reward is not None],
        "truncated": [s.status == truncated_status for s in last],
        "samples": last,
    }


def _figure_metrics(name: str, results: list[_Result]) -> dict[str, float]:
    """``eval/<name>/*``: the eval figures of one dataset (slime adds ``eval/<name>`` itself)."""
    figures = eval_figures(
        [r.reward if r.ok else None for r in results], [r.failure for r in results if not r.ok]
    )
    metrics = {
        f"eval/{name}/reward_mean": slime_value(figures.reward_mean),
        f"eval/{name}/accuracy": slime_value(figures.accuracy),
        f"eval/{name}/episodes": figures.episodes,
        f"eval/{name}/valid": figures.valid,
        f"eval/{name}/failed": figures.failed,
    }
    for code, count in figures.failed_by_reason.items():
        metrics[f"eval/{name}/failures/{code}"] = count
    return metrics
