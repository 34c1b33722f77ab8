"""The merge reads each call's verdict (CallTrace.joined): what starts a sample, what joins it,
and a rewritten reply left untrained.

The gateway decided ``joined`` by comparing the whole prompt (tests/python/gateway/test_forks.py);
the merge trusts ``forked`` and spot-checks ``extended`` / ``rerendered`` in linear time, and a
trace without a verdict (recorded before there was one) is compared in full as before.
"""

from __future__ import annotations

import dataclasses

from agentcore_slime.gateway.trace import REPLY_REWRITTEN, CallTrace
from agentcore_slime.rollout.traces import merge_traces, merge_traces_to_samples
from fakes.standins import call
from slime.utils.types import Sample


def _with(trace: CallTrace, **changes: object) -> CallTrace:
    return dataclasses.replace(trace, **changes)  # type: ignore[arg-type]


def test_a_matching_rerender_joins_the_sample() -> None:
    traces = [
        _with(call([1, 2, 3], [10, 11], mode="rendered"), joined="start"),
        _with(call([1, 2, 3, 10, 11, 20], [30], mode="rendered"), joined="rerendered"),
    ]
    [segment] = merge_traces(traces)
    assert segment.calls == [0, 1] and segment.loss_mask == [1, 1, 0, 1]


def test_a_forked_call_starts_a_sample_and_a_verdict_is_still_checked() -> None:
    first = _with(call([1, 2, 3], [10, 11], mode="rendered"), joined="start")
    forked = _with(call([1, 2, 3, 10, 11, 20], [30], mode="rendered"), joined="forked", chain_break="repeat")
    assert [s.calls for s in merge_traces([first, forked])] == [[0], [1]]
    # a "rerendered" verdict whose tokens do not extend the previous call's still forks
    wrong = _with(call([1, 2, 4, 10, 12, 20], [30], mode="rendered"), joined="rerendered")
    assert [s.calls for s in merge_traces([first, wrong])] == [[0], [1]]


def test_traces_without_a_verdict_are_compared_in_full() -> None:
    first = call([1, 2, 3], [10, 11], mode="rendered")
    drifted = call([1, 9, 3, 10, 11, 20], [30], mode="rendered")  # an old position changed
    assert [s.calls for s in merge_traces([first, drifted])] == [[0], [1]]


def test_a_rewritten_reply_is_not_trained_and_its_empty_record_is_dropped() -> None:
    traces = [
        _with(call([1, 2, 3], [10, 11]), joined="start"),
        _with(call([1, 2, 3, 10, 11, 20], [12, 13]), joined="extended"),
        # the agent sent back another text than [12, 13]: a re-render with its own text
        _with(call([1, 2, 3, 10, 11, 20, 44, 21], [30]), joined="forked", chain_break=REPLY_REWRITTEN),
    ]
    first, second = merge_traces(traces)
    assert first.calls == [0, 1] and first.abandoned == [1]
    assert first.loss_mask == [1, 1, 0, 0, 0] and first.logprobs[-2:] == [0.0, 0.0]
    assert first.sampled_tokens == 2 and second.calls == [2]
    # a two-call episode whose reply was rewritten: one record, the second call's
    two = [traces[0], _with(traces[2], prompt_token_ids=[1, 2, 3, 44, 21])]
    template = Sample(group_index=0, index=0, prompt="q", label="a", metadata={})
    [sample] = merge_traces_to_samples(two, template, session_id="s", reward=1.0, rollout_id=0)
    assert sample.tokens == [1, 2, 3, 44, 21, 30] and sample.loss_mask == [1]
