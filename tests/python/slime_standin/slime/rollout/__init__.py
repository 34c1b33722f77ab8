"""Stand-in of ``slime.rollout``."""
