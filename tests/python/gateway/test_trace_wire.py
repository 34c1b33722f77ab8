"""trace_wire: a session's stored calls survive bytes exactly (ids, logprobs bit for bit, messages)."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from agentcore_slime.gateway import trace_wire
from agentcore_slime.gateway.store import SessionTraces, rebuild
from agentcore_slime.gateway.trace import CallTrace
from gateway_helpers import json_values
from hypothesis import given, settings
from hypothesis import strategies as st

# any text, lone surrogates included (agents' JSON may carry \ud800 escapes)
TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)
JSON = json_values(TEXT, max_int=2**70, max_leaves=8)
IDS = st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=40)
MESSAGE = st.dictionaries(TEXT, JSON, max_size=4)


@st.composite
def sessions(draw: Any) -> list[CallTrace]:
    """Calls that extend the previous prompt + completion and messages by a random amount,
    as a session's calls do (the store then keeps only what each adds)."""
    calls: list[CallTrace] = []
    ids: list[int] = []
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 5))):
        prompt = ids[: draw(st.integers(0, len(ids)))] + draw(IDS)
        completion = draw(IDS)
        messages = messages[: draw(st.integers(0, len(messages)))] + draw(st.lists(MESSAGE, max_size=3))
        calls.append(
            CallTrace(
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                # every double, NaN payloads, infinities and -0.0 included
                logprobs=draw(st.lists(st.floats(), min_size=len(completion), max_size=len(completion))),
                finish_reason=draw(st.sampled_from(["stop", "length", "abort"])),
                messages=list(messages),
                response_message=draw(MESSAGE),
                token_mode=draw(st.sampled_from(["bridged", "rendered"])),
                session_id=draw(TEXT),
                engine_finish=draw(MESSAGE),
                sampling_params=draw(MESSAGE),
                chain_break=draw(TEXT),
                latency_ms=draw(st.floats(allow_nan=False)),
                weight_version=draw(st.none() | TEXT),
            )
        )
        ids = prompt + completion
    return calls


def _bits(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def _comparable(trace: CallTrace) -> dict[str, Any]:
    """Every field; logprobs as their bits (NaN != NaN as floats)."""
    fields = dataclasses.asdict(trace)
    fields["logprobs"] = _bits(trace.logprobs)
    return fields


@settings(max_examples=150, deadline=None)
@given(sessions())
def test_stored_calls_round_trip_exactly(calls: list[CallTrace]) -> None:
    store = SessionTraces()
    for call in calls:
        store.append(call)
    stored = store.snapshot()
    back = trace_wire.decode(trace_wire.encode(stored))
    assert len(back) == len(stored)
    for before, after in zip(stored, back, strict=True):
        assert after.new_prompt_ids.typecode == "i" and after.completion_ids.typecode == "i"
        assert after.logprobs.typecode == "d" and after.logprobs.tobytes() == before.logprobs.tobytes()
        assert (after.shared_ids, after.shared_messages) == (before.shared_ids, before.shared_messages)
        assert (after.new_prompt_ids, after.completion_ids) == (before.new_prompt_ids, before.completion_ids)
        assert after.blob == before.blob  # the messages it adds and the metadata, as stored
    assert [_comparable(t) for t in rebuild(back)] == [_comparable(t) for t in calls]


def test_bad_bytes_are_a_value_error() -> None:
    store = SessionTraces()
    messages = [{"role": "user", "content": "x"}]
    store.append(CallTrace([1, 2, 3], [4, 5], [-0.5, -0.25], "stop", messages=messages))
    data = trace_wire.encode(store.snapshot())
    assert trace_wire.decode(trace_wire.encode([])) == []
    for bad, problem in [
        (data[:-1], "end inside call 0 of 1"),
        (data + b"\0", "1 bytes after the last of 1 calls"),
        (b"JSON" + data[4:], "not trace bytes"),
        (data[:3], "too short"),
    ]:
        with pytest.raises(ValueError, match=problem):
            trace_wire.decode(bad)
