"""agentcore_slime: the Python side of the toolkit that slime imports during training.

slime loads ``agentcore_slime.rollout.generate_rollout`` (the rollout function) and
``agentcore_slime.rewards.normalize_episode_rewards`` (the reward post-processing hook)
by dotted path. Nothing here imports slime at module level, so the package and its
tests work on a machine without slime, a GPU, or AWS. Each folder is one job, in layers
(docs/layout.md; tests/python/test_layout.py keeps imports going down).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
