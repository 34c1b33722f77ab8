"""The report's figures: matplotlib SVGs, each returned as a ``data:`` URI for an ``<img>``.

An ``<img>`` keeps every SVG in its own document (matplotlib's element ids would collide
if several were inlined in one page) and never runs script, whatever text a label holds.
Labels hold names from the run (eval datasets, failure reasons): they are drawn as plain text
(no mathtext: ``a $\\frac{$ b`` is a name, not a formula) through :func:`label`.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

    from agentcore_slime.report.build import RunData


@dataclass(frozen=True)
class Figure:
    """One plot of the report."""

    title: str
    uri: str  #: ``data:image/svg+xml;base64,...``
    alt: str


#: longest name shown in a legend
LABEL_CHARS = 40


def label(name: str) -> str:
    """``name`` as a legend shows it: printable, at most :data:`LABEL_CHARS` characters, and
    never hidden (matplotlib leaves a label starting with ``_`` out of the legend).

    :param name: a dataset name or a failure reason, as the run recorded it.
    """
    text = name.encode("utf-8", errors="replace").decode("utf-8")  # a lone surrogate from JSON
    text = "".join(c if c.isprintable() else "\N{REPLACEMENT CHARACTER}" for c in text)
    if len(text) > LABEL_CHARS:
        text = text[: LABEL_CHARS - 1] + "\N{HORIZONTAL ELLIPSIS}"
    return "\N{ZERO WIDTH SPACE}" + text if text.startswith("_") else text


def _svg_uri(draw: Callable[[Axes], None], width: float = 6.4, height: float = 3.4) -> str:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure as MplFigure

    # plain text, whatever a label holds: no mathtext (``$...$``), no LaTeX
    plain_text = {"text.parse_math": False, "text.usetex": False}
    with matplotlib.rc_context(plain_text), warnings.catch_warnings():  # type: ignore[arg-type]
        # a name in a script the default font lacks draws as boxes: that is no reason to fail
        for message in ("Glyph .* missing from font", "Matplotlib currently does not support"):
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        figure = MplFigure(figsize=(width, height), layout="constrained")
        axes = figure.add_subplot()
        draw(axes)
        _legend_below(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})  # no date: same run, same bytes
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


#: the most legend entries side by side under a plot
LEGEND_COLUMNS = 3


def _legend_below(figure: MplFigure) -> None:
    """One legend for every axes of ``figure`` (a twin axis too), below the plot: a legend
    inside the axes sits on the lines wherever the data happens to be."""
    handles, labels = [], []
    for axes in figure.axes:
        more_handles, more_labels = axes.get_legend_handles_labels()
        handles += more_handles
        labels += more_labels
    if handles:
        columns = min(len(handles), LEGEND_COLUMNS)
        figure.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize="small")


#: above this many points a line is drawn without a marker on each (they would merge into a smear)
MARKERS_UP_TO = 60


def _marker(symbol: str, points: int) -> str:
    return symbol if points <= MARKERS_UP_TO else ""


def _series(lines: list[dict[str, Any]], *path: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for line in lines:
        value: Any = line
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            steps.append(int(line["step"]))
            values.append(float(value))
    return steps, values


def _all_steps(data: RunData) -> list[int]:
    steps = {int(line["step"]) for line in data.train}
    steps.update(int(line["step"]) for lines in data.eval.values() for line in lines)
    return sorted(steps)


def _integer_ticks(axis: Any) -> None:
    """Whole-number ticks only, even when the range holds a single whole number (matplotlib's
    default falls back to 0.1 steps there: step -0.04, 0.2 failed episodes)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 5, 10], integer=True, min_n_ticks=1))


def _steps_axis(axes: Axes, steps: list[int], ylabel: str) -> None:
    """The step axis: whole steps, from the first recorded step to the last, with half a step
    (or 2% of the run) either side so a one-step run is one point in the middle, not a
    tenth-of-a-step scale around it."""
    if steps:
        first, last = min(steps), max(steps)
        pad = max(0.5, (last - first) * 0.02)
        axes.set_xlim(first - pad, last + pad)
    _integer_ticks(axes.xaxis)
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)


def _count_axis(axes: Axes) -> None:
    """A count axis: whole numbers from 0 (at least up to 1, so an all-zero series has a scale)."""
    _integer_ticks(axes.yaxis)
    low, high = axes.get_ylim()
    axes.set_ylim(0, max(high, 1) * 1.08)  # headroom: a line at the top value stays off the frame


def _reward(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        steps, mean = _series(data.train, "reward", "mean")
        _, low = _series(data.train, "reward", "min")
        _, high = _series(data.train, "reward", "max")
        axes.plot(steps, mean, marker=_marker("o", len(steps)), label="train mean (valid episodes)")
        if len(low) == len(steps) == len(high):
            axes.fill_between(steps, low, high, alpha=0.15, label="train min-max")
        for name, lines in data.eval.items():
            eval_steps, eval_mean = _series(lines, "reward", "mean")
            marker = _marker("s", len(eval_steps))
            axes.plot(eval_steps, eval_mean, marker=marker, linestyle="--", label=label(f"eval {name}"))
        _steps_axis(axes, _all_steps(data), "reward")

    return draw


#: above this many steps the failures are a stacked area, not one bar per step
BARS_UP_TO = 200


def _failures(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        reasons = sorted({r for line in data.train for r in line["episodes"]["failed_by_reason"]})
        steps = [int(line["step"]) for line in data.train]
        by_reason = [line["episodes"]["failed_by_reason"] for line in data.train]
        stacks = [[float(counts.get(reason, 0)) for counts in by_reason] for reason in reasons]
        if len(steps) > BARS_UP_TO and reasons:
            axes.stackplot(steps, stacks, labels=[label(reason) for reason in reasons], step="mid")
        else:
            bottom = [0.0] * len(steps)
            for reason, counts in zip(reasons, stacks, strict=True):
                axes.bar(steps, counts, bottom=bottom, width=0.6, label=label(reason))
                bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        if not reasons:
            axes.text(0.5, 0.5, "no failed episodes", ha="center", va="center", transform=axes.transAxes)
        _steps_axis(axes, _all_steps(data), "failed episodes")
        _count_axis(axes)

    return draw


def _spread(data: RunData, key: str, unit: str, counts: bool = False) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        for stat, style in (("p50", "-"), ("p90", "--"), ("max", ":")):
            steps, values = _series(data.train, key, stat)
            axes.plot(steps, values, linestyle=style, marker=_marker(".", len(steps)), label=stat)
        _steps_axis(axes, _all_steps(data), unit)
        if counts:
            _count_axis(axes)

    return draw


def _tokens(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        for key, name in (("prompt", "prompt tokens"), ("sampled", "sampled tokens")):
            steps, values = _series(data.train, "tokens", key)
            axes.plot(steps, values, marker=_marker(".", len(steps)), label=name)
        _steps_axis(axes, _all_steps(data), "tokens per step")
        _count_axis(axes)
        twin = axes.twinx()
        steps, seconds = _series(data.train, "session_seconds")
        marker = _marker("x", len(steps))
        twin.plot(steps, seconds, color="tab:red", linestyle="--", marker=marker, label="session-seconds")
        twin.set_ylabel("agent session-seconds")
        twin.set_ylim(bottom=0)

    return draw


def has_cost(data: RunData) -> bool:
    """Whether the run recorded its cost (metrics.jsonl lines with a `cost` entry)."""
    return any(isinstance(line.get("cost"), dict) for line in data.train)


def _run_cost(data: RunData) -> list[dict[str, Any]]:
    """Every line, training and eval, in the order the run spent (for the cumulative figures)."""
    lines = [*data.train, *(line for lines in data.eval.values() for line in lines)]

    def when(line: dict[str, Any]) -> tuple[float, int]:
        time = line.get("time")
        if isinstance(time, (int, float)) and not isinstance(time, bool):
            return float(time), int(line["step"])
        return 0.0, int(line["step"])

    return sorted(lines, key=when)


def _cost(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        lines = _run_cost(data)
        parts = (
            ("total_usd", "total (AgentCore estimate)", "-"),
            ("total_upper_usd", "total (AgentCore upper bound)", ":"),
            ("gpu_usd", "GPU nodes", "--"),
            ("acr_usd", "AgentCore Runtime (estimate)", "--"),
            ("agent_usd", "agent-reported", "--"),
        )
        for key, name, style in parts:
            steps, values = _series(lines, "cost", "run", key)
            axes.plot(steps, values, linestyle=style, marker=_marker(".", len(steps)), label=name)
        _steps_axis(axes, _all_steps(data), "USD spent so far")
        budgets = [line["cost"].get("budget_usd") for line in lines if isinstance(line.get("cost"), dict)]
        if budgets and isinstance(budgets[-1], (int, float)):
            axes.axhline(float(budgets[-1]), color="tab:red", linewidth=1, label="BUDGET_USD")
        axes.set_ylim(bottom=0)

    return draw


def _cost_per_correct(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        steps, values = _series(data.train, "cost", "run_per_correct_episode_usd")
        axes.plot(steps, values, marker=_marker("o", len(steps)), label="run so far / correct episodes")
        steps, values = _series(data.train, "cost", "per_successful_episode_usd")
        axes.plot(
            steps, values, linestyle="--", marker=_marker(".", len(steps)), label="step / successful episodes"
        )
        _steps_axis(axes, _all_steps(data), "USD per episode")
        axes.set_ylim(bottom=0)

    return draw


def figures(data: RunData) -> list[Figure]:
    """Every plot of the report, in page order (empty before the first step is recorded).

    :param data: the run.
    """
    if not data.train and not data.eval:
        return []
    plots = [
        ("Reward", _reward(data), "reward per step: train mean over valid episodes, eval means"),
        ("Failures by reason", _failures(data), "failed episodes per step, stacked by reason"),
        ("Episode duration", _spread(data, "episode_seconds", "seconds"), "episode seconds p50/p90/max"),
        ("Turns per episode", _spread(data, "turns", "model calls", True), "turns per episode p50/p90/max"),
        ("Tokens and agent time", _tokens(data), "prompt and sampled tokens, session-seconds per step"),
    ]
    if has_cost(data):
        plots += [
            ("Cost", _cost(data), "USD spent so far by part, eval steps and aborted episodes included"),
            (
                "Cost per correct answer",
                _cost_per_correct(data),
                "USD per correct and per successful episode",
            ),
        ]
    return [Figure(title, _svg_uri(draw), alt) for title, draw, alt in plots]
