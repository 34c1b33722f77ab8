"""The cost model and the budget's decision (agentcore_slime.cost): pure arithmetic, checked
against hand-computed figures and, with hypothesis, against its own invariants."""

from __future__ import annotations

import math

import pytest
from agentcore_slime.cost import (
    MAX_AGENT_COST_USD,
    Budget,
    Cost,
    EpisodeUsage,
    Rates,
    Schedule,
    gpu_cost,
    projected_total,
    reported_cost,
    step_cost,
)
from hypothesis import given
from hypothesis import strategies as st


def test_the_largest_session_costs_about_a_quarter_dollar_an_hour() -> None:
    rates = Rates()
    assert rates.acr_upper_per_second * 3600 == pytest.approx(2 * 0.0895 + 8 * 0.00945)
    assert 0.25 <= rates.acr_upper_per_second * 3600 <= 0.26
    assert rates.acr_estimate_per_second * 3600 == pytest.approx(
        0.25 * 0.0895 + 2 * 0.00945
    )


def test_a_step_sums_gpu_time_and_every_episode_aborted_ones_included() -> None:
    rates = Rates(node_hour_usd=98.32, num_nodes=2)
    episodes = [
        EpisodeUsage(600, 0.01),
        EpisodeUsage(1200, None),
        EpisodeUsage(30, 0.002),
    ]  # the last aborted
    cost = step_cost(rates, wall_seconds=1800, episodes=episodes)
    assert cost.gpu == pytest.approx(98.32 * 2 * 0.5)
    assert cost.agent == pytest.approx(0.012)
    assert cost.acr == pytest.approx(1830 * rates.acr_estimate_per_second)
    assert cost.acr_upper == pytest.approx(1830 * rates.acr_upper_per_second)
    assert cost.total == pytest.approx(cost.gpu + cost.agent + cost.acr)
    assert cost.total_upper == pytest.approx(cost.gpu + cost.agent + cost.acr_upper)
    assert Cost.from_dict(cost.as_dict()) == cost


def test_gpus_not_priced_count_zero() -> None:
    assert gpu_cost(Rates(), 3600).gpu == 0.0


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"rewards": 1, "cost_usd": 0.25}, (0.25, False)),
        ({"rewards": 1, "cost_usd": 0}, (0.0, False)),
        ({"rewards": 1}, (None, False)),
        (None, (None, False)),
        ({"cost_usd": "0.3"}, (None, True)),
        ({"cost_usd": -1}, (None, True)),
        ({"cost_usd": float("nan")}, (None, True)),
        ({"cost_usd": float("inf")}, (None, True)),
        ({"cost_usd": True}, (None, True)),
        ({"cost_usd": [1]}, (None, True)),
        ({"cost_usd": 10**400}, (None, True)),  # math.isfinite raised OverflowError on it
        ({"cost_usd": 1e308}, (None, True)),  # two of them made the run's total inf
        ({"cost_usd": MAX_AGENT_COST_USD}, (MAX_AGENT_COST_USD, False)),
        ({"cost_usd": MAX_AGENT_COST_USD * 1.01}, (None, True)),
    ],
)
def test_an_agent_reported_cost_is_a_finite_number_or_counted_as_zero(
    result, expected
) -> None:
    assert reported_cost(result) == expected


def test_rates_that_make_no_sense_are_named() -> None:
    problems = Rates(
        node_hour_usd=-1, acr_memory_gb=9, acr_gb_hour_usd=math.nan
    ).problems()
    assert any(
        p.startswith("NODE_HOUR_USD must be a finite number >= 0") for p in problems
    )
    assert any(p.startswith("ACR_GB_HOUR_USD must be") for p in problems)
    assert any(p.startswith("ACR_MEMORY_GB must lie in 0..8 GB") for p in problems)
    assert Rates().problems() == []


def test_saves_follow_slimes_rule() -> None:
    """slime (fa3c990) saves after step N when (N+1) % interval == 0, after the last step, and at
    an epoch's end (slime/utils/misc.py should_run_periodic_action)."""
    schedule = Schedule(num_rollout=7, save_interval=3)
    assert [n for n in range(7) if schedule.saves_after(n)] == [2, 5, 6]
    assert Schedule(10, 4, rollouts_per_epoch=3).saves_after(2)
    assert [Schedule(7, 3).steps_to_next_save(n) for n in range(7)] == [
        3,
        2,
        1,
        3,
        2,
        1,
        1,
    ]
    assert not Schedule(5, None).saves_after(4)


def test_a_budget_of_two_and_a_half_steps_stops_right_after_the_second_steps_save() -> (
    None
):
    step = Cost(gpu=10.0, agent=1.0, acr=0.5, acr_upper=2.0)
    budget = Budget(
        limit_usd=2.5 * step.total, schedule=Schedule(num_rollout=10, save_interval=2)
    )
    decisions = []
    for n in range(10):
        decision = budget.before_step(n, first_estimate=step.total)
        decisions.append(decision.go)
        if not decision.go:
            break
        budget.record(step)
    assert decisions == [True, True, False]
    assert (
        decision.last_saved_step == 1
    )  # slime saved after the second step (0-based 1)
    assert budget.spent.total <= budget.limit_usd
    assert "next save is 2 step(s) away" in decision.why


def test_a_resumed_run_counts_what_it_spent_and_may_stop_at_once() -> None:
    step = Cost(gpu=10.0)
    spent = Cost(gpu=20.0)
    budget = Budget(limit_usd=25.0, schedule=Schedule(10, 2), spent=spent)
    decision = budget.before_step(
        2, first_estimate=step.total
    )  # resumed from the save after step 1
    assert not decision.go and decision.last_saved_step == 1


@given(
    costs=st.lists(st.floats(min_value=0.01, max_value=50), min_size=1, max_size=40),
    interval=st.integers(min_value=1, max_value=6),
    limit=st.floats(min_value=0, max_value=500),
)
def test_a_budget_never_overshoots_by_more_than_one_step(
    costs: list[float], interval: int, limit: float
) -> None:
    """With costs that vary, the run stops before the limit or at most one step (the dearest
    so far, or the one that turned out dearer than all before) over it."""
    budget = Budget(limit_usd=limit, schedule=Schedule(len(costs), interval))
    for n, cost in enumerate(costs):
        if not budget.before_step(n, first_estimate=costs[0]).go:
            break
        budget.record(Cost(gpu=cost))
        # it may end over the limit only by the step just run: before it, it was within
        assert budget.spent.total - cost <= limit + 1e-9


def test_the_projection_adds_the_steps_left() -> None:
    assert projected_total(Cost(gpu=5), Cost(gpu=2, acr=1), 3).as_dict()[
        "total_usd"
    ] == pytest.approx(14)
