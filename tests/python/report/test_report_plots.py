"""The report's plots read well from 1 step to thousands, checked in the SVGs bin/report wrote.

matplotlib's SVG keeps each tick label as a comment (``<!-- 0.2 -->``) in its ``xtick_N`` /
``ytick_N`` group, the axes' background as ``patch`` paths and the legend as ``legend_N`` (its frame first):
the tests read those from report.html as ``bin/report RUN_DIR`` wrote it.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.recorded_run import write_run

REPO = Path(__file__).resolve().parents[3]
TITLES = (
    "Reward",
    "Failures by reason",
    "Episode duration",
    "Turns per episode",
    "Tokens and agent time",
    "Cost",
    "Cost per correct answer",
)
#: the plots whose y axis counts things: whole-number ticks only
COUNT_PLOTS = ("Failures by reason", "Turns per episode", "Tokens and agent time")


def report_svgs(run_dir: Path) -> dict[str, str]:
    """Run ``bin/report RUN_DIR`` as a user does; the page's SVGs by figure title."""
    env = {"PATH": "/usr/bin:/bin", "TOOLKIT_PYTHON": sys.executable, "HOME": str(run_dir)}
    done = subprocess.run(
        [str(REPO / "bin" / "report"), str(run_dir)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    html = (run_dir / "report.html").read_text()
    figure = r"<figcaption>(.*?)</figcaption><img src=\"data:image/svg\+xml;base64,([^\"]+)\""
    found = re.findall(figure, html)
    return {title: base64.b64decode(uri).decode() for title, uri in found}


def first_axes(svg: str) -> str:
    """The SVG of the first axes (a twin axis is the second ``axes_N`` group)."""
    start = svg.index('<g id="axes_1">')
    end = svg.find('<g id="axes_2">')
    return svg[start : end if end > 0 else len(svg)]


def tick_labels(svg: str, axis: str) -> list[str]:
    """The tick labels of ``axis`` (``x`` or ``y``) in ``svg``, in order."""
    labels = []
    for block in re.split(rf'<g id="{axis}tick_\d+">', svg)[1:]:
        text = re.search(r"<!-- (.*?) -->", block)
        assert text, block[:300]
        labels.append(text.group(1).replace("\N{MINUS SIGN}", "-"))
    return labels


def box(path: str) -> tuple[float, float, float, float]:
    """The bounding box (x0, y0, x1, y1) of an SVG path's points."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", path)]
    xs, ys = numbers[0::2], numbers[1::2]
    return min(xs), min(ys), max(xs), max(ys)


def plot_area(svg: str) -> tuple[float, float, float, float]:
    """The first axes' data area: its background patch."""
    found = re.search(r'<g id="axes_1">\s*<g id="patch_\d+">\s*<path d="([^"]+)"', svg)
    assert found, "no axes background"
    return box(found.group(1))


def legend_boxes(svg: str) -> list[tuple[float, float, float, float]]:
    """Every legend's area: its frame, the first path of its group."""
    frames = re.findall(r'<g id="legend_\d+">\s*<g id="patch_\d+">\s*<path d="([^"]+)"', svg)
    return [box(frame) for frame in frames]


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def is_whole(text: str) -> bool:
    return re.fullmatch(r"-?\d+", text.replace(",", "")) is not None


def check_readable(svgs: dict[str, str], steps: int) -> None:
    assert tuple(svgs) == TITLES
    for title, svg in svgs.items():
        axes = first_axes(svg)
        xticks = tick_labels(axes, "x")
        assert xticks and all(is_whole(t) for t in xticks), (title, xticks)
        shown = [int(t.replace(",", "")) for t in xticks]
        assert min(shown) >= 0 and max(shown) <= max(steps - 1, 0) + max(1, steps // 20), (title, xticks)
        assert len(xticks) <= 12, (title, xticks)
        if title in COUNT_PLOTS:
            yticks = tick_labels(axes, "y")
            assert all(is_whole(t) for t in yticks), (title, yticks)
            assert int(yticks[0]) == 0, (title, yticks)
        area = plot_area(svg)
        legends = legend_boxes(svg)
        assert legends, title
        for legend in legends:
            assert not overlaps(legend, area), (title, legend, area)


def test_a_one_step_run_has_whole_steps_and_counts_and_its_legend_outside_the_data(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "smoke"
    write_run(run, steps=1)
    svgs = report_svgs(run)
    check_readable(svgs, 1)
    # the one step is the one tick: not -0.04 .. 0.04
    assert tick_labels(first_axes(svgs["Reward"]), "x") == ["0"]
    assert tick_labels(first_axes(svgs["Failures by reason"]), "x") == ["0"]


@pytest.mark.parametrize("steps", [6, 1000, 10_000])
def test_many_steps_have_whole_steps_and_counts_and_legends_outside(tmp_path: Path, steps: int) -> None:
    run = tmp_path / "runs" / f"run{steps}"
    write_run(run, steps=steps, record_episodes=1 if steps > 100 else 2)
    check_readable(report_svgs(run), steps)
