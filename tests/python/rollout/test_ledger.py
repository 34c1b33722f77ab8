"""The rollout's ledger (rollout/costs.py) on bad agent figures and across a resume, and
train.sh's budget lines (templates/lib/budget.sh) on whatever marker it finds: pure
arithmetic over metrics.jsonl lines written as the rollout writes them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.cost import Budget, Rates, Schedule
from agentcore_slime.rollout.costs import BUDGET_MARKER, BudgetExhausted, EpisodeCharge, Ledger

LIB = Path(__file__).resolve().parents[3] / "templates" / "lib"
FREE_ACR = Rates(acr_vcpu_hour_usd=0.0, acr_gb_hour_usd=0.0)  # only what the agents report counts


def _ledger(run_dir: Path, budget: float, save_interval: int) -> Ledger:
    ledger = Ledger(FREE_ACR, budget=Budget(budget, Schedule(10, save_interval)), run_dir=run_dir)
    ledger.carry_forward()
    return ledger


def _charge(ledger: Ledger, run_dir: Path, kind: str, step: int, usd: float) -> None:
    """One record, priced and appended to metrics.jsonl as the rollout does."""
    cost = ledger.charge(kind, step, [EpisodeCharge(1.0, {"rewards": 1, "cost_usd": usd}, ok=True)], wall=0)
    with (run_dir / "metrics.jsonl").open("a") as out:
        out.write(json.dumps({"kind": kind, "step": step, "cost": cost}) + "\n")


def test_a_resumed_run_counts_the_evaluations_in_its_dearest_cycle(tmp_path: Path) -> None:
    """Each step $10 and an eval after it $30, a save every 2 steps, $100: after step 1's save
    ($80 spent) the live run stops before rollout 2, and so does a run resumed there (before:
    the resumed one projected $10 a step, ran step 2 and ended at $120 of $100)."""
    live = _ledger(tmp_path, 100.0, save_interval=2)
    for step in range(2):
        live.before_step(step, None)
        _charge(live, tmp_path, "train", step, 10.0)
        _charge(live, tmp_path, "eval", step, 30.0)
    with pytest.raises(BudgetExhausted, match="2 step\\(s\\) away at up to \\$40.00 each"):
        live.before_step(2, None)
    (tmp_path / BUDGET_MARKER).unlink()

    resumed = _ledger(tmp_path, 100.0, save_interval=2)
    assert resumed.spent.total == pytest.approx(80.0) and resumed.steps_done == 2
    with pytest.raises(BudgetExhausted, match="2 step\\(s\\) away at up to \\$40.00 each"):
        resumed.before_step(2, None)
    marker = json.loads((tmp_path / BUDGET_MARKER).read_text())
    assert marker["last_saved_step"] == 1 and marker["per_step_usd"] == 40.0


@pytest.mark.parametrize("figure", [10**400, 1e308, float("inf"), "lots", -1])
def test_no_agent_figure_reaches_a_total_as_anything_but_a_finite_number(tmp_path: Path, figure: Any) -> None:
    """Bad figures count 0 (the episode itself fails with bad_cost, see test_result_reading):
    the step's and the run's totals stay finite, and metrics.jsonl holds numbers, not null."""
    ledger = _ledger(tmp_path, 100.0, save_interval=1)
    episodes = [EpisodeCharge(1.0, {"rewards": 1, "cost_usd": figure}) for _ in range(2)]
    cost = ledger.charge("train", 0, episodes, wall=0)
    assert cost["malformed_agent_costs"] == 2
    text = json.dumps(cost, allow_nan=False)  # raises on inf or NaN
    assert json.loads(text)["run"]["total_usd"] == 0.0
    ledger.before_step(1, None)  # decides on finite figures (and lets the run go on)


def _budget_lines(
    marker: dict[str, Any] | str, tmp_path: Path, command: str = "bin/train exp.env"
) -> subprocess.CompletedProcess[str]:
    (tmp_path / BUDGET_MARKER).write_text(marker if isinstance(marker, str) else json.dumps(marker))
    script = f'source {LIB}/common.sh; source {LIB}/budget.sh; job_status 1 "$1" "$2"'
    return subprocess.run(
        ["bash", "-c", script, "bash", str(tmp_path), command], check=False, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "marker",
    [
        '{"spent_usd": Infinity, "budget_usd": 100, "steps_done": 2, "per_step_usd": NaN}',
        {"spent_usd": None, "budget_usd": "x", "steps_done": None, "last_saved_step": "one"},
        {"spent_usd": 1e308, "budget_usd": 100, "steps_done": 2, "num_rollout": 10, "per_step_usd": 1e308},
        {},
        "not json at all",
    ],
)
def test_train_sh_prints_a_budget_stop_whatever_the_marker_holds(tmp_path: Path, marker: Any) -> None:
    """train.sh still ends with the budget's status and its lines, never a Python traceback
    (before: OverflowError on an inf total, and no resume command printed)."""
    shell = _budget_lines(marker, tmp_path)
    assert shell.returncode == 3, shell.stderr
    assert "Traceback" not in shell.stderr
    assert "stopped by BUDGET_USD" in shell.stderr and "to go on" in shell.stderr


def test_an_unknown_spend_keeps_the_users_own_budget_in_the_resume_command(tmp_path: Path) -> None:
    marker = '{"spent_usd": Infinity, "budget_usd": 100, "steps_done": 2}'
    shell = _budget_lines(marker, tmp_path, "bin/train --set BUDGET_USD=50 exp.env")
    assert shell.returncode == 3 and "$? spent of $100.00" in shell.stderr
    assert "remaining steps: bin/train --set BUDGET_USD=50 exp.env" in shell.stderr


def test_train_sh_prints_the_resume_command_for_a_sound_marker(tmp_path: Path) -> None:
    marker = {"spent_usd": 8.0, "budget_usd": 10.0, "steps_done": 2, "num_rollout": 6, "per_step_usd": 4.0,
              "last_saved_step": 1, "save_dir": "/ck", "why": "the next save is 2 step(s) away"}
    shell = _budget_lines(marker, tmp_path)
    assert shell.returncode == 3
    assert "$8.00 spent of $10.00 after 2 of 6 steps" in shell.stderr
    assert "checkpoint to resume from: /ck/iter_0000001 (rollout 1)" in shell.stderr
    assert "remaining steps: bin/train --set BUDGET_USD=25 exp.env" in shell.stderr
