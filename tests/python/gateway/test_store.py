"""Compact trace storage: exact reconstruction, memory linear in tokens, released on delete.

The store (agentcore_slime.gateway.store) keeps what each call adds; these tests check that
the traces it rebuilds are exactly the records that went in (hypothesis), and, over real
HTTP with the scripted engine, that a session holds its context once (not once per call)
and that delete_session lets the memory go.
"""

from __future__ import annotations

import gc
import time
import weakref

import httpx
from agentcore_slime.gateway import CallTrace
from agentcore_slime.gateway.store import SessionTraces, common_prefix
from hypothesis import given, settings
from hypothesis import strategies as st

ids = st.lists(st.integers(0, 2**31 - 1), max_size=12)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "tool"]), "content": st.text(max_size=5)}
)
step = st.tuples(
    st.integers(0, 30), ids, ids, st.integers(0, 6), st.lists(message, max_size=3)
)


def _calls(
    steps: list[tuple[int, list[int], list[int], int, list[dict[str, str]]]],
) -> list[CallTrace]:
    """Traces whose prompts / messages extend a random part of the previous call's."""
    out: list[CallTrace] = []
    previous_ids: list[int] = []
    previous_messages: list[dict[str, str]] = []
    for keep, tail, completion, keep_msgs, new_msgs in steps:
        prompt = previous_ids[:keep] + tail
        messages = previous_messages[:keep_msgs] + new_msgs
        logprobs = [-0.1 * (i + 1) / 3 for i in range(len(completion))]
        out.append(
            CallTrace(
                prompt,
                completion,
                logprobs,
                "stop",
                messages=messages,
                response_message={"n": len(out)},
            )
        )
        previous_ids, previous_messages = prompt + completion, messages
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=8))
def test_stored_traces_rebuild_exactly(steps) -> None:
    traces = _calls(steps)
    store = SessionTraces()
    for trace in traces:
        store.append(trace)
    assert store.calls() == traces
    if traces:  # an undone call leaves the store as before it
        store.pop_last()
        assert store.calls() == traces[:-1]
        store.append(traces[-1])
        assert store.calls() == traces


@given(ids, ids)
def test_common_prefix(a: list[int], b: list[int]) -> None:
    from array import array

    expected = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
        min(len(a), len(b)),
    )
    assert common_prefix(array("i", a), array("i", b)) == expected


def _conversation(base: str, turns: int) -> list[list[dict[str, str]]]:
    """An agent's conversation: each call the reply and a new user message are appended."""
    sent = []
    messages = [
        {"role": "system", "content": "be brief " * 50},
        {"role": "user", "content": "hi"},
    ]
    for turn in range(turns):
        sent.append([dict(m) for m in messages])
        reply = httpx.post(
            f"{base}/chat/completions",
            json={"model": "m", "messages": messages},
            timeout=30,
        )
        content = reply.json()["choices"][0]["message"]["content"]
        messages = [
            *messages,
            {"role": "assistant", "content": content},
            {"role": "user", "content": f"t{turn}"},
        ]
    return sent


def test_a_session_holds_its_context_once_and_traces_are_exact(make_stand) -> None:
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += [f"reply number {i}" for i in range(6)]
    base = stand.gateway.create_session("s")
    sent = _conversation(base, 6)
    traces = stand.gateway.traces("s")
    assert [t.messages for t in traces] == sent
    assert [t.prompt_token_ids for t in traces] == [
        r["input_ids"] for r in stand.engine.requests
    ]
    store = stand.gateway.sessions.by_id["s"].store
    last = traces[-1]
    # each call stored only what it added: the ids held are the final context, not the sum of prompts
    assert store.held_tokens == len(last.prompt_token_ids) + len(
        last.completion_token_ids
    )
    assert store.held_tokens < sum(len(t.prompt_token_ids) for t in traces) / 3


def test_delete_session_releases_its_memory(make_stand) -> None:
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += ["a", "b", "c"]
    base = stand.gateway.create_session("s")
    _conversation(base, 3)
    session = stand.gateway.sessions.by_id["s"]
    refs = [weakref.ref(session.store), weakref.ref(session.chain.ids)]  # type: ignore[union-attr]
    del session
    stand.gateway.delete_session("s")
    deadline = time.monotonic() + 120  # a render thread may drop its last reference a moment later
    while any(ref() is not None for ref in refs) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert [ref() for ref in refs] == [None, None]
