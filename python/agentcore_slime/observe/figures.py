"""The evaluation figures, defined once: bin/eval's ``summary.json`` and screen, the eval lines of
``metrics.jsonl``, the report, and what the rollout hands slime for ``eval/<name>`` all use these.

The rule is training's: an infrastructure failure (the agent never returned a reward: timeout,
crash, unreachable gateway, cut at the eval deadline...) says nothing about the model, so it is
left out of the reward figures and counted apart.

- ``reward_mean``: the mean reward over the valid episodes (those whose agent returned a reward);
- ``accuracy``: the share of valid episodes with a reward above 0;
- ``episodes`` / ``valid`` / ``failed`` and ``failed_by_reason``: the counts, failures apart.

With no valid episode (every episode of a dataset failed) both rates have no value: ``None`` in
JSON, "n/a" on screen and in the report, and NaN for slime (:func:`slime_value`), which logs
numbers only; slime then plots a gap, never a division by zero or a made-up 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EvalFigures:
    """The figures of one evaluation (one dataset of one eval step, or one bin/eval run).

    :param episodes: episodes run.
    :param valid: of those, episodes whose agent returned a reward.
    :param failed: of those, infrastructure failures (no reward).
    :param reward_mean: mean reward over the valid episodes (None when there are none).
    :param accuracy: share of valid episodes with a reward above 0 (None when there are none).
    :param failed_by_reason: failures by reason code.
    """

    episodes: int
    valid: int
    failed: int
    reward_mean: float | None
    accuracy: float | None
    failed_by_reason: dict[str, int] = field(default_factory=dict)


def is_correct(reward: float | None) -> bool:
    """A valid episode is correct when its reward is above 0 (as slime's eval counts a pass)."""
    return reward is not None and reward > 0


def eval_figures(rewards: Sequence[float | None], failures: Sequence[str | None] = ()) -> EvalFigures:
    """The figures of episodes given by their rewards (``None`` = the episode failed).

    :param rewards: one per episode; ``None`` for an infrastructure failure.
    :param failures: the reason codes of the failed episodes (any order; ``None`` counts as "unknown").
    """
    valid = [r for r in rewards if r is not None]
    return EvalFigures(
        episodes=len(rewards),
        valid=len(valid),
        failed=len(rewards) - len(valid),
        reward_mean=math.fsum(valid) / len(valid) if valid else None,
        accuracy=sum(map(is_correct, valid)) / len(valid) if valid else None,
        failed_by_reason=dict(sorted(Counter(code or "unknown" for code in failures).items())),
    )


def slime_value(value: float | None) -> float:
    """A figure as slime logs it: NaN for "no value" (slime's loggers take numbers only)."""
    return math.nan if value is None else value


__all__ = ["EvalFigures", "eval_figures", "is_correct", "slime_value"]
