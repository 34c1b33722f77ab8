"""What slime v0.3.1 (and 624b824a8) changed in the rollout contract, honoured or refused (issue 35).

- #2250: ``DynamicFilterOutput.keep_when_insufficient`` (``check_reward_nonzero_std_with_fallback``):
  a rejected group is kept when dropping it would leave too few groups to fill the step, counted
  as slime's ``should_drop_dynamic_filter_output`` counts them (every group not dropped yet).
- #2250: ``--rollout-sample-hook-path`` runs only in slime's default rollout: refused.
- eval datasets' ``stop`` / ``stop_token_ids`` / ``min_new_tokens``: resolved, then refused (the
  gateway's sessions do not carry them to SGLang).
- #2184: ``train_data["source_names"]`` from ``sample.source``, else ``metadata["source_name"]``:
  the rollout's samples keep both.

The slime stand-in is fa3c990's (no ``keep_when_insufficient``); the v0.3.1 filter output is
described here as a subclass with the field, as slime v0.3.1 declares it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.datasets import eval_specs
from agentcore_slime.rollout.samples import (
    KIND_PADDING,
    ShimRecord,
    zero_gradient_sample,
)
from agentcore_slime.rollout.sampling import (
    IF_INSUFFICIENT,
    SamplingPlan,
    Verdict,
    sample_groups,
)
from agentcore_slime.rollout.traces import CallTrace, merge_traces_to_samples
from agentcore_slime.settings.config import ConfigError
from fakes.data_source import ListDataSource
from fakes.standins import make_args
from slime.rollout.filter_hub.base_types import DynamicFilterOutput
from slime.utils.types import Sample
from test_failures_and_sampling import rows, script

FALLBACK = "test_slime_versions.nonzero_std_with_fallback"


@dataclass
class V031FilterOutput(DynamicFilterOutput):
    """slime v0.3.1's ``DynamicFilterOutput``: the fa3c990 fields plus ``keep_when_insufficient``."""

    keep_when_insufficient: bool = False


def nonzero_std_with_fallback(args: Any, samples: list[Sample], **kwargs: Any) -> V031FilterOutput:
    """What v0.3.1's ``check_reward_nonzero_std_with_fallback`` decides: reject a group whose
    rewards are all equal, but keep it when the step would otherwise run short."""
    rewards = [float(s.reward) for s in samples]  # type: ignore[arg-type]
    keep = max(rewards) - min(rewards) > 1e-6
    return V031FilterOutput(keep=keep, reason=None if keep else "zero_std", keep_when_insufficient=True)


def _run(plan: SamplingPlan, delays: list[float], verdict: Verdict) -> Any:
    """The scheduler over groups 0..n-1 (group g finishes after delays[g]); every verdict the same."""
    handed = iter(range(len(delays)))

    async def fetch(count: int) -> list[int]:
        return [g for _, g in zip(range(count), handed, strict=False)]

    async def run_group(group: int) -> int:
        await asyncio.sleep(delays[group])
        return group

    return asyncio.run(asyncio.wait_for(sample_groups(plan, fetch, run_group, lambda r: verdict), 10))


def test_a_rejection_kept_when_insufficient_stops_sampling_where_a_plain_one_goes_on() -> None:
    plan = SamplingPlan(target=2, fetch_size=2, max_extra_groups=4)
    kept = _run(plan, [0.01, 0.02, 0.03, 0.04, 0.05, 0.06], (IF_INSUFFICIENT, "zero_std"))
    assert kept.kept == [0, 1] and kept.started == 2 and kept.dropped == []
    dropped = _run(plan, [0.01, 0.02, 0.03, 0.04, 0.05, 0.06], (False, "zero_std"))
    assert dropped.kept == [] and dropped.started == 6 and len(dropped.dropped) == 6


def test_groups_that_end_together_are_each_counted_once() -> None:
    """Two groups done in the same wake-up: neither is counted twice (still pending and
    unjudged), so both are kept where two fill the step (before: both dropped, 2 more started)."""
    plan = SamplingPlan(target=2, fetch_size=2, max_extra_groups=2)
    outcome = _run(plan, [0.01, 0.01], (IF_INSUFFICIENT, "zero_std"))
    assert sorted(outcome.kept) == [0, 1] and outcome.started == 2 and outcome.dropped == []


def test_with_over_sampling_only_the_groups_needed_to_fill_the_step_are_kept() -> None:
    """3 groups run for a target of 2: the first rejected one is dropped (2 others remain), the
    next is kept (dropping it would leave 1), as slime's remaining_batch_size <= target."""
    plan = SamplingPlan(target=2, fetch_size=3, max_extra_groups=1)
    outcome = _run(plan, [0.01, 0.05, 0.10], (IF_INSUFFICIENT, "zero_std"))
    assert outcome.dropped == [(0, "zero_std")] and outcome.kept == [1, 2]


def test_generate_rollout_keeps_flat_groups_the_fallback_filter_asks_to_keep(
    s3_bucket: str, agents: Any, shim_state: Any
) -> None:
    agent = agents.start(script)
    args = make_args(agent_url=agent.url, s3_bucket=s3_bucket, rollout_batch_size=2, n_samples_per_prompt=2,
                     dynamic_sampling_filter_path=FALLBACK, max_extra_groups=2)
    output = rollout.generate_rollout(args, 0, ListDataSource(rows("flat"), n_samples_per_prompt=2))
    assert len(output.samples) == 2
    assert output.metrics["agentcore/groups_started"] == 2  # no extra round, as in slime
    assert len(agent.invocations) == 4
    dropped = {k: v for k, v in output.metrics.items() if k.startswith("agentcore/dropped_groups/") and v}
    assert dropped == {}


def test_a_sample_hook_is_refused_before_anything_starts(agents: Any, gateway: Any, shim_state: Any) -> None:
    agent = agents.start(script)
    args = make_args(agent_url=agent.url, s3_bucket="rl-results", rollout_sample_hook_path=["my.hook"])
    message = ("rollout_sample_hook_path: --rollout-sample-hook-path is set, but slime applies "
               "sample hooks only in its own default rollout")
    with pytest.raises(ConfigError, match=message):
        rollout.generate_rollout(args, 0, ListDataSource(rows("ok"), 1))
    assert agent.invocations == [] and shim_state.factory_calls == []


def test_bin_train_refuses_the_sample_hook_flag_too() -> None:
    from agentcore_slime.settings.validate import slime_flag_problems

    problems = slime_flag_problems(["--rollout-sample-hook-path", "my.hook"], None)  # type: ignore[arg-type]
    assert any("--rollout-sample-hook-path" in str(p) and "default rollout" in str(p) for p in problems)


@pytest.mark.parametrize(
    ("dataset", "args", "shown"),
    [
        ({"stop": ["</answer>"]}, {}, "stop=['</answer>']"),
        ({"stop_token_ids": [151645]}, {}, "stop_token_ids=[151645]"),
        ({}, {"eval_min_new_tokens": 8}, "min_new_tokens=8"),
        ({}, {"rollout_stop": ["\n\n"]}, "stop=['\\n\\n']"),
    ],
)
def test_per_dataset_eval_stop_settings_are_resolved_and_refused(
    dataset: dict[str, Any], args: dict[str, Any], shown: str
) -> None:
    namespace = SimpleNamespace(eval_datasets=[{"name": "gsm8k", "path": "/d.jsonl", **dataset}], **args)
    with pytest.raises(ValueError, match="cannot pass to SGLang") as error:
        eval_specs(namespace)
    assert f"gsm8k: {shown}" in str(error.value)


def test_eval_datasets_without_stop_settings_still_resolve() -> None:
    [spec] = eval_specs(SimpleNamespace(eval_datasets=[{"name": "a", "path": "/a.jsonl", "stop": None,
                                                        "min_new_tokens": None}], eval_temperature=0.0))
    assert spec.stops == {} and spec.sampling == {"temperature": 0.0}


def _source(sample: Any) -> str:
    """slime v0.3.1's lookup for train_data["source_names"] (slime/utils/data.py get_source)."""
    metadata = getattr(sample, "metadata", None) or {}
    return getattr(sample, "source", None) or metadata.get("source_name") or "unknown"


def test_source_names_survive_into_the_rollouts_samples() -> None:
    by_attribute = Sample(group_index=0, index=0, prompt="p", metadata={"q": 1})
    by_attribute.source = "math"  # type: ignore[attr-defined] # a custom data source sets it
    by_metadata = Sample(group_index=0, index=1, prompt="p", metadata={"source_name": "code"})
    trace = CallTrace(prompt_token_ids=[1, 2], completion_token_ids=[3], logprobs=[-0.1],
                      finish_reason="stop")
    cases = ((by_attribute, "math"), (by_metadata, "code"), (Sample(metadata={}), "unknown"))
    for template, expected in cases:
        [sample] = merge_traces_to_samples([trace], template, session_id="s", reward=1.0, rollout_id=0)
        assert _source(sample) == expected
        padding = zero_gradient_sample(Sample, template=template, record=ShimRecord(kind=KIND_PADDING),
                                       rollout_id=1, status=Sample.Status.FAILED)
        assert _source(padding) == expected
