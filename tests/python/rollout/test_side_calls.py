"""Side calls in the merge: left out of the episode's samples by default, each lane merged on
its own when trained (TRAIN_SIDE_CALLS), an episode of side calls only trained as its main one.

The traces are shaped as the gateway records Claude Code's episode (tests/python/gateway/
test_agent_clis.py): a session-title side call first (rendered, no verdict), then the main
conversation, whose chain the side call left as it was, and a side call in its middle.
"""

from __future__ import annotations

import dataclasses

from agentcore_slime.gateway.trace import REPLY_REWRITTEN, CallTrace
from agentcore_slime.rollout.traces import merge_traces, untrained_side_calls
from fakes.standins import call

TITLE = "output_config.format without tools"


def _with(trace: CallTrace, **changes: object) -> CallTrace:
    return dataclasses.replace(trace, **changes)  # type: ignore[arg-type]


def episode() -> list[CallTrace]:
    return [
        _with(call([7, 8], [9], mode="rendered"), joined="", side_call=TITLE),
        _with(call([1, 2, 3], [10, 11], mode="rendered"), joined="start"),
        _with(call([7, 8, 9, 6], [5], mode="rendered"), joined="", side_call=TITLE),
        _with(call([1, 2, 3, 10, 11, 20], [30], mode="bridged"), joined="extended"),
    ]


def test_side_calls_are_left_out_and_the_main_conversation_is_one_sample() -> None:
    traces = episode()
    [segment] = merge_traces(traces)
    assert segment.calls == [1, 3] and segment.loss_mask == [1, 1, 0, 1]
    assert untrained_side_calls(traces) == 2


def test_trained_side_calls_merge_on_their_own_lane() -> None:
    traces = episode()
    segments = merge_traces(traces, train_side_calls=True)
    assert [s.calls for s in segments] == [[0, 2], [1, 3]]  # the second title call extends the first
    assert segments[0].loss_mask == [1, 0, 1] and untrained_side_calls(traces, True) == 0


def test_an_episode_of_side_calls_only_is_its_own_main_conversation() -> None:
    traces = [t for t in episode() if t.side_call]
    assert [s.calls for s in merge_traces(traces)] == [[0, 1]]
    assert untrained_side_calls(traces) == 0


def test_a_rewritten_reply_is_judged_by_the_next_call_of_its_own_lane() -> None:
    traces = episode()
    # the side call in the middle forks with "reply rewritten": it says nothing about the main call
    traces[2] = _with(traces[2], chain_break=REPLY_REWRITTEN)
    [segment] = merge_traces(traces)
    assert segment.abandoned == [] and segment.sampled_tokens == 3
    traces[3] = _with(traces[3], joined="forked", chain_break=REPLY_REWRITTEN)
    segments = merge_traces(traces)
    assert [s.calls for s in segments] == [[3]]  # the first main call's reply was not the episode's
