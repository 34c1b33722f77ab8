"""Render the report page of a run: the figures (:mod:`.plots`) and the template, into RUN_DIR/report.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentcore_slime.observe.runlog import write_whole
from agentcore_slime.report.build import RunData, load_run

REPORT_FILE = "report.html"


def render_report(data: RunData, reload_seconds: int | None = None) -> str:
    """The report page's HTML.

    :param data: what :func:`load_run` read.
    :param reload_seconds: the live page of ``bin/report --watch`` reloads itself this often
        (None: a page that stays as it is).
    """
    import jinja2

    from agentcore_slime.report import plots  # matplotlib: imported when a page is rendered

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,  # agent text may hold HTML: it must show as text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["pretty"] = _pretty
    template = env.get_template("report.html.j2")
    return template.render(
        data=data, figures=plots.figures(data), has_cost=plots.has_cost(data), reload_seconds=reload_seconds
    )


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def write_report(
    run_dir: Path,
    notes: list[str] | None = None,
    *,
    data: RunData | None = None,
    reload_seconds: int | None = None,
) -> Path:
    """Render ``run_dir/report.html`` (written to a new file and renamed over the last one, never
    through a link, so a reader sees one page or the other, never half; mode 0600: it shows
    session ids and agent text).

    :param run_dir: ``runs/<EXP_ID>/``.
    :param notes: receives what the page could not show (also said on the page).
    :param data: the run as already read (default: read it now).
    :param reload_seconds: see :func:`render_report`.
    :returns: the report's path.
    """
    target = run_dir / REPORT_FILE
    data = load_run(run_dir) if data is None else data
    write_whole(target, render_report(data, reload_seconds))
    if notes is not None:
        notes += data.notes
    return target
