"""Stand-in of ``slime.rollout.filter_hub.dynamic_sampling_filters`` at ``fa3c990`` (torch-free).

``check_reward_nonzero_std(args, samples, **kwargs)``: keep a group whose rewards have an
unbiased (torch ``std()``) standard deviation above 1e-6; otherwise drop it with reason
``zero_std_<first reward rounded to 0.1>``. A one-sample group has a NaN std in torch, and
``NaN > 1e-6`` is False, so it is dropped too.
"""

from __future__ import annotations

import math
from typing import Any

from slime.rollout.filter_hub.base_types import DynamicFilterOutput
from slime.utils.types import Sample

__all__ = ["check_reward_nonzero_std"]


def _torch_std(values: list[float]) -> float:
    if len(values) < 2:
        return math.nan
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def check_reward_nonzero_std(args: Any, samples: list[Sample], **kwargs: Any) -> DynamicFilterOutput:
    rewards = [sample.get_reward_value(args) for sample in samples]
    keep = _torch_std(rewards) > 1e-6
    return DynamicFilterOutput(keep=keep, reason=None if keep else f"zero_std_{round(rewards[0], 1)}")
