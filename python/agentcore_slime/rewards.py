"""slime's reward hook, at the path every rendered script names
(``--custom-reward-post-process-path agentcore_slime.rewards.normalize_episode_rewards``).

The code is :mod:`agentcore_slime.rollout.rewards`; this module keeps the entry point's path.
"""

from __future__ import annotations

from agentcore_slime.rollout.rewards import normalize_episode_rewards

__all__ = ["normalize_episode_rewards"]
