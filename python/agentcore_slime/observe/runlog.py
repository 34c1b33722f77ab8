"""The run directory's record of a run: ``metrics.jsonl`` and ``episodes/<kind>-<step>.jsonl``.

Both are written so that a reader (``bin/report``, ``tail -f``) never sees half a record,
even when the run is killed mid-write: a metrics line is appended with one ``write`` on a
descriptor opened ``O_APPEND`` (and a reader skips a last line without its newline), an
episodes file is written beside its final name and renamed over it. Neither write follows
a symbolic link: the run directory is the user's, and a link there is not ours to write through.
Both hold live session ids and agent traces: only the run's owner reads them (files 0600,
``episodes/`` 0700, whatever the umask; an earlier run's metrics.jsonl is tightened, not replaced).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentcore_slime.observe.metrics import fork_warning, progress_line, step_metrics
from agentcore_slime.observe.records import EpisodeRecord, select_for_browser
from agentcore_slime.rundir import PRIVATE_FILE_MODE, private_dir, write_atomic

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
EPISODES_DIR = "episodes"


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as None: strict JSON, which browsers parse."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _dumps(record: Any) -> str:
    return json.dumps(_json_safe(record), default=str, allow_nan=False, ensure_ascii=False)


def append_json_line(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line, in one write, never through a symbolic link.

    :param path: the JSONL file (created mode 0600; an existing one loses its group and other bits).
    :param record: a JSON-ready dict (NaN and infinities are written as null).
    :raises OSError: ``path`` is a link or not a regular file (a FIFO would block the rollout).
    """
    data = _dumps(record).encode("utf-8", errors="replace") + b"\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        _private_regular_file(fd, path)
        written = os.write(fd, data)
        while written < len(data):  # a regular file takes it whole; this is belt and braces
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


def _private_regular_file(fd: int, path: Path) -> None:
    """Refuse what is not a regular file; take group and other access away from an older file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    if info.st_mode & 0o077:
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)


def read_json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The complete JSON lines of ``path``; a last line without its newline is still being written.

    :param path: a JSONL file; a missing file reads as empty.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    lines = text.split("\n")
    for number, line in enumerate(lines[:-1], start=1):  # lines[-1] is "" or a partial line
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            logger.warning("%s:%d: not JSON, skipped", path, number)
            continue
        if isinstance(value, dict):
            yield value


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` whole, as bin/train writes the run directory (``rundir.write_atomic``):
    a reader sees the old file or the new one, and a symbolic link at ``path`` is replaced, never
    followed.

    :param path: the file to (re)write, mode 0600 (only the run's owner reads it).
    :param text: its new content (text that is not valid Unicode, a lone surrogate from a
        decoded JSON escape, is replaced rather than failing the write).
    """
    write_atomic(path, text.encode("utf-8", errors="replace"), PRIVATE_FILE_MODE)


class RunLog:
    """Writes a run's metrics and recorded episodes, and prints the progress line.

    :param run_dir: ``runs/<EXP_ID>/`` (None: nothing is written, the progress line still shows).
    :param record_episodes: episodes per step kept for the browser, besides every failed one.
    :param num_rollout: the run's total training steps, for the ETA (None: no ETA).
    """

    def __init__(self, run_dir: str | None, record_episodes: int, num_rollout: int | None) -> None:
        self.run_dir = Path(run_dir) if run_dir else None
        self.record_episodes = record_episodes
        self.num_rollout = num_rollout
        self._train_seconds = 0.0
        self._train_steps = 0
        self._fork_warned = False  # the fork warning shows once per run (per process)

    def step(
        self,
        kind: str,
        step: int,
        records: list[EpisodeRecord],
        step_seconds: float,
        dataset: str = "",
        sampling: dict[str, Any] | None = None,
        cost: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record one step (or one eval dataset of an eval step) and show its progress line.

        A failure to write is logged, never raised: the run goes on without its record.

        :param kind: ``train`` or ``eval``.
        :param step: slime's rollout id.
        :param records: the step's episodes.
        :param step_seconds: wall time of the step.
        :param dataset: the eval dataset ("" for training).
        :param sampling: the step's group counts (started, aborted, dropped, ...), kept as they are.
        :param cost: what the step cost and the run has spent (rollout/costs.py), kept as it is.
        :returns: the metrics line.
        """
        metrics = step_metrics(kind, step, records, step_seconds, wall_time=time.time(), dataset=dataset)
        if sampling is not None:
            metrics["sampling"] = sampling
        if cost is not None:
            metrics["cost"] = cost
        if kind == "train":
            self._train_seconds += step_seconds
            self._train_steps += 1
        if self.run_dir is not None:
            try:
                self._write(kind, step, records, metrics, dataset)
            except OSError as exc:
                logger.warning("could not record step %d in %s: %s", step, self.run_dir, exc)
        line = progress_line(metrics, self.num_rollout, self._train_seconds, self._train_steps)
        warning = None if self._fork_warned or kind != "train" else fork_warning(metrics)
        if warning is not None:
            self._fork_warned = True
            line += f" | {warning}"
        # stderr, not the logger: slime's job log and the terminal show it whatever the log config
        print(f"[agentcore] {line}", file=sys.stderr, flush=True)
        return metrics

    def _write(
        self, kind: str, step: int, records: list[EpisodeRecord], metrics: dict[str, Any], dataset: str
    ) -> None:
        assert self.run_dir is not None
        append_json_line(self.run_dir / METRICS_FILE, metrics)
        chosen = select_for_browser(records, self.record_episodes)
        if not chosen:
            return
        folder = private_dir(self.run_dir / EPISODES_DIR)  # refuses a link there
        name = f"{kind}-{step:06d}" + (f"-{_safe(dataset)}" if dataset else "") + ".jsonl"
        write_whole(folder / name, "".join(_dumps(r.to_json()) + "\n" for r in chosen))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
