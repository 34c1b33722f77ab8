"""The run directory's lock (issue 39): two bin/train renders of one experiment at once never
interleave their files. Each render's writes are slowed down so that, without the lock, the
second render reads the record between the first one's writes (a false "edited" copy) or the
two leave a train.sh and an env of different renders."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from agentcore_slime import rundir
from agentcore_slime.launch import cli

ENV = """\
EXP_ID=lock-exp
S3_BUCKET=my-bucket
AGENT_URL=http://127.0.0.1:8080
MODEL_DIR=/m
DATA_PATH=/d.jsonl
MODEL_TYPE=qwen2.5-3B
"""


@pytest.fixture
def env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLKIT_RUNS_DIR", str(tmp_path / "runs"))
    path = tmp_path / "exp.env"
    path.write_text(ENV)
    return path


def test_parallel_renders_of_one_experiment_are_serialized(
    env_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = rundir.write_atomic

    def slow_write(target: Path, data: bytes, mode: int) -> None:
        real_write(target, data, mode)
        time.sleep(0.05)  # the other render gets to run between two files of this one

    monkeypatch.setattr(rundir, "write_atomic", slow_write)
    run_dir = tmp_path / "runs" / "lock-exp"
    for _ in range(3):
        statuses: list[int] = []

        def render(rollout: int, into: list[int] = statuses) -> None:
            into.append(cli.main(["--render-only", "--set", f"NUM_ROLLOUT={rollout}", str(env_file)]))

        threads = [threading.Thread(target=render, args=(n,)) for n in (1, 5)]
        for thread in threads:
            thread.start()
            time.sleep(0.01)
        for thread in threads:
            thread.join()
        assert statuses == [0, 0]
        assert not list(run_dir.glob("*.edited-*")), sorted(p.name for p in run_dir.iterdir())
        env = (run_dir / "env").read_text()
        script = (run_dir / "train.sh").read_text()
        rollout = "5" if "NUM_ROLLOUT='5'" in env else "1"
        assert f"--num-rollout {rollout}\n" in script, "train.sh disagrees with its env"


def test_a_render_waits_for_another_render_but_not_for_a_live_run(
    env_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "runs" / "lock-exp"
    held = rundir.lock_run_dir(run_dir, "4242 lock-exp train.sh", wait=0)
    try:
        with pytest.raises(SystemExit) as stopped:
            cli.main(["--render-only", str(env_file)])
        assert stopped.value.code == 1
    finally:
        os.close(held)
    err = capsys.readouterr().err
    refused = f"bin/train: {run_dir} is in use by a run of this experiment: PID 4242 (train.sh); nothing was"
    assert refused in err
    assert sorted(p.name for p in run_dir.iterdir()) == [".run.lock"]
    # a render holds it: waited for, then rendered
    held = rundir.lock_run_dir(run_dir, "4243 lock-exp bin/train", wait=0)
    threading.Timer(0.3, os.close, [held]).start()
    assert cli.main(["--render-only", str(env_file)]) == 0
    assert (run_dir / "train.sh").exists()
