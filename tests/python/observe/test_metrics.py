"""Per-step metrics (observe.metrics / observe.runlog) against known episodes."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from agentcore_slime.observe import append_json_line, read_json_lines, step_metrics
from agentcore_slime.observe.metrics import failure_reason_key, percentile, progress_line
from agentcore_slime.observe.records import EpisodeRecord, select_for_browser
from agentcore_slime.observe.runlog import RunLog
from fakes.recorded_run import agent_failure, step_records, write_run


def test_step_metrics_count_episodes_and_keep_failures_out_of_the_reward() -> None:
    records = step_records(1) + [agent_failure(1)]
    metrics = step_metrics("train", 1, records, 42.0, wall_time=1.0)
    episodes = metrics["episodes"]
    assert (episodes["started"], episodes["succeeded"], episodes["failed"]) == (5, 3, 2)
    assert episodes["failed_by_class"] == {"infrastructure": 2}
    assert episodes["failed_by_reason"] == {"timeout": 1, "agent_crashed": 1}
    # rewards of the three valid episodes only: 1, 0, 1 (the failures are not zeros)
    assert metrics["reward"]["mean"] == pytest.approx(2 / 3)
    assert metrics["reward"]["pass_rate"] == pytest.approx(2 / 3)
    assert (metrics["reward"]["min"], metrics["reward"]["max"]) == (0.0, 1.0)
    # group 0 has rewards {1, 0}: signal; group 1 has one valid episode; group 2 none
    assert metrics["groups"] == 3 and metrics["groups_without_signal"] == 0
    assert metrics["samples"] == 1 + 1 + 1 + 2 + 1
    assert metrics["gateway"]["calls"] == 5
    assert metrics["chain_breaks"] == {"template changed history": 1}
    assert metrics["slowest_episode_seconds"] == 900.0
    assert metrics["session_seconds"] == pytest.approx(10 + 12 + 900 + 20 + 5)
    assert metrics["turns"]["max"] == 2.0
    assert metrics["tokens"]["sampled"] == 12 + 8 + 20 + 20 + 20


def test_a_group_of_equal_rewards_has_no_signal() -> None:
    records = step_records(0)  # group 0: rewards 0 and 0
    assert step_metrics("train", 0, records, 1.0, wall_time=0)["groups_without_signal"] == 1


def test_no_valid_episode_gives_no_reward_figures() -> None:
    failed = [agent_failure(0)]
    assert step_metrics("train", 0, failed, 1.0, wall_time=0)["reward"]["mean"] is None


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([float(v) for v in range(101)], 90) == 90.0


def test_reason_keys_group_equal_causes() -> None:
    same = failure_reason_key("timeout after 900s (session a)")
    assert same == failure_reason_key("timeout after 900s (b)") == "timeout after 900s"
    assert failure_reason_key("invoke failed: ThrottlingException") == "invoke failed"
    assert failure_reason_key("") == "unknown"


def test_progress_line_shows_step_reward_failures_and_eta() -> None:
    metrics = step_metrics("train", 4, step_records(4), 60.0, wall_time=0)
    line = progress_line(metrics, num_rollout=10, elapsed=120.0, steps_done=2)
    assert line.startswith("train step 4 (5 of 10) | reward 0.667 | episodes 3/4 ok | failed 1 (timeout 1)")
    assert line.endswith("step 60.0s | ETA 5m00s")  # 60 s a step, 5 steps to go
    last = progress_line(step_metrics("train", 9, step_records(9), 1.0, wall_time=0), 10, 10.0, 1)
    assert "ETA" not in last


def test_turns_with_unreadable_tool_calls_are_counted_and_shown() -> None:
    records = step_records(2)
    assert step_metrics("train", 2, records, 1.0, wall_time=0)["gateway"]["tool_call_errors"] == 0
    first, second = records[0].calls[0], records[1].calls[0]
    flagged = [
        replace(records[0], calls=[replace(first, tool_call_errors=["a tool call is not valid JSON"])]),
        replace(records[1], calls=[replace(second, tool_call_errors=["unknown tool 'x'", "cut off"])]),
        *records[2:],
    ]
    metrics = step_metrics("train", 2, flagged, 1.0, wall_time=0)
    assert metrics["gateway"]["tool_call_errors"] == 2  # turns, not calls
    assert "| unreadable tool calls in 2 turns |" in progress_line(metrics, 10, 1.0, 1)
    assert "unreadable" not in progress_line(step_metrics("train", 2, records, 1.0, wall_time=0), 10, 1.0, 1)
    again = EpisodeRecord.from_json(json.loads(json.dumps(flagged[1].to_json())))
    assert again.calls[0].tool_call_errors == ["unknown tool 'x'", "cut off"]


def test_side_calls_and_dropped_hosted_tools_are_counted_and_shown() -> None:
    records = step_records(2)
    first = records[0].calls[0]
    title = replace(first, side_call="output_config.format without tools", hosted_tools=["web_search"])
    marked = [replace(records[0], calls=[title, first]), *records[1:]]
    metrics = step_metrics("train", 2, marked, 1.0, wall_time=0)
    assert metrics["gateway"]["side_calls"] == 1 and metrics["gateway"]["hosted_tools_dropped"] == 1
    assert "| side calls 1 |" in progress_line(metrics, 10, 1.0, 1)
    assert "side calls" not in progress_line(step_metrics("train", 2, records, 1.0, wall_time=0), 10, 1.0, 1)
    again = EpisodeRecord.from_json(json.loads(json.dumps(marked[0].to_json())))
    assert again.calls[0].side_call == title.side_call and again.calls[0].hosted_tools == ["web_search"]


def test_selection_keeps_the_first_n_and_every_failed_episode() -> None:
    records = step_records(0) + [agent_failure(0)]
    chosen = select_for_browser(records, first=1)
    assert [r.session_id for r in chosen] == ["s0-0", "s0-2", "s0-a"]


def test_episode_records_round_trip_through_json() -> None:
    for record in step_records(2) + [agent_failure(2)]:
        again = EpisodeRecord.from_json(json.loads(json.dumps(record.to_json())))
        assert again == record


def test_metrics_lines_are_whole_and_a_partial_last_line_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    append_json_line(path, {"step": 0, "value": float("nan")})
    append_json_line(path, {"step": 1, "value": 1.5})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"step": 2, "val')  # a writer killed mid-line
    assert list(read_json_lines(path)) == [{"step": 0, "value": None}, {"step": 1, "value": 1.5}]
    assert "NaN" not in path.read_text()


def test_appending_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    (tmp_path / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        append_json_line(tmp_path / "metrics.jsonl", {"step": 0})
    assert victim.read_text() == "the user's file\n"


def test_run_log_writes_metrics_and_episodes_and_survives_a_bad_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "runs" / "exp"
    write_run(run, steps=2, record_episodes=1)
    lines = list(read_json_lines(run / "metrics.jsonl"))
    assert [(line["kind"], line["step"], line["dataset"]) for line in lines] == [
        ("train", 0, ""),
        ("train", 1, ""),
        ("eval", 1, "gsm8k"),
    ]
    assert sorted(os.listdir(run / "episodes")) == [
        "eval-000001-gsm8k.jsonl",
        "train-000000.jsonl",
        "train-000001.jsonl",
    ]
    kept = [line["session_id"] for line in read_json_lines(run / "episodes" / "train-000001.jsonl")]
    assert kept == ["s1-0", "s1-2"]  # the first one and the failed one
    assert "[agentcore] train step 1 (2 of 10)" in capsys.readouterr().err
    # the run goes on when its directory cannot be written: the line still shows
    broken = RunLog(str(tmp_path / "missing" / "dir"), record_episodes=1, num_rollout=None)
    broken.step("train", 0, step_records(0), 1.0)
    assert "train step 0" in capsys.readouterr().err


def test_call_records_come_from_gateway_traces_and_tokens_from_loss_masks() -> None:
    from types import SimpleNamespace

    from agentcore_slime.gateway.trace import CallTrace
    from agentcore_slime.observe.records import CallRecord, token_counts

    trace = CallTrace(
        prompt_token_ids=[1, 2, 3],
        completion_token_ids=[4, 5],
        logprobs=[-0.1, -0.2],
        finish_reason="stop",
        messages=[{"role": "user", "content": "hi"}],
        response_message={"role": "assistant", "content": "yo"},
        token_mode="bridged",
        chain_break="",
        latency_ms=1.25,
    )
    record = CallRecord.from_trace(trace)
    assert (record.prompt_tokens, record.completion_tokens, record.token_mode) == (3, 2, "bridged")
    assert record.messages == [{"role": "user", "content": "hi"}] and record.latency_ms == 1.25
    samples = [
        SimpleNamespace(loss_mask=[1, 1, 0, 0, 0, 1], remove_sample=False),
        SimpleNamespace(loss_mask=[1], remove_sample=False),
        SimpleNamespace(loss_mask=[0], remove_sample=True),  # a failed episode's stand-in
    ]
    assert token_counts(samples) == (4, 3)
