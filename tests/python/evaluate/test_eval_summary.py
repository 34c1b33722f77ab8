"""The evaluation's numbers against hand-computed episodes: pass@k, accuracy, failures, classes."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from agentcore_slime.evaluate import INFRASTRUCTURE, Episode, classify, pass_at_k, screen, summarize
from agentcore_slime.evaluate.summary import k_values


def _episode(row: int, sample: int, reward: float | None, failure: tuple[str, str] | None = None,
             seconds: float = 1.0, tokens: int = 10) -> Episode:
    cls, reason = failure if failure else (None, None)
    return Episode(row, sample, f"{row}-{sample}".ljust(36, "x"), reward, cls, reason, reason, 2, 100, tokens,
                   False, seconds)


def test_pass_at_k_matches_the_definition_by_enumeration() -> None:
    """1 - C(n-c, k)/C(n, k) equals the share of k-subsets that hold a correct episode."""
    from itertools import combinations

    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(outcomes, k))
                expected = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(expected)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_k_values() -> None:
    assert k_values(1) == [1]
    assert k_values(2) == [1, 2]
    assert k_values(8) == [1, 2, 4, 8]
    assert k_values(5) == [1, 2, 4, 5]


def test_summary_of_known_episodes() -> None:
    """Two rows x 4 samples: row 0 has 1 right, row 1 has 3 right, one timeout, one agent error."""
    episodes = [
        _episode(0, 0, 1.0), _episode(0, 1, 0.0), _episode(0, 2, None, (INFRASTRUCTURE, "timeout")),
        _episode(0, 3, 0.0),
        _episode(1, 0, 1.0), _episode(1, 1, 0.5), _episode(1, 2, 1.0),
        _episode(1, 3, None, (INFRASTRUCTURE, "agent_crashed")),
    ]
    summary = summarize(episodes, 4, wall_seconds=12.5)
    assert summary["rows"] == 2 and summary["episodes"] == 8 and summary["failed"] == 2
    # the training rule: over the 6 valid episodes, the 2 infrastructure failures apart
    assert summary["valid"] == 6
    assert summary["accuracy"] == pytest.approx(4 / 6)
    assert summary["mean_reward"] == pytest.approx(3.5 / 6)
    assert "accuracy_without_infrastructure_failures" not in summary
    # pass@k over each row's valid episodes (3 per row): no row has 4, so pass@4 has no value
    expected = {k: (pass_at_k(3, 1, k) + pass_at_k(3, 3, k)) / 2 for k in (1, 2)}
    assert summary["pass_at_k"] == {**{str(k): pytest.approx(v) for k, v in expected.items()}, "4": None}
    assert summary["pass_at_k"]["1"] == pytest.approx(2 / 3)
    assert summary["failures"] == {"by_class": {INFRASTRUCTURE: 2},
                                   "by_reason": {"agent_crashed": 1, "timeout": 1}}
    assert summary["tokens"]["completion"] == 80 and summary["tokens"]["prompt"] == 800
    assert summary["seconds"]["wall"] == 12.5


def test_no_pass_at_k_for_one_sample_and_percentiles() -> None:
    rng = random.Random(7)
    seconds = [rng.uniform(0, 100) for _ in range(50)]
    episodes = [_episode(i, 0, 1.0, seconds=s) for i, s in enumerate(seconds)]
    summary = summarize(episodes, 1, 1.0)
    assert "pass_at_k" not in summary and summary["accuracy"] == 1.0
    per = summary["seconds"]["per_episode"]
    ordered = sorted(seconds)
    assert per["p50"] == ordered[math.ceil(0.5 * 50) - 1] and per["max"] == ordered[-1]


def test_screen_fits_one_screen_and_names_the_numbers() -> None:
    episodes = [_episode(0, 0, 1.0), _episode(0, 1, None, (INFRASTRUCTURE, "timeout"))]
    summary = {"checkpoint": "/m", "data": "/v.jsonl", "n_samples": 2, "out_dir": "/out",
               **summarize(episodes, 2, 3.0)}
    text = screen(summary)
    assert len(text.splitlines()) <= 24
    assert "accuracy     100.0%   mean reward 1.0000   (over the 1 valid episodes" in text
    assert "pass@1 100.0%   pass@2 n/a" in text and "1 x timeout" in text
    assert "episodes     2: 1 valid, 1 failed" in text


def test_every_episode_failed_gives_no_value_not_a_division_by_zero() -> None:
    episodes = [_episode(0, s, None, (INFRASTRUCTURE, "timeout")) for s in range(2)]
    summary = {"checkpoint": "/m", "data": "/v.jsonl", "n_samples": 2, "out_dir": "/out",
               **summarize(episodes, 2, 3.0)}
    assert summary["accuracy"] is None and summary["mean_reward"] is None and summary["valid"] == 0
    assert summary["failed"] == 2 and summary["pass_at_k"] == {"1": None, "2": None}
    assert "accuracy     n/a   mean reward n/a" in screen(summary)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("timeout: no result at s3://b/k after 900s", "timeout"),
        ("invoke failed: ThrottlingException", "invoke_error"),
        ("reading the result failed: ValueError", "result_unreadable"),
        ("gateway could not create the session: boom", "gateway_error"),
        ("row metadata is str, not a dict", "bad_metadata"),
        ("agent error result (status_code 500): crashed", "agent_crashed"),
        ("result 'rewards' is 'x', not a number", "bad_reward"),
        ("something new", "other"),
    ],
)
def test_classify(reason: str, expected: str) -> None:
    """Every failure is infrastructure (training's boundary); the code names the cause."""
    assert classify(reason) == (INFRASTRUCTURE, expected)


def test_the_evaluation_cost_by_part_and_on_screen() -> None:
    from types import SimpleNamespace

    from agentcore_slime.evaluate.summary import evaluation_cost

    config = SimpleNamespace(node_hour_usd=36.0, acr_vcpu_hour_usd=0.0895, acr_gb_hour_usd=0.00945,
                             acr_active_cpu_share=0.5, acr_memory_gb=4.0)
    episodes = [_episode(0, 0, 1.0, seconds=100.0), _episode(0, 1, 0.0, seconds=20.0),
                _episode(1, 0, None, (INFRASTRUCTURE, "timeout"), seconds=900.0)]
    episodes[0] = dataclasses.replace(episodes[0], agent_usd=0.02)  # the others reported nothing
    cost = evaluation_cost(config, episodes, wall_seconds=300.0)  # type: ignore[arg-type]
    assert cost["gpu_usd"] == pytest.approx(36.0 * 300 / 3600)  # one node for the wall time
    assert cost["acr_usd"] == pytest.approx(1020 * (0.5 * 0.0895 + 4 * 0.00945) / 3600)  # failed one too
    assert cost["acr_upper_usd"] == pytest.approx(1020 * (2 * 0.0895 + 8 * 0.00945) / 3600)
    assert cost["agent_usd"] == 0.02
    assert cost["per_correct_episode_usd"] == pytest.approx(cost["total_usd"])  # one correct episode
    summary = {"checkpoint": "/m", "data": "/v.jsonl", "n_samples": 2, "out_dir": "/out",
               **summarize(episodes, 1, 300.0), "cost": cost}
    line = f"  cost         ${cost['total_usd']:,.2f}: GPU $3.00, AgentCore $0.02 (at most $0.07)"
    assert line in screen(summary)
