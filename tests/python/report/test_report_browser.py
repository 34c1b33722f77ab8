"""The report opened in a real browser: headless Chromium (Debian's) driven by Selenium.

tests/run installs chromium and chromium-driver when they are missing; on a machine without
them this test is skipped, except in CI (CI=true), where a missing browser is a failure.
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
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium/chromedriver missing (tests/run installs chromium and chromium-driver)")
        pytest.skip("chromium and chromedriver are not installed (tests/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,2000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_report_loads_without_errors_and_browses_episodes(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = tmp_path / "runs" / "demo"
    write_run(run, steps=3, record_episodes=4)
    browser.get(write_report(run).as_uri())

    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    # the plots are present and drawn (an image that failed to decode has natural width 0)
    widths = browser.execute_script(
        "return Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)"
    )
    assert len(widths) == 5 and min(widths) > 100
    # agent text with a script tag shows as text and never runs
    assert browser.execute_script("return window.__pwned === undefined") is True

    Select(browser.find_element(By.ID, "step-select")).select_by_value("train-1")
    section = browser.find_element(By.ID, "episodes-train-1")
    assert section.is_displayed()
    assert not browser.find_element(By.ID, "episodes-train-2").is_displayed()
    first = section.find_elements(By.CSS_SELECTOR, "details.episode")[0]
    first.find_element(By.TAG_NAME, "summary").click()
    text = first.text
    assert "step 1: what is 2+2?" in text and "The answer is 4." in text
    assert "tool call c1: calculator" in text
    hostile = section.find_elements(By.CSS_SELECTOR, "details.episode")[1]
    hostile.find_element(By.TAG_NAME, "summary").click()
    assert "<script>window.__pwned = 1</script>" in hostile.text

    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    keep = os.environ.get("TOOLKIT_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
