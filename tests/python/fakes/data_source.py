"""A stand-in of slime's data source, as the rollout function sees it.

slime's ``RolloutDataSource.get_samples(n)`` (``slime/rollout/data_source.py`` at the pinned
commit) returns ``n`` prompt groups, each ``n_samples_per_prompt`` deep copies of one prompt
Sample, with ``group_index`` = a running prompt counter and ``index`` = a running sample
counter (``rollout_id`` left unset). Rows map as slime's ``Dataset`` maps them with
``--input-key prompt`` and the default ``--metadata-key metadata``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from slime.utils.types import Sample


class ListDataSource:
    """``get_samples(n)`` over a list of rows, cycled.

    :param rows: dataset rows ``{"prompt": ..., "metadata": ..., "label"?: ...}``.
    :param n_samples_per_prompt: episodes per prompt group.
    """

    def __init__(self, rows: list[dict[str, Any]], n_samples_per_prompt: int) -> None:
        self.rows = rows
        self.n = n_samples_per_prompt
        self.groups = 0
        self.samples = 0
        self.buffer: list[list[Sample]] = []

    @classmethod
    def from_jsonl(cls, path: Path, n_samples_per_prompt: int) -> ListDataSource:
        """The rows of a JSONL file (e.g. one ``examples/prepare_gsm8k.py`` wrote)."""
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return cls(rows, n_samples_per_prompt)

    def add_samples(self, groups: list[list[Sample]]) -> None:
        """Put groups back (``--partial-rollout``); ``get_samples`` hands them out first, like
        slime's ``RolloutDataSourceWithBuffer`` (which asserts full groups)."""
        assert all(len(group) == self.n for group in groups)
        self.buffer.extend(groups)

    def get_samples(self, count: int) -> list[list[Sample]]:
        groups = self.buffer[:count]
        del self.buffer[:count]
        for _ in range(count - len(groups)):
            row = self.rows[self.groups % len(self.rows)]
            prompt = Sample(
                prompt=row.get("prompt", ""), label=row.get("label"), metadata=row.get("metadata") or {}
            )
            group = []
            for _ in range(self.n):
                sample = copy.deepcopy(prompt)
                sample.group_index, sample.index = self.groups, self.samples
                self.samples += 1
                group.append(sample)
            groups.append(group)
            self.groups += 1
        return groups
