"""A second local user reads nothing of a training run (issue 23, item 9).

The run directory holds live gateway session ids, agent traces and settings. The run is made
as a user makes it, under umask 000 (the loosest there is) on a disk every user can enter: the
files through ``bin/train --render-only``, the log through ``start_logging`` (the function the
rendered train.sh runs first, from templates/lib/common.sh), metrics.jsonl and episodes/
through the rollout's writer (``observe.RunLog``), report.html through ``bin/report``. An
earlier run's world-readable train.log and metrics.jsonl are tightened and kept.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentcore_slime.observe import RunLog
from fakes.recorded_run import step_records
from run_privacy import readable_by, shared_dir

REPO = Path(__file__).resolve().parents[3]
ENV = """\
EXP_ID=private-exp
S3_BUCKET=my-bucket
AGENT_URL=http://127.0.0.1:8080
MODEL_DIR=/m
DATA_PATH=/d.jsonl
MODEL_TYPE=qwen2.5-3B
"""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _as_user(argv: list[str], runs: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` as the user runs it, under umask 000 (``home``: outside the shared directory)."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home),
           "TOOLKIT_PYTHON": sys.executable, "TOOLKIT_RUNS_DIR": str(runs)}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False, umask=0)


def _write_run(run_dir: Path) -> None:
    """The rollout's records of a train and an eval step, written under umask 000."""
    old = os.umask(0)
    try:
        log = RunLog(str(run_dir), record_episodes=4, num_rollout=10)
        log.step("train", 0, step_records(0), 30.0)
        log.step("eval", 0, step_records(1), 5.0, dataset="gsm8k")
    finally:
        os.umask(old)


def test_a_second_user_reads_nothing_of_a_training_run(other_user: Any, tmp_path: Path) -> None:
    with shared_dir("acs-train-") as shared:
        runs = shared / "runs"
        run_dir = runs / "private-exp"
        run_dir.mkdir(parents=True)
        run_dir.chmod(0o755)  # an earlier version's run: everything readable
        (run_dir / "train.log").write_text("earlier attempt\n")
        (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 99}\n')
        for name in ("train.log", "metrics.jsonl"):
            (run_dir / name).chmod(0o644)
        env_file = shared / "exp.env"
        env_file.write_text(ENV)
        env_file.chmod(0o644)

        rendered = _as_user([str(REPO / "bin" / "train"), "--render-only", str(env_file)], runs, tmp_path)
        assert rendered.returncode == 0, rendered.stderr
        script = 'source "$1" && start_logging "$2" && echo "session abc" && stop_logging'
        common = REPO / "templates" / "lib" / "common.sh"
        log_file = run_dir / "train.log"
        logging = _as_user(["bash", "-c", script, "log", str(common), str(log_file)], runs, tmp_path)
        assert logging.returncode == 0, logging.stderr
        _write_run(run_dir)
        report = _as_user([str(REPO / "bin" / "report"), str(run_dir)], runs, tmp_path)
        assert report.returncode == 0, report.stderr

        assert _mode(run_dir) == 0o700 and _mode(run_dir / "episodes") == 0o700
        files = [p for p in run_dir.rglob("*") if p.is_file()]
        assert {p.name for p in files} >= {
            "train.sh", "env", "toolkit.yaml", ".rendered.json", "train.log", "metrics.jsonl", "report.html",
            "train-000000.jsonl", "eval-000000-gsm8k.jsonl",
        }
        expected = {p.name: 0o700 if p.suffix == ".sh" else 0o600 for p in files}
        assert {p.name: _mode(p) for p in files} == expected
        log = (run_dir / "train.log").read_text()
        assert log.startswith("earlier attempt\n") and log.endswith("session abc\n")  # kept, appended
        assert (run_dir / "metrics.jsonl").read_text().startswith('{"kind": "train", "step": 99}\n')

        control = shared / "control.txt"  # the probe does see what is readable
        control.write_text("readable\n")
        control.chmod(0o644)
        assert set(readable_by(other_user, shared)) == {str(shared), str(runs), str(env_file), str(control)}
        # the files stand on their own too: a user who opens the run directory again shares no file
        run_dir.chmod(0o755)
        assert readable_by(other_user, run_dir) == [str(run_dir)]


def test_a_run_directory_another_user_made_is_refused(other_user: Any, tmp_path: Path) -> None:
    """A name made in a shared runs/ by someone else is theirs to fill with links: not used."""
    with shared_dir("acs-train-") as shared:
        runs = shared / "runs"
        runs.mkdir()
        runs.chmod(0o1777)
        made = other_user.run(["mkdir", "-m", "0777", str(runs / "private-exp")])
        assert made.returncode == 0, made.stderr
        env_file = shared / "exp.env"
        env_file.write_text(ENV)
        done = _as_user([str(REPO / "bin" / "train"), "--render-only", str(env_file)], runs, tmp_path)
        assert done.returncode == 2
        said = f"cannot create the run directory {runs / 'private-exp'}: owned by uid {other_user.uid}"
        assert said in done.stderr
        assert list((runs / "private-exp").iterdir()) == []
