"""A recorded run directory, written through the production writer (observe.RunLog).

Steps are built from known episodes so tests can check every figure against them. One
episode's agent text holds HTML and a script tag: the report must show it as text.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentcore_slime.cost import Rates
from agentcore_slime.observe import CallRecord, EpisodeRecord, RunLog
from agentcore_slime.observe.records import INFRASTRUCTURE
from agentcore_slime.rollout.costs import EpisodeCharge, Ledger

HOSTILE = '<script>window.__pwned = 1</script><b>bold?</b> & "quotes"'


def call(user: str, reply: str, *, mode: str = "bridged", chain_break: str = "") -> CallRecord:
    """A two-message call: a user turn and the assistant's reply."""
    return CallRecord(
        messages=[{"role": "system", "content": "You solve math."}, {"role": "user", "content": user}],
        response_message={"role": "assistant", "content": reply},
        token_mode=mode,
        chain_break=chain_break,
        prompt_tokens=100,
        completion_tokens=20,
        finish_reason="stop",
        latency_ms=3.5,
    )


def step_records(step: int) -> list[EpisodeRecord]:
    """Four episodes in two groups: rewards depend on the step; one infrastructure failure."""
    good = 1.0 if step > 0 else 0.0
    tool_call = CallRecord(
        messages=[
            {"role": "user", "content": f"step {step}: what is 2+2?"},
        ],
        response_message={
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "calculator", "arguments": '{"e": "2+2"}'}}],
        },
        token_mode="rendered",
        chain_break="",
        prompt_tokens=80,
        completion_tokens=12,
        finish_reason="stop",
        latency_ms=4.0,
    )
    second = CallRecord(
        messages=[
            {"role": "user", "content": f"step {step}: what is 2+2?"},
            tool_call.response_message,
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
        ],
        response_message={"role": "assistant", "content": "The answer is 4."},
        token_mode="bridged",
        chain_break="",
        prompt_tokens=110,
        completion_tokens=8,
        finish_reason="stop",
        latency_ms=2.5,
    )
    return [
        EpisodeRecord(f"s{step}-0", 0, 0, good, None, "", 10.0, [tool_call, second], 20, 5, 1),
        EpisodeRecord(f"s{step}-1", 0, 1, 0.0, None, "", 12.0, [call(HOSTILE, HOSTILE)], 20, 0, 1),
        EpisodeRecord(
            f"s{step}-2",
            1,
            2,
            None,
            INFRASTRUCTURE,
            "no result after 900s",
            900.0,
            [],
            0,
            0,
            1,
            failure="timeout",
        ),
        EpisodeRecord(
            f"s{step}-3",
            1,
            3,
            1.0,
            None,
            "",
            20.0,
            [call("q", "a"), call("q2", "a2", mode="rendered", chain_break="template changed history")],
            40,
            0,
            2,
        ),
    ]


def agent_failure(step: int) -> EpisodeRecord:
    """An episode whose agent crashed (no reward): an infrastructure failure with its own code."""
    return EpisodeRecord(
        f"s{step}-a",
        2,
        4,
        None,
        INFRASTRUCTURE,
        "agent error: ValueError",
        5.0,
        [],
        0,
        0,
        1,
        failure="agent_crashed",
    )


#: the recorded run's prices: one node at $40 an hour, AgentCore at the 2026 rates
RATES = Rates(node_hour_usd=40.0)


def charged(ledger: Ledger, kind: str, step: int, records: list[EpisodeRecord], seconds: float) -> dict:
    """The cost entry the rollout's ledger writes for these episodes (each reporting $0.01)."""
    reported = {"cost_usd": 0.01}
    charges = [EpisodeCharge(r.seconds, reported if r.ok else None, r.ok, bool(r.reward)) for r in records]
    cost = ledger.charge(kind, step, charges, wall=seconds)
    cost["projected_total_usd"] = ledger.projected_total(10)
    return cost


def write_run(run_dir: Path, steps: int = 3, record_episodes: int = 2) -> RunLog:
    """``steps`` training steps and one eval step, written as the rollout writes them."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "train.sh").write_text("#!/usr/bin/env bash\n")
    log = RunLog(str(run_dir), record_episodes=record_episodes, num_rollout=10)
    ledger = Ledger(RATES)
    for step in range(steps):
        records = step_records(step)
        cost = charged(ledger, "train", step, records, 30.0 + step)
        log.step("train", step, records, step_seconds=30.0 + step, cost=cost)
    records = step_records(steps)[:2]
    cost = charged(ledger, "eval", steps - 1, records, 5.0)
    log.step("eval", steps - 1, records, step_seconds=5.0, dataset="gsm8k", cost=cost)
    evaluation = run_dir / "eval" / "20261123T101500Z"
    evaluation.mkdir(parents=True)
    summary = {
        "checkpoint": "/models/base",
        "rows": 4,
        "episodes": 8,
        "accuracy": 0.625,
        "mean_reward": 0.625,
        "pass_at_k": {"1": 0.625, "2": 0.75},
        "failed": 1,
        "cost": {"total_usd": 1.25, "agent_usd": 0.5},
    }
    (evaluation / "summary.json").write_text(json.dumps(summary))
    return log
