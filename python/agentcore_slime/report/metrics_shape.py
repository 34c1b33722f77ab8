"""What the report reads from a ``metrics.jsonl`` line, and how a partial line still shows.

A metrics line may come from another version of the toolkit, from a run killed mid-write
(only a last line can be cut, and the reader drops it), or from a hand edit. The report must
not fail on it: every field it uses is checked against :data:`SHAPE`; a missing or mistyped
field becomes "no value" (a blank cell, a gap in a plot) and is named in a note; a line the
report cannot place at all (not JSON, not an object, no integer ``step``, no known ``kind``)
is skipped and named too. The page and stderr carry the notes, so a blank is never silent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NUMBER = "number"
INTEGER = "integer"
TEXT = "text"
COUNTS = "counts"  #: a mapping name -> count, e.g. failed_by_reason

#: every field the page or a plot reads, with its kind; nested dicts are sub-objects
SHAPE: dict[str, Any] = {
    "dataset": TEXT,
    "step_seconds": NUMBER,
    "session_seconds": NUMBER,
    "groups_without_signal": INTEGER,
    "episodes": {
        "started": INTEGER,
        "succeeded": INTEGER,
        "failed": INTEGER,
        "failed_by_reason": COUNTS,
    },
    "reward": {"mean": NUMBER, "std": NUMBER, "min": NUMBER, "max": NUMBER, "pass_rate": NUMBER},
    "tokens": {"prompt": INTEGER, "sampled": INTEGER},
    "turns": {"p50": NUMBER, "p90": NUMBER, "max": NUMBER},
    "episode_seconds": {"p50": NUMBER, "p90": NUMBER, "max": NUMBER},
}
KINDS = ("train", "eval")
#: the largest step a plot can place (a float holds every integer up to it exactly)
MAX_STEP = 2**53
#: the largest magnitude of a number the page shows: far above any real reward, count or
#: duration, and far enough below a float's limit that matplotlib's axis arithmetic cannot overflow
MAX_MAGNITUDE = 1e15
#: notes listed one by one before the rest are only counted
SHOWN_NOTES = 10


@dataclass
class LineNotes:
    """What the report could not show of a file: lines skipped, fields left blank."""

    file: str
    skipped: list[str] = field(default_factory=list)  #: "line 7: not JSON"
    partial: list[str] = field(default_factory=list)  #: "line 9 lacks episodes.failed_by_reason"

    def summary(self) -> list[str]:
        """One sentence per kind of loss (none when everything showed)."""
        out = []
        if self.skipped:
            out.append(f"skipped {_lines(len(self.skipped))} of {self.file}: {_listed(self.skipped)}")
        if self.partial:
            out.append(f"showed {_lines(len(self.partial))} of {self.file} in part: {_listed(self.partial)}")
        return out


def _lines(count: int) -> str:
    return f"{count} line" + ("" if count == 1 else "s")


def _listed(notes: list[str]) -> str:
    text = "; ".join(notes[:SHOWN_NOTES])
    more = len(notes) - SHOWN_NOTES
    return text + (f"; and {more} more" if more > 0 else "")


#: what :func:`numbered_json_lines` yields for a line that is not JSON
NOT_JSON = object()


def numbered_json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value or NOT_JSON)`` for each complete line of ``path``.

    A last line without its newline is still being written and is left out; bytes that are
    not UTF-8 are replaced rather than failing the read.

    :param path: a JSONL file; a missing file reads as empty.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            yield number, NOT_JSON


def _is_number(value: Any) -> bool:
    """An int or float (not a bool) within :data:`MAX_MAGNITUDE`: what a plot can place."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return abs(float(value)) <= MAX_MAGNITUDE  # False for NaN
    except OverflowError:  # an int too large for a float
        return False


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not _is_number(value):
        return "a number out of range"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )


def _checked(value: Any, kind: str) -> tuple[Any, str | None]:
    """``value`` if it is of ``kind`` (None is "no value" and always allowed), else None and why."""
    if value is None:
        return None, None
    if kind == NUMBER and _is_number(value):
        return value, None
    if kind == INTEGER and _is_number(value) and float(value).is_integer():
        return value, None
    if kind == TEXT and isinstance(value, str):
        return value, None
    if kind == COUNTS and isinstance(value, dict):
        counts = {str(k): v for k, v in value.items() if _is_number(v) and v >= 0}
        return counts, (None if len(counts) == len(value) else "has counts that are not numbers")
    wanted = {NUMBER: "a number", INTEGER: "an integer", TEXT: "a string", COUNTS: "an object"}[kind]
    return None, f"is {_kind_of(value)}, not {wanted}"


def _conform(line: dict[str, Any], shape: dict[str, Any], prefix: str, problems: list[str]) -> dict[str, Any]:
    """A copy of ``line`` with every field of ``shape`` present and of its kind."""
    out = dict(line)
    for key, kind in shape.items():
        name = prefix + key
        if isinstance(kind, dict):
            value = line.get(key)
            if isinstance(value, dict):
                out[key] = _conform(value, kind, name + ".", problems)
                continue
            # the whole object is missing or mistyped: one note for it, not one per field
            problems.append(
                f"lacks {name}" if key not in line else f"{name} is {_kind_of(value)}, not an object"
            )
            out[key] = _conform({}, kind, name + ".", [])
            continue
        if key not in line:
            if prefix or key != "dataset":  # a training line of an old version has no dataset
                problems.append(f"lacks {name}")
            out[key] = {} if kind == COUNTS else None
            continue
        value, problem = _checked(line[key], kind)
        if problem:
            problems.append(f"{name} {problem}")
        out[key] = {} if kind == COUNTS and value is None else value
    return out


def conform_line(number: int, value: Any, notes: LineNotes) -> dict[str, Any] | None:
    """The line as the report can show it, or None when it cannot be placed (noted either way).

    :param number: the line's number in the file (for the notes).
    :param value: the parsed line (or :data:`NOT_JSON`).
    :param notes: where to say what was skipped or left blank.
    """
    if value is NOT_JSON:
        notes.skipped.append(f"line {number} is not JSON")
        return None
    if not isinstance(value, dict):
        notes.skipped.append(f"line {number} is {_kind_of(value)}, not an object")
        return None
    step = value.get("step")
    if not (isinstance(step, int) and not isinstance(step, bool)) or not 0 <= step <= MAX_STEP:
        notes.skipped.append(
            f"line {number} " + ("lacks step" if "step" not in value else "has no usable step")
        )
        return None
    if value.get("kind") not in KINDS:
        notes.skipped.append(
            f"line {number} " + ("lacks kind" if "kind" not in value else "has an unknown kind")
        )
        return None
    problems: list[str] = []
    line = _conform(value, SHAPE, "", problems)
    if problems:
        notes.partial.append(
            f"line {number} " + ", ".join(problems[:3]) + (", ..." if len(problems) > 3 else "")
        )
    return line
