"""What a run shows its user: per-step metrics, recorded episodes and the progress line.

The rollout turns each finished episode into an :class:`~.records.EpisodeRecord` (a plain,
JSON-ready summary: no slime or gateway objects), and hands a step's records to
:func:`~.metrics.step_metrics`. The run directory receives one JSON line per step in
``metrics.jsonl`` and the chosen episodes in ``episodes/<kind>-<step>.jsonl``; ``bin/report``
(:mod:`agentcore_slime.report`) reads both back. Nothing here imports slime or the gateway.
"""

from agentcore_slime.observe.metrics import progress_line, step_metrics
from agentcore_slime.observe.records import CallRecord, EpisodeRecord
from agentcore_slime.observe.runlog import RunLog, append_json_line, read_json_lines

__all__ = [
    "CallRecord",
    "EpisodeRecord",
    "RunLog",
    "append_json_line",
    "progress_line",
    "read_json_lines",
    "step_metrics",
]
