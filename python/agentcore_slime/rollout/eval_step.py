"""The eval step: every eval dataset's rows, each ``n_samples`` times, as ``RolloutFnEvalOutput``."""

from __future__ import annotations

import time
from typing import Any

from agentcore_slime.datasets import EvalRow, EvalSpec, eval_specs, load_rows
from agentcore_slime.rollout.episode import _Episode, _input_id, _run_all
from agentcore_slime.rollout.record import _log_summary, _record_step
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
    results = await _run_all(runtime, episodes)
    await _write_trace_log(runtime, rollout_id, "eval", results)
    data: dict[str, dict[str, Any]] = {}
    metrics: dict[str, Any] = {}
    seconds = time.monotonic() - started
    for slot, spec in enumerate(specs):
        mine = [r for r in results if r.episode.slot == slot]
        rewards = [r.reward if r.reward is not None else 0.0 for r in mine]
        last = [r.samples[-1] for r in mine]
        data[spec.name] = {
            "rewards": rewards,
            "truncated": [s.status == Sample.Status.TRUNCATED for s in last],
            "samples": last,
        }
        count = len(rewards)
        metrics[f"eval/{spec.name}/accuracy"] = sum(r > 0 for r in rewards) / count if count else 0.0
        metrics[f"eval/{spec.name}/mean_reward"] = sum(rewards) / count if count else 0.0
        metrics[f"eval/{spec.name}/count"] = count
        metrics[f"eval/{spec.name}/failed"] = sum(not r.ok for r in mine)
        await _record_step(runtime, "eval", rollout_id, mine, seconds, dataset=spec.name)
    _log_summary("eval", rollout_id, results, sum(len(r.samples) for r in results if r.ok), started)
    return RolloutFnEvalOutput(data=data, metrics=metrics)
