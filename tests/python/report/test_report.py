"""bin/report: the page rendered from a recorded run, its escaping, and its command line."""

from __future__ import annotations

import base64
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
from agentcore_slime.report import load_run, write_report
from agentcore_slime.report.__main__ import main
from fakes.recorded_run import HOSTILE, write_run

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "demo"
    write_run(run, steps=3, record_episodes=4)
    return run


def test_the_report_shows_every_step_plot_and_recorded_episode(run_dir: Path) -> None:
    page = write_report(run_dir).read_text()
    images = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert len(images) == 7  # five plots, cost and cost per correct answer
    for image in images:
        svg = base64.b64decode(image)
        assert svg.lstrip().startswith(b"<?xml") and b"<path" in svg
    table = page.split('<table id="steps">', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 1 + 3  # header + three steps
    assert "timeout: 1" in table
    assert "Evaluation: gsm8k" in page
    evaluations = page.split('<table id="evaluations">', 1)[1].split("</table>", 1)[0]
    assert "20261123T101500Z" in evaluations and "/models/base" in evaluations
    assert "@1 0.625, @2 0.750" in evaluations
    for step in range(3):
        assert f'id="episodes-train-{step}"' in page
        assert f"<code>s{step}-2</code>" in page  # the failed episode
    assert 'id="episodes-eval-2-gsm8k"' in page
    assert "chain broke: template changed history" in page
    cost = page.split('<table id="cost">', 1)[1].split("</table>", 1)[0]
    assert cost.count("<tr>") == 1 + 3
    # step 2: GPU 32 s at $40/h, the run so far: three steps and the eval between them (none yet)
    assert "<tr><td>2</td>" in cost and "<td>0.36</td>" in cost
    assert "<td>1.16</td>" in cost  # the run so far after step 2, as the progress line says
    assert evaluations.rstrip().endswith("<td>1.25</td></tr>")  # bin/eval's cost
    assert "tool call c1: calculator(" in page


def test_agent_text_shows_as_text(run_dir: Path) -> None:
    page = write_report(run_dir).read_text()
    assert "<script>window.__pwned" not in page
    assert "<b>bold?</b>" not in page
    assert html.escape(HOSTILE) in page or "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # the page's own step selector, nothing else


def test_a_rerun_that_resumed_shows_the_latest_record_of_a_step(run_dir: Path) -> None:
    from agentcore_slime.observe import RunLog
    from fakes.recorded_run import step_records

    RunLog(str(run_dir), 0, None).step("train", 2, step_records(0), 99.0)
    data = load_run(run_dir)
    assert [line["step"] for line in data.train] == [0, 1, 2]
    assert data.train[-1]["step_seconds"] == 99.0


def test_a_run_without_steps_yet_gets_a_page_that_says_so(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fresh"
    run.mkdir(parents=True)
    (run / "train.sh").write_text("")
    page = write_report(run).read_text()
    assert "No step has been recorded yet" in page
    assert "No episodes recorded yet" in page


def test_the_report_replaces_a_link_instead_of_writing_through_it(run_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.html"
    victim.write_text("mine")
    (run_dir / "report.html").symlink_to(victim)
    write_report(run_dir)
    assert victim.read_text() == "mine"
    assert not (run_dir / "report.html").is_symlink()


def test_cli_prints_the_path_and_refuses_what_is_not_a_run_dir(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report.html")
    assert main([str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_bin_report_runs_with_the_python_it_is_given(run_dir: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "TOOLKIT_PYTHON": sys.executable, "HOME": str(run_dir)}
    done = subprocess.run(
        [str(REPO / "bin" / "report"), str(run_dir)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run_dir / "report.html")
    usage = subprocess.run([str(REPO / "bin" / "report")], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "Usage: bin/report RUN_DIR" in usage.stderr
