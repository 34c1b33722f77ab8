"""Read a run directory: what the report shows (:class:`RunData`), from what the rollout wrote."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcore_slime.observe.records import EpisodeRecord
from agentcore_slime.observe.runlog import EPISODES_DIR, METRICS_FILE, read_json_lines
from agentcore_slime.report.metrics_shape import LineNotes, conform_line, numbered_json_lines

#: a rehearsal's samples, one JSON object each (evaluate/rehearse_step.py writes it)
SAMPLES_FILE = "samples.jsonl"
_EPISODES_NAME = re.compile(r"^(?P<kind>train|eval)-(?P<step>\d+)(?:-(?P<dataset>.+))?\.jsonl$")


@dataclass
class EpisodeFile:
    """The recorded episodes of one step (for eval: of one dataset)."""

    kind: str
    step: int
    dataset: str
    episodes: list[EpisodeRecord]

    @property
    def key(self) -> str:
        """A stable id for the page (an HTML id and the step selector's value)."""
        return f"{self.kind}-{self.step}" + (f"-{self.dataset}" if self.dataset else "")

    @property
    def label(self) -> str:
        """How the step selector names it."""
        return f"{self.kind} step {self.step}" + (f" ({self.dataset})" if self.dataset else "")


@dataclass
class RunData:
    """Everything the report shows, as read from the run directory."""

    run_dir: Path
    train: list[dict[str, Any]] = field(default_factory=list)
    eval: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    episode_files: list[EpisodeFile] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)  #: bin/eval's summary.json files
    notes: list[str] = field(default_factory=list)  #: what could not be shown, one sentence each
    #: a rehearsal's summary.json (``bin/eval --rehearse``: stand-ins, checks), None for a run
    rehearsal: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)  #: a rehearsal's samples.jsonl

    @property
    def exp_id(self) -> str:
        """The run's name (its directory's)."""
        return self.run_dir.name


def load_run(run_dir: Path) -> RunData:
    """Read ``metrics.jsonl`` and the recorded episodes of ``run_dir``.

    A step recorded twice (a rerun that resumed before it) shows its latest record. What
    cannot be shown (a line of another shape, a broken episode record) is left out or blank,
    and said in ``notes`` (see :mod:`.metrics_shape`).

    :param run_dir: ``runs/<EXP_ID>/``.
    """
    data = RunData(run_dir)
    train: dict[int, dict[str, Any]] = {}
    evals: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    notes = LineNotes(METRICS_FILE)
    for number, value in numbered_json_lines(run_dir / METRICS_FILE):
        line = conform_line(number, value, notes)
        if line is None:
            continue  # skipped, and noted
        if line["kind"] == "train":
            train[line["step"]] = line
        else:
            evals[line["dataset"] or "eval"][line["step"]] = line
    data.notes += notes.summary()
    data.train = [train[s] for s in sorted(train)]
    data.eval = {name: [steps[s] for s in sorted(steps)] for name, steps in sorted(evals.items())}
    data.episode_files = _episode_files(run_dir / EPISODES_DIR, data.notes)
    data.evaluations = _evaluations(run_dir / "eval")
    data.rehearsal = _rehearsal(run_dir)
    if data.rehearsal is not None:
        data.samples = [line for line in read_json_lines(run_dir / SAMPLES_FILE) if isinstance(line, dict)]
    return data


def _rehearsal(run_dir: Path) -> dict[str, Any] | None:
    """The summary of a rehearsal's directory (``"rehearsal": true``), None for anything else."""
    try:
        summary = json.loads((run_dir / "summary.json").read_bytes().decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("rehearsal") is True else None


def _evaluations(folder: Path) -> list[dict[str, Any]]:
    """bin/eval's ``eval/<UTC time>/summary.json`` files, oldest first, each with its ``when``."""
    found = []
    for path in sorted(folder.glob("*/summary.json")) if folder.is_dir() else []:
        try:
            summary = json.loads(path.read_bytes().decode("utf-8", errors="replace"))
        except (OSError, ValueError):
            continue  # an evaluation still being written, or a broken file: not this page's to fail
        if isinstance(summary, dict):
            if not isinstance(summary.get("pass_at_k"), dict):
                summary.pop("pass_at_k", None)  # another version's shape: the cell stays empty
            found.append({**summary, "when": path.parent.name})
    return found


def _showable(line: dict[str, Any]) -> EpisodeRecord:
    """The episode of one line, if the page can show it.

    :raises TypeError: a record of another version, or one a hand edit broke.
    """
    record = EpisodeRecord.from_json(line)
    if not all(isinstance(call.messages, list) for call in record.calls):
        raise TypeError("a call's messages are not a list")
    return record


def _episode_files(folder: Path, notes: list[str]) -> list[EpisodeFile]:
    files = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        match = _EPISODES_NAME.match(path.name)
        if not match:
            continue
        episodes, skipped = [], 0
        for line in read_json_lines(path):
            try:
                episodes.append(_showable(line))
            except (TypeError, ValueError, KeyError, AttributeError):
                skipped += 1  # a record of another version: skip it rather than fail the page
        if skipped:
            notes.append(f"skipped {skipped} unreadable episode record(s) of {EPISODES_DIR}/{path.name}")
        files.append(EpisodeFile(match["kind"], int(match["step"]), match["dataset"] or "", episodes))
    files.sort(key=lambda f: (f.step, f.kind != "train", f.dataset))
    return files
