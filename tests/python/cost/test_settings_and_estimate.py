"""The cost settings through bin/train (in-process ``main``): bad rates, budgets and caps exit 2
before anything is written, naming the fix; ``--dry-run`` prints the expected cost by part,
measured from the agent's last bin/eval when there is one, and says what it assumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentcore_slime.launch import cli

ENV = """\
EXP_ID=cost-exp
S3_BUCKET=my-bucket
AGENT_URL=http://127.0.0.1:8080
MODEL_DIR=/m
DATA_PATH=/d.jsonl
MODEL_TYPE=qwen2.5-3B
ROLLOUT_BATCH_SIZE=4
N_SAMPLES_PER_PROMPT=2
NUM_ROLLOUT=10
NODE_HOUR_USD=98.32
"""


@pytest.fixture
def env_file(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TOOLKIT_RUNS_DIR", str(tmp_path / "runs"))
    path = tmp_path / "exp.env"
    path.write_text(ENV)
    return path


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("NODE_HOUR_USD=-1", "NODE_HOUR_USD must be a number >= 0"),
        ("NODE_HOUR_USD=ten", "NODE_HOUR_USD must be a number >= 0"),
        ("ACR_VCPU_HOUR_USD=-0.1", "ACR_VCPU_HOUR_USD must be a number >= 0"),
        (
            "ACR_ACTIVE_CPU_SHARE=3",
            "ACR_ACTIVE_CPU_SHARE must be a number >= 0 and <= 2",
        ),
        ("ACR_MEMORY_GB=9", "ACR_MEMORY_GB must be a number >= 0 and <= 8"),
        ("BUDGET_USD=0", "BUDGET_USD must be a number > 0"),
        ("BUDGET_USD=lots", "BUDGET_USD must be a number > 0"),
        ("MAX_CALLS_PER_EPISODE=0", "MAX_CALLS_PER_EPISODE must be an integer >= 1"),
        ("MAX_TOKENS_PER_EPISODE=0", "MAX_TOKENS_PER_EPISODE must be an integer >= 1"),
        (
            "MAX_TOKENS_PER_EPISODE=1.5",
            "MAX_TOKENS_PER_EPISODE must be an integer >= 1",
        ),
    ],
)
def test_bad_cost_settings_exit_2_before_anything_is_written(
    env_file: Path, tmp_path: Path, capsys, setting: str, expected: str
) -> None:
    assert cli.main(["--render-only", "--set", setting, str(env_file)]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert err.startswith("bin/train: ")
    assert not (tmp_path / "runs").exists()


def test_a_budget_below_one_step_exits_2_with_the_least_that_would_do(
    env_file: Path, tmp_path: Path, capsys
) -> None:
    assert cli.main(["--render-only", "--set", "BUDGET_USD=0.5", str(env_file)]) == 2
    err = capsys.readouterr().err
    # one step: 8 episodes of the assumed 60 s, in one wave, plus as long again training:
    # GPU 98.32 x 120 s / 3600 = 3.2773; AgentCore 8 x 60 s x (0.25 x 0.0895 + 2 x 0.00945) / 3600
    step = 98.32 * 120 / 3600 + 8 * 60 * (0.25 * 0.0895 + 2 * 0.00945) / 3600
    assert f"BUDGET_USD=0.5 is below one step's projected cost (${step:.2f}" in err
    assert f"raise BUDGET_USD to at least {step + 0.005:.2f}" in err
    assert not (tmp_path / "runs").exists()
    assert (
        cli.main(
            ["--render-only", "--set", f"BUDGET_USD={step * 2.5:.2f}", str(env_file)]
        )
        == 0
    )


def test_dry_run_prints_the_expected_cost_by_part_and_its_assumptions(
    env_file: Path, capsys
) -> None:
    assert cli.main(["--dry-run", "--skip-doctor", str(env_file)]) == 0
    err = capsys.readouterr().err
    gpu = 10 * 98.32 * 120 / 3600
    acr = 10 * 8 * 60 * (0.25 * 0.0895 + 2 * 0.00945) / 3600
    upper = 10 * 8 * 60 * (2 * 0.0895 + 8 * 0.00945) / 3600
    assert (
        f"expected cost: ${gpu + acr:,.2f} to ${gpu + upper:,.2f} (10 steps, 0 eval steps;"
        in err
    )
    assert f"  GPU nodes         ${gpu:,.2f}\n" in err
    assert f"  AgentCore Runtime ${acr:,.2f} estimate, ${upper:,.2f} at most" in err
    assert (
        "  assumed: 60 s per episode and no agent-reported cost (no bin/eval of this agent yet"
        in err
    )


def test_dry_run_uses_the_last_bin_eval_of_the_same_agent(
    env_file: Path, tmp_path: Path, capsys
) -> None:
    def summary(run: str, stamp: str, agent: str, seconds: float, usd: float) -> Path:
        path = tmp_path / "runs" / run / "eval" / stamp / "summary.json"
        path.parent.mkdir(parents=True)
        body = {
            "agent": agent,
            "episodes": 4,
            "seconds": {"per_episode": {"mean": seconds}},
        }
        path.write_text(json.dumps({**body, "cost": {"agent_usd": usd}}))
        return path

    summary("other", "1", "http://elsewhere:1", 999.0, 100.0)  # another agent: not used
    used = summary("old", "2", "http://127.0.0.1:8080", 30.0, 0.2)
    assert cli.main(["--dry-run", "--skip-doctor", str(env_file)]) == 0
    err = capsys.readouterr().err
    assert f"  measured: 30.0 s and $0.0500 per episode, from {used}" in err
    agent = 10 * 8 * 0.05
    assert f"  agent-reported    ${agent:,.2f}\n" in err
    assert "no bin/eval of this agent" not in err
