"""bin/doctor's and bin/train's command lines on a parser that does not fit the model.

The machine of test_doctor_cli.py (every real check, the job's python with the stand-ins of
tests/fixtures/doctor/job_site), its model directory turned into a GLM-4.5 one (config.json
``model_type`` ``glm4_moe``, the same shape, so only the parsers differ), the known
norm-epsilon trap fixed in the env file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentcore_slime.doctor import cli as doctor_cli
from agentcore_slime.launch import cli as train_cli
from test_doctor_cli import _exec_recorder, machine  # noqa: F401 - machine is a fixture

FIX = "EXTRA_FLAGS=--norm-epsilon 1e-6\n"


def _glm(env: Path, *lines: str) -> Path:
    model = next(
        line.split("=", 1)[1] for line in env.read_text().splitlines() if line.startswith("MODEL_DIR=")
    )
    config = Path(model) / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "glm4_moe"}))
    env.write_text(env.read_text() + FIX + "".join(lines))
    return env


def test_bin_doctor_and_bin_train_refuse_qwen_on_a_glm_model(
    machine: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = _glm(machine, "SGLANG_TOOL_CALL_PARSER=qwen\n")
    assert doctor_cli.main(["--offline", str(env)]) == 1
    out = capsys.readouterr().out
    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failing == [
        "FAIL model.tool-call-parser: SGLANG_TOOL_CALL_PARSER=qwen does not fit MODEL_DIR: it is "
        "GLM-4.5 / 4.6 (config.json model_type 'glm4_moe'), whose tool calls SGLang reads with "
        "glm45 or glm or glm47 "
        "(fix: set SGLANG_TOOL_CALL_PARSER=glm45, or leave it unset (chosen from the model))"
    ]
    calls = _exec_recorder(monkeypatch)
    assert train_cli.main([str(env)]) == 1 and calls == []
    assert (
        "bin/train: doctor: FAIL model.tool-call-parser: SGLANG_TOOL_CALL_PARSER=qwen"
        in capsys.readouterr().err
    )
