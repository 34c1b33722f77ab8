"""``bin/report --watch RUN_DIR``: rewrite report.html whenever the run records something.

A page opened from ``file://`` cannot ask for updates, so the live page reloads itself (a small
script, only in watch mode) and keeps what the reader had open in the URL fragment (the page's
own script restores it on load). Each page is written to a new file and renamed into place
(:func:`.page.write_report`): a reload sees the last page or the new one, never half of one.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from agentcore_slime.observe.runlog import EPISODES_DIR, METRICS_FILE
from agentcore_slime.report.build import RunData
from agentcore_slime.report.page import write_report

#: seconds between two looks at the run directory (and between two reloads of the live page)
DEFAULT_INTERVAL = 5.0

Signature = tuple[tuple[str, int, int], ...]


def inputs_signature(run_dir: Path) -> Signature:
    """What the page is made of, as (name, size, mtime): it changes when the run records a step,
    an episode file or a bin/eval summary."""
    paths = [run_dir / METRICS_FILE, run_dir / "env"]
    episodes = run_dir / EPISODES_DIR
    paths += sorted(episodes.glob("*.jsonl")) if episodes.is_dir() else []
    evaluations = run_dir / "eval"
    paths += sorted(evaluations.glob("*/summary.json")) if evaluations.is_dir() else []
    found = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue  # not written yet, or gone: its absence is part of the signature
        found.append((str(path.relative_to(run_dir)), info.st_size, info.st_mtime_ns))
    return tuple(found)


def planned_steps(run_dir: Path) -> int | None:
    """NUM_ROLLOUT as bin/train wrote it into ``RUN_DIR/env`` (None when it cannot be read:
    the run's end is then not knowable and the watch goes on until Ctrl-C)."""
    from agentcore_slime.errors import ConfigError
    from agentcore_slime.settings.envfile import read_env_file

    try:
        entry = read_env_file(run_dir / "env", problems=[]).get("NUM_ROLLOUT")
        return int(entry.value) if entry and entry.value else None
    except (ConfigError, ValueError):  # no env file, or a hand edit broke it: the end is unknown
        return None


def finished(data: RunData, planned: int | None) -> bool:
    """The run recorded its last training step (rollout ids run 0 .. NUM_ROLLOUT-1)."""
    return planned is not None and any(int(line["step"]) >= planned - 1 for line in data.train)


def watch(run_dir: Path, interval: float, prog: str) -> int:
    """Rewrite ``run_dir/report.html`` on every change until the run ends or Ctrl-C.

    :param run_dir: ``runs/<EXP_ID>/``.
    :param interval: seconds between two looks (the live page reloads at the same pace).
    :param prog: the command's name for its messages.
    :returns: 0 (the run ended, or the user stopped the watch).
    """
    reload_seconds = max(1, round(interval))
    target = run_dir / "report.html"
    seen: Signature | None = None
    steps: int | None = None
    try:
        while True:
            signature = inputs_signature(run_dir)
            if signature != seen:
                seen = signature
                data, planned = _write(run_dir, reload_seconds), planned_steps(run_dir)
                if steps is None:
                    print(target, flush=True)  # the path once, as bin/report without --watch prints it
                steps = len(data.train)
                if finished(data, planned):
                    _write(run_dir, None)  # the final page: it stops reloading
                    print(
                        f"{prog}: the run recorded its last step (NUM_ROLLOUT={planned}): {target} is final",
                        file=sys.stderr,
                    )
                    return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the last page
        _write(run_dir, None)
        print(
            f"{prog}: stopped watching ({steps or 0} steps recorded); {target} no longer reloads",
            file=sys.stderr,
        )
        return 0


def _write(run_dir: Path, reload_seconds: int | None) -> RunData:
    from agentcore_slime.report.build import load_run

    data = load_run(run_dir)
    write_report(run_dir, data=data, reload_seconds=reload_seconds)
    return data
