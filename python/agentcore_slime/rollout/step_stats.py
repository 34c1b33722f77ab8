"""Per-step rollout statistics, counted per episode (never per segment or padding sample).

:class:`StepStats` is what one training step's log line, its ``agentcore/*`` metrics (returned
to slime with the samples) and a metrics file writer read. slime's own ``rollout/*`` metrics
count every sample, including padding and the zero-gradient samples of failed episodes
(reward 0, length 0), and each segment of a multi-segment episode separately; these do not.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from agentcore_slime.observe.records import INFRASTRUCTURE


@dataclass
class GroupRecord:
    """One finished group as the statistics see it.

    :param rewards: the rewards of its valid episodes (the agent's own outcomes).
    :param failures: the reason codes of its failed episodes.
    """

    rewards: list[float]
    failures: list[str]


@dataclass
class StepStats:
    """Counts and reward statistics of one training step.

    :param rollout_id: slime's step number.
    :param groups_started: groups whose episodes were started.
    :param groups_trained: groups returned to slime.
    :param groups_aborted: groups cancelled by the tail cut (nothing of them is trained).
    :param groups_requeued: aborted groups handed back to the data source (``--partial-rollout``).
    :param groups_dropped: finished groups not trained, by reason (filter reasons, ``surplus``...).
    :param groups_filled: dropped groups returned anyway because the cap left too few kept ones.
    :param episodes_trained: episodes of the trained groups.
    :param episodes_valid: of those, episodes with the agent's own reward.
    :param failures: of those, failed episodes by reason code (all infrastructure failures).
    :param zero_variance_groups: trained groups whose valid rewards are all equal (no signal).
    :param reward_mean: mean reward over valid episodes of the trained groups (NaN when none).
    :param pass_rate: fraction of valid episodes with a reward above 0 (NaN when none).
    :param sequences: training sequences of the valid episodes.
    :param padding_samples: zero-gradient samples added for slime's data-parallel split.
    :param seconds: wall time of the step's rollout.
    """

    rollout_id: int
    groups_started: int = 0
    groups_trained: int = 0
    groups_aborted: int = 0
    groups_requeued: int = 0
    groups_dropped: dict[str, int] = field(default_factory=dict)
    groups_filled: int = 0
    episodes_trained: int = 0
    episodes_valid: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    zero_variance_groups: int = 0
    reward_mean: float = math.nan
    pass_rate: float = math.nan
    sequences: int = 0
    padding_samples: int = 0
    seconds: float = 0.0

    def count_trained(self, groups: list[GroupRecord]) -> None:
        """Fill the episode counts and reward statistics from the trained groups."""
        rewards = [r for g in groups for r in g.rewards]
        failures: Counter[str] = Counter(f for g in groups for f in g.failures)
        self.groups_trained = len(groups)
        self.episodes_valid = len(rewards)
        self.episodes_trained = len(rewards) + sum(failures.values())
        self.failures = dict(sorted(failures.items()))
        self.zero_variance_groups = sum(1 for g in groups if g.rewards and min(g.rewards) == max(g.rewards))
        if rewards:
            self.reward_mean = math.fsum(rewards) / len(rewards)
            self.pass_rate = sum(r > 0 for r in rewards) / len(rewards)

    @property
    def episodes_failed(self) -> int:
        return self.episodes_trained - self.episodes_valid

    def metrics(self) -> dict[str, float]:
        """The ``agentcore/*`` metrics slime logs with the step (wandb, console)."""
        values: dict[str, float] = {
            "agentcore/episodes": self.episodes_trained,
            "agentcore/valid_episodes": self.episodes_valid,
            "agentcore/failed_episodes": self.episodes_failed,
            "agentcore/reward_mean": self.reward_mean,
            "agentcore/pass_rate": self.pass_rate,
            "agentcore/zero_variance_groups": self.zero_variance_groups,
            "agentcore/sequences": self.sequences,
            "agentcore/padding_samples": self.padding_samples,
            "agentcore/groups_started": self.groups_started,
            "agentcore/groups_aborted": self.groups_aborted,
            "agentcore/groups_dropped": sum(self.groups_dropped.values()),
        }
        for reason, count in self.failures.items():
            values[f"agentcore/failures/{reason}"] = count
        for reason, count in self.groups_dropped.items():
            values[f"agentcore/dropped_groups/{reason}"] = count
        return values

    def log_line(self) -> str:
        """One line: episodes by class and reason, reward statistics, what the tail cut did."""
        failures = ", ".join(f"{reason} {count}" for reason, count in self.failures.items())
        parts = [
            f"train rollout {self.rollout_id}: {self.episodes_trained} episodes, "
            f"{self.episodes_valid} succeeded, {self.episodes_failed} failed"
            + (f" ({INFRASTRUCTURE}: {failures})" if failures else ""),
            f"{self.sequences} sequences",
            f"mean reward {self.reward_mean:.4f}",
            f"pass rate {self.pass_rate:.3f}",
            f"{self.zero_variance_groups}/{self.groups_trained} groups without reward variance",
        ]
        if self.groups_started != self.groups_trained or self.groups_dropped:
            dropped = ", ".join(f"{r} {c}" for r, c in sorted(self.groups_dropped.items())) or "none"
            parts.append(
                f"groups started {self.groups_started}, aborted {self.groups_aborted} "
                f"(requeued {self.groups_requeued}), dropped: {dropped}"
                + (f", filled {self.groups_filled}" if self.groups_filled else "")
            )
        parts.append(f"{self.seconds:.1f}s")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """A plain dict (for a metrics file)."""
        return asdict(self)
