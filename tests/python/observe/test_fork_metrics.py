"""Forks where a user looks: metrics.jsonl's samples and forks per episode, the progress line,
and its one warning naming the likely cause and the setting that fixes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentcore_slime.observe import CallRecord, EpisodeRecord, RunLog
from agentcore_slime.observe.metrics import fork_warning, progress_line, step_metrics


def _call(joined: str, reason: str = "") -> CallRecord:
    return CallRecord([], {}, "rendered", reason, 10, 5, "stop", 1.0, joined=joined)


def _episode(*reasons: str, ok: bool = True) -> EpisodeRecord:
    calls = [_call("start"), *(_call("forked", r) for r in reasons)]
    return EpisodeRecord(
        "sid", 0, 0, 1.0 if ok else None, None if ok else "infrastructure", "" if ok else "timeout",
        1.0, calls, samples=1 + len(reasons),
    )


def test_samples_and_forks_per_episode_by_reason() -> None:
    records = [_episode("reasoning dropped", "reasoning dropped"), _episode(), _episode("repeat", ok=False)]
    metrics = step_metrics("train", 0, records, 1.0, wall_time=0.0)
    assert metrics["samples_per_episode"] == 2.0  # (3 + 1) / 2 successful episodes
    assert metrics["forks_per_episode"] == {"total": 1.0, "by_reason": {"reasoning dropped": 1.0}}
    assert metrics["chain_breaks"] == {"reasoning dropped": 2, "repeat": 1}  # every call, as before
    line = progress_line(metrics, 10, 1.0, 1)
    assert "samples/episode 2.00, forks/episode 1.00 (reasoning dropped 1.00)" in line
    warning = fork_warning(metrics)
    assert warning is not None and "'reasoning dropped'" in warning and "CUMULATIVE_TOKEN_MODE" in warning


def test_no_forks_says_nothing() -> None:
    metrics = step_metrics("train", 0, [_episode(), _episode()], 1.0, wall_time=0.0)
    assert metrics["samples_per_episode"] == 1.0 and metrics["forks_per_episode"]["by_reason"] == {}
    assert "forks" not in progress_line(metrics, 10, 1.0, 1) and fork_warning(metrics) is None


def test_a_few_forks_stay_below_the_warning() -> None:
    records = [_episode("sub-agent"), *(_episode() for _ in range(4))]
    metrics = step_metrics("train", 0, records, 1.0, wall_time=0.0)
    assert metrics["forks_per_episode"]["total"] == pytest.approx(0.2)
    assert "forks/episode 0.20 (sub-agent 0.20)" in progress_line(metrics, 10, 1.0, 1)
    assert fork_warning(metrics) is None


def test_the_warning_shows_once_and_the_record_keeps_the_figures(tmp_path: Path, capsys) -> None:
    log = RunLog(str(tmp_path), record_episodes=8, num_rollout=3)
    for step in range(2):
        log.step("train", step, [_episode("history rewritten")], 1.0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[agentcore]")]
    assert ["WARNING" in line for line in lines] == [True, False]
    assert "most are 'history rewritten'" in lines[0] and "no setting changes it" in lines[0]
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first["forks_per_episode"] == {"total": 1.0, "by_reason": {"history rewritten": 1.0}}
    [recorded] = [json.loads(x) for x in next((tmp_path / "episodes").iterdir()).read_text().splitlines()]
    assert [c["joined"] for c in recorded["calls"]] == ["start", "forked"]
