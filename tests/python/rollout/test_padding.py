"""Padding for slime's data-parallel split: no real sample is ever dropped or breaks the split."""

from __future__ import annotations

from typing import Any

from agentcore_slime.rollout.padding import dp_layout, pad_for_dp
from agentcore_slime.rollout.samples import KIND_PADDING, ShimRecord, is_padding, zero_gradient_sample
from fakes.slime_split import check_sample_invariants, flatten, trained_positions
from fakes.standins import make_args
from hypothesis import given, settings
from hypothesis import strategies as st
from slime.utils.types import Sample


def padding(sample: Any, rollout_id: int) -> Sample:
    record = ShimRecord(kind=KIND_PADDING)
    return zero_gradient_sample(
        Sample, template=sample, record=record, rollout_id=rollout_id, status=Sample.Status.FAILED
    )


def real(group: int, rollout_id: int) -> Sample:
    return Sample(
        group_index=group,
        rollout_id=rollout_id,
        tokens=[1, 2, 3],
        response_length=1,
        loss_mask=[1],
        rollout_log_probs=[-0.5],
        reward=1.0,
        session_id=f"s{rollout_id}",
    )


def test_layout_from_args() -> None:
    args = make_args(
        actor_num_nodes=2,
        actor_num_gpus_per_node=8,
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2,
        context_parallel_size=1,
        micro_batch_size=2,
        global_batch_size=16,
    )
    layout = dp_layout(args)
    assert (layout.dp_size, layout.rollouts_per_step, layout.samples_multiple) == (4, 16, 8)
    vpp = dp_layout(
        make_args(
            actor_num_gpus_per_node=8,
            pipeline_model_parallel_size=2,
            virtual_pipeline_model_parallel_size=2,
            use_dynamic_batch_size=True,
        )
    )
    assert (vpp.dp_size, vpp.samples_multiple, vpp.rollouts_per_step) == (4, 8, 4)


def test_unpadded_step_would_break_and_padded_step_keeps_everything() -> None:
    args = make_args(actor_num_gpus_per_node=4, micro_batch_size=1, global_batch_size=3)
    groups = [[real(0, 0), real(0, 0), real(0, 1)], [real(1, 2), real(1, 3)]]
    added = pad_for_dp(groups, dp_layout(args), padding, next_rollout_id=4)
    samples = flatten(groups)
    assert added == len(samples) - 5
    kept = trained_positions(args, samples, dp_size=4)
    assert {i for i, s in enumerate(samples) if not is_padding(s)} <= kept
    check_sample_invariants(samples)
    assert all(s.loss_mask == [0] and s.reward == 0.0 for s in samples if is_padding(s))


@st.composite
def steps(draw: st.DrawFn) -> tuple[Any, list[list[Sample]], int]:
    args = make_args(
        actor_num_gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
        micro_batch_size=draw(st.integers(1, 3)),
        global_batch_size=draw(st.integers(1, 8)),
        use_dynamic_batch_size=draw(st.booleans()),
    )
    groups, rid = [], 0
    for group in range(draw(st.integers(1, 5))):
        samples = []
        for _ in range(draw(st.integers(1, 4))):
            samples += [real(group, rid) for _ in range(draw(st.integers(1, 3)))]
            rid += 1
        groups.append(samples)
    return args, groups, rid


@settings(max_examples=300, deadline=None)
@given(steps())
def test_no_real_sample_is_dropped(step: tuple[Any, list[list[Sample]], int]) -> None:
    args, groups, next_id = step
    real_count = sum(len(g) for g in groups)
    group_sizes = [len(g) for g in groups]
    pad_for_dp(groups, dp_layout(args), padding, next_rollout_id=next_id)
    samples = flatten(groups)
    kept = trained_positions(args, samples, dp_size=dp_layout(args).dp_size)
    real_positions = {i for i, s in enumerate(samples) if not is_padding(s)}
    assert len(real_positions) == real_count and real_positions <= kept
    assert all(len(g) >= size for g, size in zip(groups, group_sizes, strict=True))
    assert all(s.group_index == i for i, g in enumerate(groups) for s in g)
