"""Issue 26: what a step costs, through the real rollout (stand-in agent over the local-agent
transport, local S3, stand-in gateway), and the budget's stop in slime's train-loop order.

The cost is checked against the model (agentcore_slime.cost) applied to the episodes that ran:
the billed session-seconds are the kept episodes' (metrics.jsonl) plus the aborted ones', which
ran until the tail cut; the agent-reported part is what the agents wrote, a malformed figure
counting 0 with one warning.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.cost import Rates, Schedule
from agentcore_slime.rollout.costs import BUDGET_MARKER, BudgetExhausted
from fakes.data_source import ListDataSource
from fakes.standins import Behaviour, make_args

RATES = Rates()  # the defaults the settings carry (2026 rates, 0.25 vCPU, 2 GB)


def scripted(payload: dict[str, Any], sid: str) -> Behaviour:
    case = payload["case"]
    if case == "slow":  # cut by the tail cut: billed for the time it ran
        return Behaviour(result={"rewards": 1.0, "cost_usd": 5.0}, delay=20)
    if case == "malformed":
        return Behaviour(result={"rewards": 0.0, "cost_usd": "a lot"}, delay=0.05)
    if case == "later":  # ends after the malformed group, whose results are then always read
        return Behaviour(result={"rewards": 1.0, "cost_usd": payload["usd"]}, delay=1.0)
    return Behaviour(result={"rewards": 1.0, "cost_usd": payload["usd"]}, delay=0.05)


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def test_a_step_costs_the_model_applied_to_every_episode_started(
    s3_bucket: str,
    agents: Any,
    shim_state: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = agents.start(scripted)
    args = make_args(
        agent_url=agent.url,
        s3_bucket=s3_bucket,
        custom_config_path=str(tmp_path / "toolkit.yaml"),
        rollout_batch_size=1,
        over_sampling_batch_size=2,
        n_samples_per_prompt=2,
        node_hour_usd=36.0,
        num_nodes=2,
        num_rollout=4,
    )
    rows = [
        {"prompt": "a", "metadata": {"case": "ok", "usd": 0.25}},
        {"prompt": "b", "metadata": {"case": "slow"}},
    ]
    with caplog.at_level(logging.WARNING, logger="agentcore_slime"):
        rollout.generate_rollout(args, 0, ListDataSource(rows, n_samples_per_prompt=2))
        rows[0]["metadata"] = {"case": "malformed"}
        rows[1]["metadata"] = {"case": "later", "usd": 0.25}
        rollout.generate_rollout(args, 1, ListDataSource(rows, n_samples_per_prompt=2))
    first, second = metrics(tmp_path)
    cost = first["cost"]
    assert (
        cost["episodes_billed"] == 4
    )  # the two aborted episodes of the slow group are billed
    assert first["episodes"]["started"] == 2
    step = cost["step"]
    billed_seconds = step["acr_usd"] / RATES.acr_estimate_per_second
    kept_seconds = first["session_seconds"]
    aborted_seconds = billed_seconds - kept_seconds
    # the aborted pair ran from their start until the tail cut: each about as long as the step
    assert 0 < aborted_seconds <= 2 * first["step_seconds"] + 0.5
    assert step["acr_upper_usd"] == pytest.approx(
        billed_seconds * RATES.acr_upper_per_second
    )
    assert step["agent_usd"] == pytest.approx(2 * 0.25)  # the slow group never reported
    assert step["gpu_usd"] == pytest.approx(36.0 * 2 * cost["gpu_seconds"] / 3600)
    assert step["total_usd"] == pytest.approx(
        step["gpu_usd"] + step["agent_usd"] + step["acr_usd"]
    )
    assert cost["per_successful_episode_usd"] == pytest.approx(step["total_usd"] / 2)
    assert cost["run"] == step
    # the second step: a malformed figure counts 0 and fails its episode (bad_cost: its group,
    # with no signal left, is dropped from the step but billed; how many of the replacement
    # groups drew the malformed row depends on which ended first), with one warning for the step
    malformed = second["cost"]["malformed_agent_costs"]
    assert malformed >= 2
    successes = second["cost"]["successful_episodes"] - cost["successful_episodes"]
    assert successes >= 2  # each reported $0.25; no malformed figure was added
    assert second["cost"]["step"]["agent_usd"] == pytest.approx(0.25 * successes)
    warnings = [r.getMessage() for r in caplog.records if "not a number in 0..100" in r.getMessage()]
    assert warnings == [
        f"train rollout 1: {malformed} episode(s) reported a 'cost_usd' that is not a number in 0..100; "
        "counted as 0 (an episode with an otherwise good result failed as bad_cost)"
    ]
    run = second["cost"]["run"]
    assert run["total_usd"] == pytest.approx(
        step["total_usd"] + second["cost"]["step"]["total_usd"]
    )
    dearest = max(step["total_usd"], second["cost"]["step"]["total_usd"])
    assert second["cost"]["projected_total_usd"] == pytest.approx(
        run["total_usd"] + 2 * dearest
    )


def train_loop(args: Any, rows: list[dict[str, Any]], saves: list[int]) -> None:
    """slime's train.py loop, in its order: rollout N, train N, save N when due (the stand-in
    has no GPU: "train" is nothing, "save" is noted)."""
    schedule = Schedule(args.num_rollout, args.save_interval)
    for rollout_id in range(args.start_rollout_id, args.num_rollout):
        rollout.generate_rollout(
            args, rollout_id, ListDataSource(rows, n_samples_per_prompt=2)
        )
        if schedule.saves_after(rollout_id):
            saves.append(rollout_id)


def test_a_budget_of_two_and_a_half_steps_stops_after_the_second_steps_save_and_resumes(
    s3_bucket: str, agents: Any, shim_state: Any, tmp_path: Path
) -> None:
    agent = agents.start(scripted)
    rows = [
        {"prompt": f"q{n}", "metadata": {"case": "ok", "usd": 1.0}} for n in range(2)
    ]
    args = make_args(
        agent_url=agent.url,
        s3_bucket=s3_bucket,
        custom_config_path=str(tmp_path / "toolkit.yaml"),
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        num_rollout=6,
        save_interval=2,
        start_rollout_id=0,
        save=str(tmp_path / "checkpoints"),
        budget_usd=10.0,  # a step is 4 episodes x $1 reported, plus cents of AgentCore time
    )
    saves: list[int] = []
    with pytest.raises(BudgetExhausted, match="stopping before rollout 2"):
        train_loop(args, rows, saves)
    assert saves == [1]  # step 2 (rollout 1) was saved; nothing of rollout 2 started
    lines = metrics(tmp_path)
    assert [line["step"] for line in lines] == [0, 1]
    assert all(line["episodes"]["started"] == 4 for line in lines)  # no step cut short
    marker = json.loads((tmp_path / BUDGET_MARKER).read_text())
    assert marker["steps_done"] == 2 and marker["last_saved_step"] == 1
    assert marker["budget_usd"] == 10.0 and marker["save_dir"] == str(
        tmp_path / "checkpoints"
    )
    assert marker["spent_usd"] == pytest.approx(
        lines[-1]["cost"]["run"]["total_usd"], abs=1e-4
    )
    assert 8.0 < lines[-1]["cost"]["run"]["total_usd"] < 8.1
    # train.sh's end (templates/lib/budget.sh) reads this marker: exit 3 and how to go on
    lib = Path(__file__).resolve().parents[3] / "templates" / "lib"
    script = f'source {lib}/common.sh; source {lib}/budget.sh; job_status 1 "$1" "bin/train exp.env"'
    shell = subprocess.run(
        ["bash", "-c", script, "bash", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert shell.returncode == 3, shell.stderr
    assert (
        "stopped by BUDGET_USD: $8.00 spent of $10.00 after 2 of 6 steps"
        in shell.stderr
    )
    assert (
        f"checkpoint to resume from: {tmp_path}/checkpoints/iter_0000001 (rollout 1)"
        in shell.stderr
    )
    assert (
        "remaining steps: bin/train --set BUDGET_USD=25 exp.env" in shell.stderr
    )  # 8 + 4 x 4 + 0.5
    # resume from the checkpoint with a larger budget: a new process carries the spending over
    shim_state.reset()
    args.start_rollout_id, args.budget_usd = 2, 20.0
    with pytest.raises(BudgetExhausted, match="stopping before rollout 4"):
        train_loop(args, rows, saves)
    lines = metrics(tmp_path)
    assert [line["step"] for line in lines] == [0, 1, 2, 3]
    assert saves == [1, 3]
    assert lines[2]["cost"]["run"]["total_usd"] == pytest.approx(
        lines[1]["cost"]["run"]["total_usd"] + lines[2]["cost"]["step"]["total_usd"]
    )
    assert 16.0 < lines[3]["cost"]["run"]["total_usd"] < 16.2  # never over the budget
