"""bin/report on what a run may hold: any eval dataset name, any partial or mistyped metrics line.

Issue 23 item 7: a dataset named ``a $\\frac{$ b`` made matplotlib's mathtext raise, and a metrics
line without ``failed_by_reason`` raised a KeyError, so no page at all. The report must show
what it can and say (on the page and on stderr) what it skipped. Runs are written through the
production writer (observe.RunLog); the nasty cases also go through ``bin/report`` as a user runs it.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import markupsafe
import pytest
from agentcore_slime.observe import RunLog
from agentcore_slime.observe.metrics import step_metrics
from agentcore_slime.report import load_run, write_report
from agentcore_slime.report.metrics_shape import INTEGER, MAX_MAGNITUDE, NUMBER, SHAPE
from fakes.recorded_run import step_records, write_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]
MATHTEXT = "a $\\frac{$ b"
NASTY_NAMES = [
    MATHTEXT,
    "$",
    "$$x^2$$",
    "\\",
    "_hidden",
    "<script>window.__pwned=1</script>",
    "a\x00b",
    "\ud800 lone surrogate",
    "x" * 400,
    "{{ data }}",
    "%s %d",
    "line\nbreak",
    "\u202eevil",
]
SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _fresh_run(tmp_path: Path) -> Path:
    """A new run directory under tmp_path (hypothesis reuses the fixture across examples)."""
    run = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"
    run.mkdir()
    (run / "train.sh").write_text("#!/usr/bin/env bash\n")
    return run


def _eval_step(run: Path, name: str) -> None:
    log = RunLog(str(run), record_episodes=2, num_rollout=4)
    log.step("train", 0, step_records(0), 10.0)
    log.step("eval", 0, step_records(1), 5.0, dataset=name)


@SETTINGS
@given(
    name=st.one_of(st.sampled_from(NASTY_NAMES), st.text(st.characters(exclude_categories=()), max_size=60))
)
def test_any_dataset_name_gets_a_page_that_shows_it_as_text(tmp_path: Path, name: str) -> None:
    run = _fresh_run(tmp_path)
    _eval_step(run, name)
    notes: list[str] = []
    page = write_report(run, notes).read_bytes().decode("utf-8")
    assert notes == []  # a well-formed line: nothing skipped
    assert page.count("<script>") == 1  # the step selector only
    assert len([img for img in page.split('<img src="data:image/svg+xml;base64,')[1:]]) == 5
    shown = (name or "eval").encode("utf-8", "replace").decode("utf-8")
    assert f"Evaluation: {markupsafe.escape(shown)}</h2>" in page


def test_the_mathtext_name_is_a_name_in_the_plot_too(tmp_path: Path) -> None:
    """The legend is drawn as plain text (matplotlib notes each text it draws in a comment)."""
    import base64

    run = _fresh_run(tmp_path)
    _eval_step(run, MATHTEXT)
    page = write_report(run).read_text()
    reward_svg = base64.b64decode(page.split('<img src="data:image/svg+xml;base64,')[1].split('"')[0])
    assert b"<!-- eval a $\\frac{$ b -->" in reward_svg


# --- metrics lines with fields dropped or of the wrong type ------------------------------------


def _paths(shape: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for key, kind in shape.items():
        out.append((*prefix, key))
        if isinstance(kind, dict):
            out += _paths(kind, (*prefix, key))
    return out


def _kind_at(path: tuple[str, ...]) -> Any:
    kind: Any = SHAPE
    for key in path:
        kind = kind[key]
    return kind


READ_PATHS = _paths(SHAPE) + [("step",), ("kind",)]
JUNK = st.one_of(
    st.text(max_size=5).filter(lambda t: t not in ("train", "eval")),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.sampled_from([math.nan, math.inf, -math.inf, 10**400]),
)
MUTATION = st.tuples(st.sampled_from(READ_PATHS), st.one_of(st.just("drop"), JUNK))


def _good_line(step: int) -> dict[str, Any]:
    return step_metrics("train", step, step_records(step), 30.0, wall_time=1.8e9)


def _apply(line: dict[str, Any], path: tuple[str, ...], change: Any) -> bool:
    """Drop or replace ``path`` in ``line``; False when its parent is gone already."""
    parent: Any = line
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    if not isinstance(parent, dict):
        return False
    if path == ("dataset",) and isinstance(change, str):
        return False  # any text is a valid name, and a training line of an old version has none
    if isinstance(change, str) and change == "drop":
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = change
    return True


def _write_lines(run: Path, lines: list[str]) -> None:
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@SETTINGS
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_a_line_with_fields_dropped_or_mistyped_is_shown_in_part_and_named(
    tmp_path: Path, mutations: list[tuple[tuple[str, ...], Any]]
) -> None:
    run = _fresh_run(tmp_path)
    broken = copy.deepcopy(_good_line(1))
    applied = [path for path, change in mutations if _apply(broken, path, change)]
    _write_lines(run, [json.dumps(_good_line(0)), json.dumps(broken, default=str), json.dumps(_good_line(2))])
    notes: list[str] = []
    page = write_report(run, notes).read_bytes().decode("utf-8")
    table = page.split('<table id="steps">', 1)[1].split("</table>", 1)[0]
    assert "<tr><td>0</td>" in table and "<tr><td>2</td>" in table  # the intact lines always show
    text = " ".join(notes)
    assert "line 1 " not in text and "line 3 " not in text
    if applied:
        assert "line 2 " in text, (applied, broken)
        assert all(markupsafe.escape(note) in page for note in notes)


LEAVES = [path for path in _paths(SHAPE) if _kind_at(path) in (NUMBER, INTEGER)]
EXTREME = st.one_of(
    st.floats(min_value=MAX_MAGNITUDE * 1.01, allow_infinity=False),
    st.floats(max_value=-MAX_MAGNITUDE * 1.01, allow_infinity=False),
    st.integers(min_value=10**16),
)

IN_RANGE = st.floats(-MAX_MAGNITUDE, MAX_MAGNITUDE)


@SETTINGS
@given(path=st.sampled_from(LEAVES), value=EXTREME)
def test_a_number_too_large_to_plot_is_left_blank_and_named(
    tmp_path: Path, path: tuple[str, ...], value: Any
) -> None:
    """matplotlib's tick arithmetic overflowed on a reward max of 1.7e308 (ValueError: arange)."""
    run = _fresh_run(tmp_path)
    line = copy.deepcopy(_good_line(1))
    _apply(line, path, value)
    _write_lines(run, [json.dumps(_good_line(0)), json.dumps(line)])
    notes: list[str] = []
    write_report(run, notes)
    wanted = "a number" if _kind_at(path) == NUMBER else "an integer"
    said = f"line 2 {'.'.join(path)} is a number out of range, not {wanted}"
    assert notes == [f"showed 1 line of metrics.jsonl in part: {said}"]


@SETTINGS
@given(changes=st.lists(st.tuples(st.sampled_from(LEAVES), IN_RANGE), max_size=6))
def test_any_number_in_range_plots(tmp_path: Path, changes: list[tuple[tuple[str, ...], float]]) -> None:
    run = _fresh_run(tmp_path)
    line = copy.deepcopy(_good_line(1))
    for path, value in changes:
        _apply(line, path, value)
    _write_lines(run, [json.dumps(_good_line(0)), json.dumps(line)])
    page = write_report(run).read_text()
    assert page.count('<img src="data:image/svg+xml;base64,') == 5


@pytest.mark.parametrize("step", [10**400, 2**53 + 1, -1, 1.0, True, "1"])
def test_a_line_whose_step_cannot_be_placed_is_skipped_and_named(tmp_path: Path, step: Any) -> None:
    run = _fresh_run(tmp_path)
    _write_lines(run, [json.dumps(_good_line(0)), json.dumps({**_good_line(1), "step": step})])
    notes: list[str] = []
    write_report(run, notes)
    assert notes == ["skipped 1 line of metrics.jsonl: line 2 has no usable step"]


@SETTINGS
@given(cut=st.integers(min_value=1, max_value=400), junk=st.binary(max_size=40))
def test_a_cut_or_garbled_line_is_skipped_and_named(tmp_path: Path, cut: int, junk: bytes) -> None:
    run = _fresh_run(tmp_path)
    whole = json.dumps(_good_line(1))
    lines = [json.dumps(_good_line(0)), whole[: min(cut, len(whole) - 1)]]
    (run / "metrics.jsonl").write_bytes(
        "".join(line + "\n" for line in lines).encode() + junk.replace(b"\n", b" ") + b"\n"
    )
    data = load_run(run)  # what the page shows (the page itself: the tests above)
    assert [line["step"] for line in data.train] == [0]
    assert data.notes and "skipped" in data.notes[0] and "line 2 is not JSON" in data.notes[0]


def test_bin_report_survives_the_mathtext_name_and_a_line_without_failed_by_reason(tmp_path: Path) -> None:
    """The two crashes of item 7, through bin/report as a user runs it."""
    run = tmp_path / "runs" / "demo"
    write_run(run, steps=3)
    RunLog(str(run), 2, 10).step("eval", 2, step_records(2), 5.0, dataset=MATHTEXT)
    line = _good_line(3)
    del line["episodes"]["failed_by_reason"]
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
    number = len((run / "metrics.jsonl").read_text().splitlines())
    env = {"PATH": "/usr/bin:/bin", "TOOLKIT_PYTHON": sys.executable, "HOME": str(tmp_path)}
    done = subprocess.run(
        [str(REPO / "bin" / "report"), str(run)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "report.html")
    said = f"showed 1 line of metrics.jsonl in part: line {number} lacks episodes.failed_by_reason"
    assert f"bin/report: warning: {said}" in done.stderr
    page = (run / "report.html").read_text()
    assert said in page and f"Evaluation: {markupsafe.escape(MATHTEXT)}</h2>" in page
    table = page.split('<table id="steps">', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 1 + 4  # steps 0-2 and the partial step 3


@pytest.mark.parametrize("summary", [{"pass_at_k": [1, 2]}, {"pass_at_k": "x", "rows": {"a": 1}}, []])
def test_a_summary_of_another_shape_does_not_break_the_page(tmp_path: Path, summary: Any) -> None:
    run = tmp_path / "runs" / "demo"
    write_run(run, steps=1)
    (run / "eval" / "20261123T101500Z" / "summary.json").write_text(json.dumps(summary))
    assert "<h2>Episodes</h2>" in write_report(run).read_text()
