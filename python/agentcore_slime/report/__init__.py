"""``bin/report RUN_DIR``: one self-contained HTML page that shows what a run is doing.

It reads what the rollout wrote into the run directory (``metrics.jsonl`` and
``episodes/*.jsonl``, see :mod:`agentcore_slime.observe`) and writes ``RUN_DIR/report.html``:
reward and eval curves, failures by reason, episode durations, turns, tokens and
session-seconds per step, a table of steps, and an episode browser. The plots are
matplotlib SVGs inlined as data URIs and the page is rendered by Jinja2 with
autoescaping, so it opens offline and agent text (which may hold HTML) shows as text.
It works on a run that is still going (rerun it to refresh) and on one that died.
"""

from agentcore_slime.report.build import RunData, load_run
from agentcore_slime.report.page import write_report

__all__ = ["RunData", "load_run", "write_report"]
