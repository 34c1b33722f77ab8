"""Episode-level reward post-processing (slime's ``--custom-reward-post-process-path``).

slime calls ``normalize_episode_rewards(args, samples)`` with the flattened Samples of
a training step and expects ``(raw_rewards, rewards)``, one float per sample. A
multi-turn episode may produce several Samples (one per prefix-extending segment);
slime's default normalisation would count such an episode several times and assumes
fixed-size groups by position. Here an episode is counted once: samples are grouped
into episodes by ``(group_index, session id)``, one reward per episode is normalised
within its group, and the result is written back to every sample of the episode.

``reward_postprocessing`` (toolkit.yaml, env ``REWARD_POSTPROCESSING``):

- ``grpo`` (default): what slime's own ``_post_process_rewards`` computes (fa3c990,
  ``slime/ray/rollout.py:686-711``), with one reward per episode instead of per sample:
  for ``--advantage-estimator`` grpo, gspo, cispo or reinforce_plus_plus_baseline (unless
  ``--disable-rewards-normalization``) subtract the group mean, and for grpo, gspo and
  cispo with ``args.grpo_std_normalization`` (slime's default; off with
  ``--disable-grpo-std-normalization`` or ``--n-samples-per-prompt 1``) divide by the
  unbiased std + 1e-6. ``ppo``, ``reinforce_plus_plus`` and
  ``--disable-rewards-normalization`` get the raw reward, as in slime. A group with a
  single episode, or whose rewards are all equal, gets 0 when normalised.
- ``identity``: the raw reward, whatever the estimator.

Padding samples (added only to satisfy slime's batch split) keep 0 and belong to no
group. Infrastructure failures (episodes that ended without the agent's own reward, see
:mod:`agentcore_slime.episodes.runner`) are treated the same way: 0, and left out of their
group's mean and std, so a timeout does not move its siblings' advantages; a group left
with fewer than two valid episodes trains nothing. ``infra_failures: zero-reward``
(env ``INFRA_FAILURES``) keeps the old rule: a failure counts as reward 0 in its group.
The module is torch-free: it works on Python floats.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from agentcore_slime.errors import ConfigError
from agentcore_slime.observe.records import INFRASTRUCTURE
from agentcore_slime.rollout.samples import KIND_FAILED, KIND_PADDING, ShimRecord
from agentcore_slime.settings.schema import KEYS_BY_NAME, expected, parse_typed

#: estimators whose rewards slime mean-centres per group (with rewards_normalization on)
CENTRED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
#: estimators whose centred rewards slime also divides by the group std (grpo_std_normalization)
STD_ESTIMATORS = ("grpo", "gspo", "cispo")
_EPS = 1e-6


def _mode(args: Any) -> str:
    key = KEYS_BY_NAME["REWARD_POSTPROCESSING"]
    value = getattr(args, key.yaml_key, None) or os.environ.get(key.name) or None
    try:
        return str(parse_typed(key, value))
    except ValueError as exc:
        raise ConfigError(
            f"{key.yaml_key}: {value!r}: {exc}",
            f"{expected(key)}; set {key.yaml_key} in runs/<EXP_ID>/toolkit.yaml or {key.name}",
        ) from None


def excluded_from_group(args: Any, sample: Any) -> bool:
    """True for a sample outside every group's statistics: padding, and (unless
    ``infra_failures`` is ``zero-reward``) an episode that failed for infrastructure reasons."""
    record = ShimRecord.of(sample)
    if record.kind == KIND_PADDING:
        return True
    if record.kind != KIND_FAILED or (record.failure_class or INFRASTRUCTURE) != INFRASTRUCTURE:
        return False
    key = KEYS_BY_NAME["INFRA_FAILURES"]
    value = getattr(args, key.yaml_key, None) or os.environ.get(key.name) or None
    try:
        return str(parse_typed(key, value)) == "exclude"
    except ValueError as exc:
        raise ConfigError(
            f"{key.yaml_key}: {value!r}: {exc}",
            f"{expected(key)}; set {key.yaml_key} in runs/<EXP_ID>/toolkit.yaml or {key.name}",
        ) from None


def _raw_reward(args: Any, sample: Any, position: int) -> float:
    value = sample.get_reward_value(args) if hasattr(sample, "get_reward_value") else sample.reward
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"sample {position} (session {getattr(sample, 'session_id', None)}) has reward {value!r}; "
            "every sample needs a numeric reward (is --reward-key set to a key the reward dict has?)"
        )
    return float(value)


def _episode_key(sample: Any, position: int) -> tuple[Any, str]:
    session = getattr(sample, "session_id", None) or ShimRecord.of(sample).session_id
    return sample.group_index, session if session else f"#sample-{position}"


def group_normalize(values: Sequence[float], *, std_normalization: bool) -> list[float]:
    """GRPO advantages of one group: mean-centred, optionally divided by std + 1e-6.

    :param values: one reward per episode of the group.
    :param std_normalization: divide by the unbiased (n-1) std + 1e-6, as slime does.
    """
    n = len(values)
    if n < 2 or min(values) == max(values):
        return [0.0] * n
    mean = math.fsum(values) / n
    centred = [v - mean for v in values]
    if not std_normalization:
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / (n - 1))
    return [c / (std + _EPS) for c in centred]


def slime_group_rewards(values: Sequence[float], args: Any) -> list[float]:
    """What slime's reward normalization makes of one group's rewards, for ``args``' estimator.

    :param values: one reward per episode of the group.
    :param args: slime's args (``advantage_estimator``, ``rewards_normalization``,
        ``grpo_std_normalization``; slime's defaults when absent).
    """
    estimator = getattr(args, "advantage_estimator", None) or "grpo"
    if estimator not in CENTRED_ESTIMATORS or not getattr(args, "rewards_normalization", True):
        return list(values)
    std = estimator in STD_ESTIMATORS and bool(getattr(args, "grpo_std_normalization", True))
    return group_normalize(values, std_normalization=std)


def normalize_episode_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """Normalise one reward per episode within its group; write it to all its samples.

    :param args: slime's args (``reward_postprocessing``, ``advantage_estimator``,
        ``rewards_normalization``, ``grpo_std_normalization``, ``reward_key``).
    :param samples: the step's flattened Samples.
    :returns: ``(raw_rewards, rewards)``, each one float per sample.
    """
    mode = _mode(args)
    raw = [0.0] * len(samples)
    episodes: dict[tuple[Any, str], list[int]] = {}
    for position, sample in enumerate(samples):
        if excluded_from_group(args, sample):
            continue
        raw[position] = _raw_reward(args, sample, position)
        episodes.setdefault(_episode_key(sample, position), []).append(position)

    rewards = [0.0] * len(samples)
    groups: dict[Any, list[tuple[Any, str]]] = {}
    for key in episodes:
        groups.setdefault(key[0], []).append(key)
    for keys in groups.values():
        values = [raw[episodes[key][0]] for key in keys]
        normalized = values if mode == "identity" else slime_group_rewards(values, args)
        for key, value in zip(keys, normalized, strict=True):
            for position in episodes[key]:
                rewards[position] = value
    return raw, rewards
