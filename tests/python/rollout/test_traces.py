"""Trace merging: examples and hypothesis properties over random multi-turn episodes.

The oracle for segment boundaries is the obvious quadratic definition (a call continues
the segment iff its prompt starts with the whole running sequence); the merger must
agree with it while comparing only new tokens for ``bridged`` calls.
"""

from __future__ import annotations

from typing import Any

import pytest
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.rollout.traces import merge_traces, merge_traces_to_samples
from fakes.standins import call, multi_turn
from hypothesis import given, settings
from hypothesis import strategies as st
from slime.utils.types import Sample


def template(metadata: Any = None) -> Sample:
    return Sample(
        group_index=3,
        index=7,
        prompt="q",
        label="a",
        metadata={"prompt": "q"} if metadata is None else metadata,
    )


def test_two_turns_become_one_sample_with_masked_bridge() -> None:
    traces = [call([1, 2, 3], [10, 11]), call([1, 2, 3, 10, 11, 20, 21], [30, 31, 32])]
    [sample] = merge_traces_to_samples(traces, template(), session_id="s" * 36, reward=0.5, rollout_id=4)
    assert sample.tokens == [1, 2, 3, 10, 11, 20, 21, 30, 31, 32]
    assert sample.response_length == 7
    assert sample.loss_mask == [1, 1, 0, 0, 1, 1, 1]
    assert sample.rollout_log_probs == [-0.1, -0.11, 0.0, 0.0, -0.3, -0.31, -0.32]
    assert sample.reward == 0.5 and sample.rollout_id == 4 and sample.session_id == "s" * 36
    assert (sample.group_index, sample.index, sample.label) == (3, 7, "a")
    assert sample.status == Sample.Status.COMPLETED
    assert sample.metadata["prompt"] == "q"
    assert sample.metadata["agentcore"]["calls"] == [0, 1]
    sample._validate_response_metadata_lengths()


def test_prefix_break_starts_a_new_segment_sharing_the_episode() -> None:
    traces = [call([1, 2], [3]), call([1, 2, 3, 4], [5]), call([9, 2], [6], finish="length", mode="rendered")]
    first, second = merge_traces_to_samples(traces, template(), session_id="x" * 36, reward=1.0, rollout_id=0)
    assert first.tokens == [1, 2, 3, 4, 5] and first.loss_mask == [1, 0, 1]
    assert second.tokens == [9, 2, 6] and second.response_length == 1
    assert second.status == Sample.Status.TRUNCATED
    assert {first.session_id, second.session_id} == {"x" * 36}
    assert first.rollout_id == second.rollout_id == 0
    assert [s.metadata["agentcore"]["segment"] for s in (first, second)] == [0, 1]


def test_rendered_call_with_a_changed_old_token_breaks_the_segment() -> None:
    """A re-render can change an old token without changing the length (e.g. a clock in the system prompt)."""
    traces = [call([1, 2, 3, 4], [5], mode="rendered"), call([1, 9, 3, 4, 5, 6], [7], mode="rendered")]
    assert [s.calls for s in merge_traces(traces)] == [[0], [1]]


def test_bridged_call_is_checked_over_the_previous_completion() -> None:
    traces = [call([1, 2, 3], [4, 5], mode="rendered"), call([1, 2, 3, 4, 6, 7], [8])]
    assert [s.calls for s in merge_traces(traces)] == [[0], [1]]


def test_bridged_call_with_dropped_history_breaks_the_segment() -> None:
    """History removed by the agent shifts the tokens; the boundary check sees it."""
    first = list(range(100, 140))
    traces = [call(first, [1, 2], mode="rendered"), call(first[10:] + [1, 2, 3] + list(range(9)), [4])]
    assert [s.calls for s in merge_traces(traces)] == [[0], [1]]


def test_call_without_completion_tokens_adds_no_trainable_sample() -> None:
    traces = [call([1, 2], [], finish="abort")]
    assert merge_traces_to_samples(traces, template(), session_id="z" * 36, reward=1.0, rollout_id=0) == []


def test_empty_prompt_is_dropped() -> None:
    assert merge_traces([call([], [1])]) == []


def test_non_dict_row_metadata_is_kept_aside() -> None:
    [sample] = merge_traces_to_samples(
        multi_turn(1), template(metadata=["odd"]), session_id="z" * 36, reward=1.0, rollout_id=0
    )
    assert sample.metadata["row_metadata"] == ["odd"]


def test_long_unbroken_episode_equals_last_prompt_plus_completion() -> None:
    traces = multi_turn(64, prompt_len=50, bridge=200, completion=300)
    [segment] = merge_traces(traces)
    assert segment.tokens == traces[-1].prompt_token_ids + traces[-1].completion_token_ids
    assert segment.sampled_tokens == 64 * 300


# --- hypothesis -----------------------------------------------------------------------------

tokens = st.lists(st.integers(min_value=0, max_value=50_000), min_size=0, max_size=6)


@st.composite
def episodes(draw: st.DrawFn) -> list[CallTrace]:
    """Random episodes: most calls extend the running sequence, some break it anywhere."""
    traces: list[CallTrace] = []
    seq: list[int] = []
    for turn in range(draw(st.integers(min_value=1, max_value=8))):
        kind = (
            "fresh"
            if turn == 0
            else draw(st.sampled_from(["extend", "extend", "extend", "edit", "fresh", "cut"]))
        )
        bridge = draw(tokens)
        if kind == "extend":
            prompt = seq + bridge
            mode = draw(st.sampled_from(["bridged", "rendered"]))
        elif kind == "edit" and seq:
            position = draw(st.integers(min_value=0, max_value=len(seq) - 1))
            prompt = seq[:position] + [seq[position] + 1] + seq[position + 1 :] + bridge
            mode = "rendered"
        elif kind == "cut" and len(seq) > 1:
            prompt = seq[: draw(st.integers(min_value=0, max_value=len(seq) - 1))]
            mode = "rendered"
        else:
            prompt = draw(st.lists(st.integers(0, 50_000), min_size=1, max_size=8))
            mode = "rendered"
        completion = draw(tokens)
        logprobs = [-draw(st.floats(min_value=0.0, max_value=20.0)) for _ in completion]
        finish = draw(st.sampled_from(["stop", "length", "abort"]))
        traces.append(CallTrace(prompt, completion, logprobs, finish, token_mode=mode))
        seq = prompt + completion
    return traces


def oracle_segments(traces: list[CallTrace]) -> list[list[int]]:
    """Call indices per segment by the quadratic definition (before dropping empty ones)."""
    segments: list[list[int]] = []
    seq: list[int] | None = None
    for index, trace in enumerate(traces):
        prompt = trace.prompt_token_ids
        if seq is not None and prompt[: len(seq)] == seq and len(prompt) >= len(seq):
            segments[-1].append(index)
            seq = prompt + trace.completion_token_ids
        else:
            segments.append([index])
            seq = prompt + trace.completion_token_ids
    return segments


@settings(max_examples=300, deadline=None)
@given(episodes())
def test_segments_match_the_definition_and_keep_invariants(traces: list[CallTrace]) -> None:
    segments = merge_traces(traces)
    expected = [
        calls
        for calls in oracle_segments(traces)
        if traces[calls[0]].prompt_token_ids and any(traces[i].completion_token_ids for i in calls)
    ]
    assert [s.calls for s in segments] == expected
    for segment in segments:
        first = traces[segment.calls[0]]
        assert segment.prompt_length == len(first.prompt_token_ids) >= 1
        assert segment.tokens[: segment.prompt_length] == first.prompt_token_ids
        assert len(segment.loss_mask) == len(segment.logprobs) == segment.response_length >= 1
        response = segment.tokens[segment.prompt_length :]
        sampled = [t for t, m in zip(response, segment.loss_mask, strict=True) if m == 1]
        sampled_lp = [lp for lp, m in zip(segment.logprobs, segment.loss_mask, strict=True) if m == 1]
        assert sampled == [t for i in segment.calls for t in traces[i].completion_token_ids]
        assert sampled_lp == [lp for i in segment.calls for lp in traces[i].logprobs]
        assert all(lp == 0.0 for lp, m in zip(segment.logprobs, segment.loss_mask, strict=True) if m == 0)
        last = traces[segment.calls[-1]]
        assert segment.tokens == last.prompt_token_ids + last.completion_token_ids
        assert segment.finish_reason == last.finish_reason


@settings(max_examples=100, deadline=None)
@given(episodes(), st.floats(min_value=-1, max_value=1))
def test_samples_satisfy_slime_invariants(traces: list[CallTrace], reward: float) -> None:
    samples = merge_traces_to_samples(traces, template(), session_id="e" * 36, reward=reward, rollout_id=9)
    for sample in samples:
        sample._validate_response_metadata_lengths()
        assert len(sample.tokens) - sample.response_length >= 1 and sample.response_length >= 1
        assert sample.reward == reward and sample.rollout_id == 9 and isinstance(sample.response, str)
        # rebuilding through slime's own append path gives the same sample
        rebuilt = Sample(tokens=sample.tokens[: len(sample.tokens) - sample.response_length])
        response = sample.tokens[len(rebuilt.tokens) :]
        for token, mask, lp in zip(response, sample.loss_mask, sample.rollout_log_probs, strict=True):
            if mask:
                rebuilt.append_response_tokens(tokens=[token], log_probs=[lp])
            else:
                rebuilt.append_response_tokens(tokens=[token], trainable=False)
        assert (rebuilt.tokens, rebuilt.loss_mask, rebuilt.rollout_log_probs) == (
            sample.tokens,
            sample.loss_mask,
            sample.rollout_log_probs,
        )


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=30), st.integers(min_value=0, max_value=5), st.integers(1, 5))
def test_unbroken_episode_is_one_sample(turns: int, bridge: int, completion: int) -> None:
    traces = multi_turn(turns, bridge=bridge, completion=completion)
    [segment] = merge_traces(traces)
    assert segment.tokens == traces[-1].prompt_token_ids + traces[-1].completion_token_ids
    assert segment.sampled_tokens == turns * completion


@pytest.mark.parametrize("mode", ["bridged", "rendered"])
def test_prompt_shorter_than_running_sequence_breaks(mode: str) -> None:
    traces = [call([1, 2, 3], [4]), call([1, 2, 3], [5], mode=mode)]
    assert [s.calls for s in merge_traces(traces)] == [[0], [1]]
