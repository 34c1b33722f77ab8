"""Pad a training step so slime's data-parallel split drops no real sample.

slime splits a step's samples by rollout id (``slime/utils/dp_schedule.py`` at the
pinned commit): ``num_steps = rollouts // global_batch_size`` and trailing rollouts
are dropped silently; within an optimizer step the micro-batch count must be a
multiple of ``dp_size`` (times the VPP micro-batch group). With static batching that
means the step's sample count must be a multiple of ``micro_batch_size * align``;
with dynamic batching bins can be split, so a multiple of ``align`` suffices.

Padding therefore (1) adds zero-gradient rollouts until the rollout count is a
multiple of ``global_batch_size``, then (2) adds zero-gradient samples to each
optimizer step, sharing the rollout id of the step's last rollout so they add no
rollout, until the step's sample count is a multiple of the required divisor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DpLayout:
    """What slime's split needs.

    :param dp_size: Megatron data-parallel size (world / (TP * PP * CP)).
    :param rollouts_per_step: ``global_batch_size``: rollouts per optimizer step.
    :param samples_multiple: each optimizer step's sample count must be a multiple of this.
    """

    dp_size: int
    rollouts_per_step: int
    samples_multiple: int


def _positive(args: Any, name: str, default: int) -> int:
    value = getattr(args, name, None)
    return int(value) if value else default


def dp_layout(args: Any) -> DpLayout:
    """Derive the split's divisors from slime's (and Megatron's) args.

    :param args: slime's args (``actor_num_nodes``, ``actor_num_gpus_per_node``,
        ``tensor/pipeline/context_model_parallel_size``, ``micro_batch_size``,
        ``global_batch_size``, ``use_dynamic_batch_size``, VPP settings).
    """
    world = _positive(args, "actor_num_nodes", 1) * _positive(args, "actor_num_gpus_per_node", 8)
    tp = _positive(args, "tensor_model_parallel_size", 1)
    pp = _positive(args, "pipeline_model_parallel_size", 1)
    cp = _positive(args, "context_parallel_size", 1)
    dp = max(1, world // (tp * pp * cp))
    vpp = _positive(args, "virtual_pipeline_model_parallel_size", 1)
    align = dp * (_positive(args, "microbatch_group_size_per_vp_stage", pp) if vpp > 1 else 1)
    micro = _positive(args, "micro_batch_size", 1)
    multiple = align if getattr(args, "use_dynamic_batch_size", False) else align * micro
    rollouts = _positive(args, "global_batch_size", micro * dp)
    return DpLayout(dp_size=dp, rollouts_per_step=rollouts, samples_multiple=multiple)


def pad_for_dp(
    groups: list[list[Any]],
    layout: DpLayout,
    make_padding: Callable[[Any, int], Any],
    next_rollout_id: int,
) -> int:
    """Append zero-gradient samples to ``groups`` in place; return how many were added.

    :param groups: the step's samples, one list per prompt group; samples of one
        episode share a rollout id; rollout ids appear in episode order.
    :param layout: the split's divisors.
    :param make_padding: ``(group_sample, rollout_id) -> Sample``: a padding sample
        attached to the group that ``group_sample`` belongs to.
    :param next_rollout_id: the first unused rollout id.
    """
    if not groups:
        return 0
    order: list[int] = []
    owner: dict[int, tuple[list[Any], int]] = {}
    for group in groups:
        for sample in group:
            rid = sample.rollout_id
            if rid not in owner:
                order.append(rid)
                owner[rid] = (group, 0)
            owner[rid] = (group, owner[rid][1] + 1)
    added = 0
    last_group = groups[-1]
    while len(order) % layout.rollouts_per_step:
        last_group.append(make_padding(last_group[0] if last_group else None, next_rollout_id))
        order.append(next_rollout_id)
        owner[next_rollout_id] = (last_group, 1)
        next_rollout_id += 1
        added += 1
    for start in range(0, len(order), layout.rollouts_per_step):
        step = order[start : start + layout.rollouts_per_step]
        count = sum(owner[rid][1] for rid in step)
        group, _ = owner[step[-1]]
        for _ in range(-count % layout.samples_multiple):
            group.append(make_padding(group[0], step[-1]))
            added += 1
    return added
