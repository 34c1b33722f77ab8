"""bin/doctor's command line (``main(argv)`` in-process) and the blocking checks bin/train runs.

The end-to-end run uses every real check: the job's python is this test's python with the
stand-ins of tests/fixtures/doctor/job_site, nvidia-smi is a stub on PATH, and the model
directory holds the locally built toy tokenizer beside the Qwen2.5-32B-Instruct config.json.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import namedtuple
from pathlib import Path

import pytest
from agentcore_slime.doctor import cli as doctor_cli
from agentcore_slime.launch import cli as train_cli
from fakes.doctor_helpers import FIXTURES, JOB_SITE, stub
from fakes.toy_tokenizer import build_toy_tokenizer

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def machine(install: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The process environment of a GPU node with the fake install; returns an env file."""
    model = install / "hf" / "qwen2.5-32b-instruct"
    build_toy_tokenizer(model)
    shutil.copy(FIXTURES / "hf" / "qwen2.5-32b-instruct" / "config.json", model / "config.json")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    stub(stubs, "nvidia-smi", 'for i in 0 1 2 3 4 5 6 7; do echo "$i, 81559, 81000"; done')
    monkeypatch.setenv("PATH", f"{stubs}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("TOOLKIT_JOB_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", str(JOB_SITE))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOOLKIT_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, 10 * 1024**4))
    env = tmp_path / "exp.env"
    env.write_text(
        "EXP_ID=doctor-cli\nS3_BUCKET=my-bucket\n"
        "AGENT_RUNTIME_ARN=arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-AbC123\n"
        f"MODEL_DIR={model}\nDATA_PATH={install}/data/good.jsonl\nMODEL_TYPE=qwen2.5-32B\n"
        f"SLIME_DIR={install}/slime\nMEGATRON_DIR={install}/Megatron-LM\nGATEWAY_HOST=10.0.0.5\nGATEWAY_PORT=0\n"
    )
    return env


def test_the_known_trap_fails_then_passes_with_the_fix(
    machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert doctor_cli.main(["--offline", str(machine)]) == 1
    out, err = capsys.readouterr()
    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failing == [
        "FAIL model.norm-epsilon: the command line has --norm-epsilon 1e-5 (qwen2.5-32B.sh and EXTRA_FLAGS) "
        "but config.json has 1e-6 (fix: add --norm-epsilon 1e-6 to EXTRA_FLAGS (a later flag overrides the "
        "model script's))"
    ]
    assert err.startswith("bin/doctor: ") and err.endswith(" 1 failed\n")
    # what the run would cost, by part, with its assumptions (README "What will this cost?")
    assert "bin/doctor: expected cost: $" in err and "(1 steps, 0 eval steps; per step $" in err
    assert "bin/doctor:   assumed: 60 s per episode and no agent-reported cost (no bin/eval" in err
    assert "bin/doctor:   assumed: GPU nodes not counted (NODE_HOUR_USD=0)" in err
    groups = {line.split()[1].split(".")[0] for line in out.splitlines()}
    assert groups == {"env", "gpus", "model", "flags", "data", "rollout", "disk", "ray"}  # no aws: --offline
    # the same run with the fix, as JSON (the fix after -- works like EXTRA_FLAGS)
    assert doctor_cli.main(["--offline", "--json", str(machine), "--", "--norm-epsilon", "1e-6"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["failed"] == 0
    assert document["passed"] == sum(c["status"] == "PASS" for c in document["checks"])
    assert len(document["checks"]) == len(out.splitlines())
    eps = next(c for c in document["checks"] if c["check"] == "model.norm-epsilon")
    assert eps == {"check": "model.norm-epsilon", "status": "PASS", "found": eps["found"], "fix": ""}


def test_an_invalid_env_file_exits_2_with_bin_train_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / "bad.env"
    env.write_text(
        "EXP_ID=x\nS3_BUCKET=my-bucket\nAGENT_URL=http://127.0.0.1:1\nMODEL_DIR=/m\nDATA_PATH=/d\n"
    )
    assert doctor_cli.main([str(env)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err == f"bin/doctor: MODEL_TYPE is required (add MODEL_TYPE=... to {env} (slime model script name: "
        "$SLIME_DIR/scripts/models/<MODEL_TYPE>.sh))\n"
    )


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor_cli.main(["--no-such-option", "x.env"]) == 2
    assert "see bin/doctor --help" in capsys.readouterr().err


def _exec_recorder(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(train_cli.os, "execvp", lambda prog, argv: calls.append(argv))
    # every tool found; a path given as it is (TOOLKIT_JOB_PYTHON: the python running the tests)
    found = lambda tool, **_: tool if "/" in tool else f"/usr/bin/{tool}"  # noqa: E731
    monkeypatch.setattr(train_cli.shutil, "which", found)
    monkeypatch.setenv("TOOLKIT_JOB_PYTHON", sys.executable)
    monkeypatch.setenv("TOOLKIT_SAVED_PYTHONPATH", "unset")
    return calls


def test_bin_train_stops_before_any_process_when_a_blocking_check_fails(
    machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _exec_recorder(monkeypatch)
    assert train_cli.main([str(machine)]) == 1
    assert calls == []
    err = capsys.readouterr().err
    assert "bin/train: doctor: FAIL model.norm-epsilon: " in err
    assert "nothing was started" in err and "--skip-doctor" in err
    assert "gpus." not in err and "rollout." not in err  # only the blocking checks run


def test_bin_train_runs_when_the_blocking_checks_pass_or_are_skipped(
    machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _exec_recorder(monkeypatch)
    # credentials the run's workers would inherit (the gate looks for them; nothing calls AWS)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert train_cli.main(["--skip-doctor", str(machine)]) == 1  # only reached because execvp is replaced
    assert train_cli.main(["--set", "EXTRA_FLAGS=--norm-epsilon 1e-6", str(machine)]) == 1
    assert [argv[0] for argv in calls] == ["bash", "bash"]
    assert "doctor:" not in capsys.readouterr().err


def test_the_doctors_blocking_checks_are_exactly_the_ones_bin_train_runs() -> None:
    """bin/train gates on preflight's BLOCKING; a check marked blocking in bin/doctor's table
    alone would never stop bin/train, and one missing from the table would never show in bin/doctor."""
    from agentcore_slime.doctor.checks import CHECKS
    from agentcore_slime.preflight import BLOCKING

    assert [check for check in CHECKS if check.blocking] == list(BLOCKING)
    assert all(check.blocking and not check.network for check in BLOCKING)
