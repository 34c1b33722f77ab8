"""The report opened in a real browser: Debian's headless Chromium, driven by Playwright.

Playwright drives the system's Chromium (``executable_path``); it downloads no browser.
tests/run installs chromium when it is missing; on a machine without it this test is skipped,
except in CI (CI=true), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.report import write_report
from recorded_run import write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def page() -> Iterator[Any]:
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing (tests/run installs it: apt-get install chromium)")
        pytest.skip("chromium is not installed (tests/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 2000})
        finally:
            browser.close()


def test_the_report_loads_without_errors_and_browses_episodes(page: Any, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "demo"
    write_run(run, steps=3, record_episodes=4)
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(write_report(run).as_uri(), timeout=60_000)

    assert errors == []
    # the plots are present and drawn (an image that failed to decode has natural width 0)
    widths = page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
    assert len(widths) == 5 and min(widths) > 100
    # agent text with a script tag shows as text and never runs
    assert page.evaluate("window.__pwned === undefined") is True

    page.select_option("#step-select", "train-1")
    section = page.locator("#episodes-train-1")
    assert section.is_visible() and not page.locator("#episodes-train-2").is_visible()
    first = section.locator("details.episode").nth(0)
    first.locator("summary").click()
    text = first.inner_text()
    assert "step 1: what is 2+2?" in text and "The answer is 4." in text
    assert "tool call c1: calculator" in text
    hostile = section.locator("details.episode").nth(1)
    hostile.locator("summary").click()
    assert "<script>window.__pwned = 1</script>" in hostile.inner_text()

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    keep = os.environ.get("TOOLKIT_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_a_page_with_a_nasty_dataset_name_and_a_partial_line_loads_and_says_what_it_skipped(
    page: Any, tmp_path: Path
) -> None:
    import json

    from agentcore_slime.observe import RunLog
    from recorded_run import step_records

    run = tmp_path / "runs" / "nasty"
    write_run(run, steps=2, record_episodes=2)
    name = 'a $\\frac{$ b <img src=x onerror="window.__pwned=1">'
    RunLog(str(run), 2, 10).step("eval", 1, step_records(1), 5.0, dataset=name)
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"kind": "train", "step": 2, "episodes": {"started": 4}}) + "\n")
        handle.write("{cut\n")
    cut = len((run / "metrics.jsonl").read_text().splitlines())
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(write_report(run).as_uri(), timeout=60_000)

    assert errors == []
    assert page.evaluate("window.__pwned === undefined") is True
    widths = page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
    assert len(widths) == 5 and min(widths) > 100
    assert f"Evaluation: {name}" in page.inner_text("body")
    notes = page.locator("#notes").inner_text()
    assert f"skipped 1 line of metrics.jsonl: line {cut} is not JSON" in notes
    assert f"showed 1 line of metrics.jsonl in part: line {cut - 1} lacks step_seconds, " in notes
    assert page.locator("#steps tr").count() == 1 + 3  # steps 0, 1 and the partial step 2


@pytest.mark.parametrize("steps", [1, 6, 1000])
def test_the_plots_at_1_6_and_1000_steps_draw_in_the_browser(page: Any, tmp_path: Path, steps: int) -> None:
    """The plots' area, screenshotted (docs/images/report-1-step.png and report-1000-steps.png
    come from here: TOOLKIT_REPORT_SCREENSHOTS=DIR keeps them)."""
    run = tmp_path / "runs" / f"run{steps}"
    write_run(run, steps=steps, record_episodes=1 if steps > 100 else 2)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(write_report(run).as_uri(), timeout=60_000)
    assert errors == []
    widths = page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
    assert len(widths) == 5 and min(widths) > 100
    shot = tmp_path / f"report-{steps}.png"
    page.locator(".figures").screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000  # drawn plots, not a blank area
    keep = os.environ.get("TOOLKIT_REPORT_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / f"report-{steps}-step{'s' if steps > 1 else ''}.png")
