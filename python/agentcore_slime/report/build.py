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

    @property
    def exp_id(self) -> str:
        """The run's name (its directory's)."""
        return self.run_dir.name


def load_run(run_dir: Path) -> RunData:
    """Read ``metrics.jsonl`` and the recorded episodes of ``run_dir``.

    A step recorded twice (a rerun that resumed before it) shows its latest record.

    :param run_dir: ``runs/<EXP_ID>/``.
    """
    data = RunData(run_dir)
    train: dict[int, dict[str, Any]] = {}
    evals: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for line in read_json_lines(run_dir / METRICS_FILE):
        step = line.get("step")
        if not isinstance(step, int):
            continue
        if line.get("kind") == "train":
            train[step] = line
        elif line.get("kind") == "eval":
            evals[str(line.get("dataset") or "eval")][step] = line
    data.train = [train[s] for s in sorted(train)]
    data.eval = {name: [steps[s] for s in sorted(steps)] for name, steps in sorted(evals.items())}
    data.episode_files = _episode_files(run_dir / EPISODES_DIR)
    data.evaluations = _evaluations(run_dir / "eval")
    return data


def _evaluations(folder: Path) -> list[dict[str, Any]]:
    """bin/eval's ``eval/<UTC time>/summary.json`` files, oldest first, each with its ``when``."""
    found = []
    for path in sorted(folder.glob("*/summary.json")) if folder.is_dir() else []:
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # an evaluation still being written, or a broken file: not this page's to fail
        if isinstance(summary, dict):
            found.append({**summary, "when": path.parent.name})
    return found


def _episode_files(folder: Path) -> list[EpisodeFile]:
    files = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        match = _EPISODES_NAME.match(path.name)
        if not match:
            continue
        episodes = []
        for line in read_json_lines(path):
            try:
                episodes.append(EpisodeRecord.from_json(line))
            except TypeError:
                continue  # a record of another version: skip it rather than fail the page
        files.append(EpisodeFile(match["kind"], int(match["step"]), match["dataset"] or "", episodes))
    files.sort(key=lambda f: (f.step, f.kind != "train", f.dataset))
    return files
