"""Stand-in of ``slime.ray`` (only the reward post-processing; see the README)."""
