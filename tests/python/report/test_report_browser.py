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
from fakes.recorded_run import write_run

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
    assert len(widths) == 7 and min(widths) > 100  # five plots, then cost and cost per correct answer
    captions = page.locator("figcaption").all_inner_texts()
    assert captions[-2:] == ["Cost", "Cost per correct answer"]
    # the cost table: step 0 of the recorded run, priced by the rollout's ledger: GPU 30 s at
    # $40/h ($0.333), AgentCore 942 session-s ($0.011), three agents reporting $0.01 each
    cost_row = page.locator("#cost tr").nth(1).inner_text().split("\t")
    assert cost_row[:3] == ["0", "0.37", "0.33"]
    assert page.locator("#evaluations").inner_text().endswith("1.25")
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
    from fakes.recorded_run import step_records

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
    assert len(widths) == 7 and min(widths) > 100
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
    assert len(widths) == 7 and min(widths) > 100
    shot = tmp_path / f"report-{steps}.png"
    page.locator(".figures").screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000  # drawn plots, not a blank area
    keep = os.environ.get("TOOLKIT_REPORT_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / f"report-{steps}-step{'s' if steps > 1 else ''}.png")


def test_the_live_page_reloads_and_keeps_the_step_and_the_open_episodes(page: Any, tmp_path: Path) -> None:
    """The page bin/report --watch writes (reload_seconds) reloads itself; what the reader chose
    is in the fragment and comes back after the reload, and from a link with that fragment."""
    run = tmp_path / "runs" / "live"
    write_run(run, steps=3, record_episodes=4)
    url = write_report(run, reload_seconds=1).as_uri()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url, timeout=60_000)
    page.select_option("#step-select", "train-1")
    page.locator("#episodes-train-1 details.episode").nth(2).locator("summary").click()
    page.wait_for_function("location.hash.indexOf('open=') >= 0")
    assert page.evaluate("location.hash") == "#step=train-1&open=ep-train-1-2"

    page.evaluate("window.__before_reload = 1")
    page.wait_for_function("window.__before_reload === undefined", timeout=30_000)  # it reloaded
    page.wait_for_load_state("load")
    assert page.evaluate("document.getElementById('step-select').value") == "train-1"
    assert page.locator("#episodes-train-1").is_visible()
    assert not page.locator("#episodes-train-2").is_visible()
    assert page.evaluate("document.getElementById('ep-train-1-2').open") is True
    assert page.evaluate("document.getElementById('ep-train-1-0').open") is False

    # a page that does not reload (plain bin/report) opens the same view from the link
    still = write_report(run).as_uri()
    page.goto("about:blank")
    page.goto(still + "#step=train-0&open=ep-train-0-1,ep-train-0-3", timeout=60_000)
    assert page.evaluate("document.getElementById('step-select').value") == "train-0"
    assert page.evaluate("document.getElementById('ep-train-0-1').open") is True
    assert page.evaluate("document.getElementById('ep-train-0-3').open") is True
    assert page.evaluate("document.getElementById('ep-train-0-0').open") is False
    assert "location.reload" not in page.content()
    # a link to another view of the same page (only the fragment changes) switches the view
    page.evaluate("location.hash = '#step=train-2&open=ep-train-2-0'")
    page.wait_for_function("document.getElementById('step-select').value === 'train-2'")
    assert page.evaluate("document.getElementById('ep-train-2-0').open") is True
    assert page.evaluate("document.getElementById('ep-train-0-1').open") is False
    assert errors == []
