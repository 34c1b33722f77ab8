"""``bin/report --watch RUN_DIR`` run as a user runs it, while the run's writer (observe.RunLog,
the rollout's own) records steps into the run directory."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agentcore_slime.observe import RunLog
from fakes.recorded_run import step_records, write_run

REPO = Path(__file__).resolve().parents[3]


def start_watch(run_dir: Path, *extra: str) -> subprocess.Popen[str]:
    env = {"PATH": "/usr/bin:/bin", "TOOLKIT_PYTHON": sys.executable, "HOME": str(run_dir)}
    argv = [str(REPO / "bin" / "report"), "--watch", "--interval", "0.2", *extra, str(run_dir)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition: Callable[[], bool], what: str, process: subprocess.Popen[str]) -> None:
    seconds = 60
    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"bin/report --watch ended before {what}: {process.communicate()}")
        assert time.monotonic() < deadline, f"no {what} within {seconds}s"
        time.sleep(0.1)


def page(run_dir: Path) -> str:
    try:
        return (run_dir / "report.html").read_text()
    except FileNotFoundError:
        return ""


def steps_recorded(run_dir: Path) -> int | None:
    found = re.search(r"(\d+) training steps recorded", page(run_dir))
    return int(found.group(1)) if found else None


def test_watch_rewrites_the_page_as_steps_arrive_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "live"
    write_run(run, steps=1)
    watcher = start_watch(run)
    try:
        wait_for(lambda: steps_recorded(run) == 1, "first page", watcher)
        first = page(run)
        assert "location.reload()" in first  # the live page reloads itself
        # the rollout records the next step: the page follows without another command
        RunLog(str(run), 2, 10).step("train", 1, step_records(1), step_seconds=31.0)
        wait_for(lambda: steps_recorded(run) == 2, "page with the new step", watcher)
        assert page(run) != first and "<td>1</td>" in page(run)
        watcher.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, err
    assert out.strip() == str(run / "report.html")
    assert err.strip().splitlines() == [
        f"bin/report: stopped watching (2 steps recorded); {run / 'report.html'} no longer reloads"
    ]
    assert "location.reload()" not in page(run)  # the last page stays still
    assert not list(run.glob(".*report*")) and not list(run.glob("*.tmp*"))  # no half-written page left


def test_watch_ends_by_itself_when_the_run_records_its_last_step(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "ending"
    write_run(run, steps=1)
    (run / "env").write_text("EXP_ID='ending'\nNUM_ROLLOUT='2'\n")
    watcher = start_watch(run)
    try:
        wait_for(lambda: steps_recorded(run) == 1, "first page", watcher)
        assert watcher.poll() is None  # step 0 of 2: the run goes on
        RunLog(str(run), 2, 2).step("train", 1, step_records(1), step_seconds=31.0)
        out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, err
    final = f"bin/report: the run recorded its last step (NUM_ROLLOUT=2): {run / 'report.html'} is final"
    assert err.strip() == final
    assert steps_recorded(run) == 2 and "location.reload()" not in page(run)


def test_a_bad_interval_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "bad"
    write_run(run, steps=1)
    watcher = start_watch(run, "--interval", "0")
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 2 and out == ""
    assert err.strip() == "bin/report: --interval 0: must be more than 0 seconds (e.g. --interval 5)"
    assert not (run / "report.html").exists()
