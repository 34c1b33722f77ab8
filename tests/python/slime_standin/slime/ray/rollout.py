"""The reward post-processing of slime's RolloutManager, torch-free (tests only).

``_post_process_rewards`` restates ``RolloutManager._post_process_rewards`` of slime ``fa3c990``
(``slime/ray/rollout.py:686-711``) as a function of ``args``: the custom hook
(``--custom-reward-post-process-path``) wins; otherwise, for ``--advantage-estimator`` grpo,
gspo, cispo or reinforce_plus_plus_baseline with ``rewards_normalization``, the rewards are
reshaped to rows of ``n_samples_per_prompt`` when there are exactly
``n_samples_per_prompt * rollout_batch_size`` of them (else one row of all), each row is
mean-centred and, for grpo, gspo and cispo with ``grpo_std_normalization``, divided by its
unbiased std + 1e-6; every other estimator gets the raw rewards back.

Differences on purpose: Python floats instead of a float32 tensor, and ``statistics.stdev``
(unbiased, like ``torch.std``) where a one-element row would give NaN in torch as well.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any


def _post_process_rewards(
    args: Any,
    samples: list[Any],
    custom_reward_post_process_func: Callable[..., Any] | None = None,
) -> tuple[list[Any], list[Any]]:
    if custom_reward_post_process_func is not None:
        return custom_reward_post_process_func(args, samples)

    raw_rewards = [sample.get_reward_value(args) for sample in samples]
    if (
        args.advantage_estimator in ["grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"]
        and args.rewards_normalization
    ):
        count = len(raw_rewards)
        width = (
            args.n_samples_per_prompt
            if count == args.n_samples_per_prompt * args.rollout_batch_size
            else count
        )
        rows = [raw_rewards[start : start + width] for start in range(0, count, width)]
        result = []
        for row in rows:
            mean = statistics.fmean(row)
            centred = [value - mean for value in row]
            if args.advantage_estimator in ["grpo", "gspo", "cispo"] and args.grpo_std_normalization:
                std = statistics.stdev(row) if len(row) > 1 else math.nan
                centred = [value / (std + 1e-6) for value in centred]
            result += centred
        return raw_rewards, result

    return raw_rewards, raw_rewards


class RolloutManager:
    """Only the reward post-processing of slime's rollout manager, as the method slime calls.

    :param args: slime's args (``advantage_estimator``, ``rewards_normalization``,
        ``grpo_std_normalization``, ``n_samples_per_prompt``, ``rollout_batch_size``).
    :param custom_reward_post_process_func: the loaded ``--custom-reward-post-process-path``.
    """

    def __init__(self, args: Any, custom_reward_post_process_func: Callable[..., Any] | None = None) -> None:
        self.args = args
        self.custom_reward_post_process_func = custom_reward_post_process_func

    def _post_process_rewards(self, samples: list[Any]) -> tuple[list[Any], list[Any]]:
        return _post_process_rewards(self.args, samples, self.custom_reward_post_process_func)
