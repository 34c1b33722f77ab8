"""Cumulative token mode: every turn's prompt extends the previous prompt + sampled completion.

Real openai SDK -> gateway -> scripted SGLang server, toy Qwen2.5-like tokenizer. For the
chat-template model (no renderers family: Qwen2.5) the gateway's ChatML bridge is used; for
renderers' qwen3 family, renderers' own bridge. Property test: random multi-turn tool
conversations give 0 drift and decode to exactly the conversation the agent saw.
"""

from __future__ import annotations

import json
import string
import uuid
from typing import Any

import openai
from gateway_helpers import ADD_TOOL, tool_call_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}
TOOLS = [ADD_TOOL, LOOKUP_TOOL]
_ALPHABET = string.ascii_letters + string.digits + " .,:;!?'\"()-+=\n"
texts = st.text(alphabet=_ALPHABET, min_size=1, max_size=30)
stripped = texts.map(str.strip).filter(bool)
values = st.one_of(st.integers(-999, 999), stripped)
arguments = st.dictionaries(st.sampled_from(["a", "b", "q"]), values, max_size=3)
tool_turn = st.tuples(
    st.just("tools"),
    st.lists(
        st.tuples(st.sampled_from(["add", "lookup"]), arguments), min_size=1, max_size=3
    ),
    st.one_of(st.none(), stripped),
    st.lists(texts, min_size=3, max_size=3),
)
answer_turn = st.tuples(st.just("answer"), texts, texts)
truncated_turn = st.tuples(
    st.just("truncated"),
    st.text(alphabet=string.ascii_letters + " ", min_size=40),
    texts,
)
plans = st.lists(
    st.one_of(tool_turn, answer_turn, truncated_turn), min_size=1, max_size=5
)


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)


def _echo(message: Any) -> dict[str, Any]:
    """The assistant message as an agent puts it back into its history."""
    return message.model_dump(
        exclude_none=True, exclude={"refusal", "annotations", "audio", "function_call"}
    )


def _assert_chain(traces: list) -> None:
    for prev, cur in zip(traces, traces[1:], strict=False):
        head = prev.prompt_token_ids + prev.completion_token_ids
        assert cur.token_mode == "bridged", cur.chain_break
        assert cur.prompt_token_ids[: len(head)] == head


def test_random_tool_conversations_have_zero_drift(make_stand, tokenizer) -> None:
    stand = make_stand(cumulative_token_mode=True)

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(plan=plans, system=st.one_of(st.none(), stripped), first=texts)
    def run(plan, system, first) -> None:
        sid = uuid.uuid4().hex
        # closed when the example ends: a client left to the garbage collector leaves an open
        # socket whose ResourceWarning fails whichever later test happens to collect it
        with _client(stand.gateway.create_session(sid, {"max_new_tokens": 200})) as client:
            run_plan(client, sid, plan, system, first)

    def run_plan(client: Any, sid: str, plan: Any, system: Any, first: str) -> None:
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": system}] if system else []
        )
        messages.append({"role": "user", "content": first})
        for kind, *rest in plan:
            if kind == "tools":
                calls, content, results = rest
                stand.script.replies.append(
                    "\n".join(tool_call_text(n, a) for n, a in calls)
                )
                if content:
                    stand.script.replies[-1] = content + "\n" + stand.script.replies[-1]
            else:
                stand.script.replies.append(rest[0])
            limit = 3 if kind == "truncated" else None
            out = client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, max_tokens=limit
            )
            messages.append(_echo(out.choices[0].message))
            if kind == "tools":
                got = out.choices[0].message.tool_calls
                assert [
                    (c.function.name, json.loads(c.function.arguments)) for c in got
                ] == calls
                messages += [
                    {"role": "tool", "tool_call_id": c.id, "content": r}
                    for c, r in zip(got, results, strict=False)
                ]
            else:
                assert out.choices[0].finish_reason == ("length" if limit else "stop")
                messages.append({"role": "user", "content": rest[1]})
        stand.script.replies.append("final answer")
        out = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        messages.append(_echo(out.choices[0].message))

        traces = stand.gateway.traces(sid)
        assert len(traces) == len(plan) + 1 and traces[0].token_mode == "rendered"
        _assert_chain(traces)
        merged = traces[-1].prompt_token_ids + traces[-1].completion_token_ids
        seen = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
        assert tokenizer.decode(merged) + "\n" == seen
        stand.gateway.delete_session(sid)

    run()


def test_edited_history_breaks_the_chain_and_says_why(make_stand) -> None:
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += [tool_call_text("add", {"a": 1, "b": 2}), "3", "ok"]
    client = _client(stand.gateway.create_session("s"))
    messages = [{"role": "user", "content": "1+2?"}]
    out = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    call = out.choices[0].message.tool_calls[0]
    messages += [
        _echo(out.choices[0].message),
        {"role": "tool", "tool_call_id": call.id, "content": "3"},
    ]
    client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    messages[0] = {
        "role": "user",
        "content": "1 + 2 ?",
    }  # the agent rewrote its history
    messages += [
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "thanks"},
    ]
    client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    modes = [(t.token_mode, t.chain_break) for t in stand.gateway.traces("s")]
    assert modes[0] == ("rendered", "") and modes[1] == ("bridged", "")
    # the reason is named from the fork vocabulary (CallTrace.chain_break), counted per step
    assert modes[2] == ("rendered", "history rewritten")


def test_a_repeated_call_without_key_is_a_second_sample_and_both_are_traced(
    make_stand,
) -> None:
    """Without an Idempotency-Key a repeat cannot be told from a second sample (best-of-n,
    self-consistency): every delivered reply is traced, both from the same prompt ids, and the
    conversation continues from the reply the agent echoes."""
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += ["first try", "second try", "next"]
    client = _client(stand.gateway.create_session("s"))
    messages = [{"role": "user", "content": "hi"}]
    client.chat.completions.create(model="m", messages=messages)
    out = client.chat.completions.create(model="m", messages=messages)
    traces = stand.gateway.traces("s")
    assert [t.response_message["content"] for t in traces] == [
        "first try",
        "second try",
    ]
    assert traces[0].prompt_token_ids == traces[1].prompt_token_ids
    messages += [_echo(out.choices[0].message), {"role": "user", "content": "more"}]
    client.chat.completions.create(model="m", messages=messages)
    traces = stand.gateway.traces("s")
    assert len(traces) == 3 and traces[2].token_mode == "bridged"
    _assert_chain(traces[1:])


def test_non_cumulative_mode_renders_every_call(make_stand) -> None:
    stand = make_stand(cumulative_token_mode=False)
    stand.script.replies += ["a", "b"]
    client = _client(stand.gateway.create_session("s"))
    out = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    messages = [
        {"role": "user", "content": "x"},
        _echo(out.choices[0].message),
        {"role": "user", "content": "y"},
    ]
    client.chat.completions.create(model="m", messages=messages)
    assert [t.token_mode for t in stand.gateway.traces("s")] == ["rendered", "rendered"]


def test_qwen3_family_uses_renderers_bridge(make_stand, tokenizer) -> None:
    """renderers' Qwen3Renderer on the toy vocab: reasoning parsed, tool turns bridged by renderers,
    and with CUMULATIVE_BRIDGE=template a new user turn re-rendered (Qwen3's default thinking
    retention is tool_cycle; the default bridge is in test_forks.py)."""
    stand = make_stand(cumulative_token_mode=True, renderer_family="qwen3", cumulative_bridge="template")
    stand.script.replies += [
        "<think>\nneed to add\n</think>\n\n" + tool_call_text("add", {"a": 2, "b": 2}),
        "<think>\ndone\n</think>\n\nIt is 4.",
        "<think>\nok\n</think>\n\nBye.",
    ]
    client = _client(stand.gateway.create_session("s"))
    messages = [{"role": "user", "content": "2+2?"}]
    out = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert msg.model_extra.get("reasoning_content", "").strip() == "need to add"
    messages += [
        _echo(msg),
        {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "4"},
    ]
    out = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert out.choices[0].message.content.strip() == "It is 4."
    messages += [_echo(out.choices[0].message), {"role": "user", "content": "thanks"}]
    client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    traces = stand.gateway.traces("s")
    _assert_chain(traces[:2])
    assert (
        traces[2].token_mode == "rendered"
        and traces[2].chain_break == "reasoning dropped"  # the renderer declined: Qwen3 drops it
    )
