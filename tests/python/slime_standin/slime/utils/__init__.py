"""Stand-in of ``slime.utils``."""
