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


def _svg_uri(draw: Callable[[Axes], None], width: float = 6.4, height: float = 3.2) -> str:
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
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})  # no date: same run, same bytes
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


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


def _steps_axis(axes: Axes, ylabel: str) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")


def _reward(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        steps, mean = _series(data.train, "reward", "mean")
        _, low = _series(data.train, "reward", "min")
        _, high = _series(data.train, "reward", "max")
        axes.plot(steps, mean, marker="o", label="train mean (valid episodes)")
        if len(low) == len(steps) == len(high):
            axes.fill_between(steps, low, high, alpha=0.15, label="train min-max")
        for name, lines in data.eval.items():
            eval_steps, eval_mean = _series(lines, "reward", "mean")
            axes.plot(eval_steps, eval_mean, marker="s", linestyle="--", label=label(f"eval {name}"))
        _steps_axis(axes, "reward")

    return draw


def _failures(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        reasons = sorted({r for line in data.train for r in line["episodes"]["failed_by_reason"]})
        steps = [int(line["step"]) for line in data.train]
        bottom = [0.0] * len(steps)
        for reason in reasons:
            counts = [float(line["episodes"]["failed_by_reason"].get(reason, 0)) for line in data.train]
            axes.bar(steps, counts, bottom=bottom, label=label(reason))
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        if not reasons:
            axes.text(0.5, 0.5, "no failed episodes", ha="center", va="center", transform=axes.transAxes)
        _steps_axis(axes, "failed episodes")

    return draw


def _spread(data: RunData, key: str, unit: str) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        for stat, style in (("p50", "-"), ("p90", "--"), ("max", ":")):
            steps, values = _series(data.train, key, stat)
            axes.plot(steps, values, linestyle=style, marker=".", label=stat)
        _steps_axis(axes, unit)

    return draw


def _tokens(data: RunData) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        for key, label in (("prompt", "prompt tokens"), ("sampled", "sampled tokens")):
            steps, values = _series(data.train, "tokens", key)
            axes.plot(steps, values, marker=".", label=label)
        _steps_axis(axes, "tokens per step")
        twin = axes.twinx()
        steps, seconds = _series(data.train, "session_seconds")
        twin.plot(steps, seconds, color="tab:red", linestyle="--", marker="x", label="session-seconds")
        twin.set_ylabel("agent session-seconds")
        twin.legend(fontsize="small", loc="upper right")

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
        ("Turns per episode", _spread(data, "turns", "model calls"), "turns per episode p50/p90/max"),
        ("Tokens and agent time", _tokens(data), "prompt and sampled tokens, session-seconds per step"),
    ]
    return [Figure(title, _svg_uri(draw), alt) for title, draw, alt in plots]
