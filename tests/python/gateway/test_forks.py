"""Drift-free by default, and a verdict for every call (CallTrace.joined, chain_break).

A Qwen3-style chat template (old turns lose their reasoning, built locally like the toy
Qwen2.5 tokenizer) through the real openai SDK -> gateway -> scripted SGLang server, merged by
the rollout's own merge: with default settings an episode trains as one sample; with
``CUMULATIVE_TOKEN_MODE=false`` (every call re-rendered) the same episode forks, and the trace
says why. A rewritten reply is abandoned (untrained), so that episode is one record too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.rollout.traces import merge_traces
from fakes.sglang_server import FakeSGLang, text_policy
from fakes.toy_tokenizer import QWEN3_STYLE_CHAT_TEMPLATE, build_toy_tokenizer
from gateway_helpers import ADD_TOOL, Script, tool_call_text

SUB_TOOL = {
    "type": "function",
    "function": {"name": "sub", "parameters": {"type": "object", "properties": {}}},
}
REPLIES = ["<think>\nsimple sum\n</think>\n\n4", "<think>\nadd ten\n</think>\n\n14"]


@pytest.fixture(scope="module")
def qwen3_style(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A model directory whose chat template drops the reasoning of turns before the last user turn."""
    from transformers import AutoTokenizer

    directory = build_toy_tokenizer(tmp_path_factory.mktemp("toy-qwen3-style"), QWEN3_STYLE_CHAT_TEMPLATE)
    return directory, AutoTokenizer.from_pretrained(str(directory))


def _serve(model: tuple[Path, Any], replies: list[str], **config: Any) -> tuple[Gateway, FakeSGLang]:
    directory, tokenizer = model
    engine = FakeSGLang(text_policy(tokenizer, Script(list(replies)).respond), tokenizer=tokenizer)
    engine.start()
    gateway = Gateway(
        GatewayConfig(str(directory), host="127.0.0.1", port=0, reasoning_parser="qwen3", **config)
    )
    gateway.start(engine.url)
    return gateway, engine


def _two_user_turns(base_url: str) -> None:
    """What most frameworks do: the assistant's reply goes back without its reasoning."""
    with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30) as client:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "2+2?"}]
        out = client.chat.completions.create(model="m", messages=messages)
        assert out.choices[0].message.model_extra.get("reasoning_content", "").strip() == "simple sum"
        messages += [
            {"role": "assistant", "content": out.choices[0].message.content},
            {"role": "user", "content": "add 10"},
        ]
        client.chat.completions.create(model="m", messages=messages)


def _trained_text(tokenizer: Any, segment: Any) -> str:
    ids = segment.tokens[segment.prompt_length :]
    return str(tokenizer.decode([i for i, bit in zip(ids, segment.loss_mask, strict=True) if bit]))


def test_qwen3_style_agent_is_one_sample_with_default_settings(qwen3_style) -> None:
    gateway, engine = _serve(qwen3_style, REPLIES)
    try:
        _two_user_turns(gateway.create_session("s"))
        traces = gateway.traces("s")
    finally:
        gateway.shutdown()
        engine.stop()
    assert [(t.joined, t.token_mode, t.chain_break) for t in traces] == [
        ("start", "rendered", ""),
        ("extended", "bridged", ""),
    ]
    [segment] = merge_traces(traces)
    assert _trained_text(qwen3_style[1], segment) == (
        "<think>\nsimple sum\n</think>\n\n4<|im_end|><think>\nadd ten\n</think>\n\n14<|im_end|>"
    )


def test_rendering_every_call_forks_it_and_says_why(qwen3_style) -> None:
    """The old default (CUMULATIVE_TOKEN_MODE=false): two records, each call's verdict recorded."""
    gateway, engine = _serve(qwen3_style, REPLIES, cumulative_token_mode=False)
    try:
        _two_user_turns(gateway.create_session("s"))
        traces = gateway.traces("s")
    finally:
        gateway.shutdown()
        engine.stop()
    assert [(t.joined, t.chain_break) for t in traces] == [("start", ""), ("forked", "reasoning dropped")]
    assert len(merge_traces(traces)) == 2


def test_a_rerender_that_matches_stays_in_the_sample(qwen3_style) -> None:
    """Rendered mode, replies without reasoning: the re-render starts with the sampled tokens."""
    gateway, engine = _serve(qwen3_style, ["4", "14"], cumulative_token_mode=False)
    try:
        _two_user_turns_plain = gateway.create_session("s")
        with openai.OpenAI(base_url=_two_user_turns_plain, api_key="x", max_retries=0) as client:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "2+2?"}]
            out = client.chat.completions.create(model="m", messages=messages)
            messages += [
                {"role": "assistant", "content": out.choices[0].message.content},
                {"role": "user", "content": "add 10"},
            ]
            client.chat.completions.create(model="m", messages=messages)
        traces = gateway.traces("s")
    finally:
        gateway.shutdown()
        engine.stop()
    assert [(t.joined, t.token_mode, t.chain_break) for t in traces] == [
        ("start", "rendered", ""),
        ("rerendered", "rendered", ""),
    ]
    assert len(merge_traces(traces)) == 1


def test_a_rewritten_reply_is_one_record_with_the_abandoned_generation_untrained(qwen3_style) -> None:
    """The agent trims the model's reply before sending it back: the first generation never
    reached the conversation the reward scored, so it is kept with loss 0 and the episode is
    the one record that goes on from the rewritten text."""
    tokenizer = qwen3_style[1]
    gateway, engine = _serve(qwen3_style, ["The answer is 4, I think.", "14"])
    try:
        with openai.OpenAI(base_url=gateway.create_session("s"), api_key="x", max_retries=0) as client:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "2+2?"}]
            client.chat.completions.create(model="m", messages=messages)
            messages += [{"role": "assistant", "content": "4"}, {"role": "user", "content": "add 10"}]
            client.chat.completions.create(model="m", messages=messages)
        traces = gateway.traces("s")
    finally:
        gateway.shutdown()
        engine.stop()
    assert [(t.joined, t.chain_break) for t in traces] == [("start", ""), ("forked", "reply rewritten")]
    [segment] = merge_traces(traces)
    assert segment.calls == [1] and segment.abandoned == []
    assert _trained_text(tokenizer, segment) == "14<|im_end|>"
    assert "assistant\n4<|im_end|>" in tokenizer.decode(segment.tokens[: segment.prompt_length])


def test_each_fork_reason_is_named(make_stand) -> None:
    """History rewritten, tool result changed, context compacted, sub-agent, tools changed, repeat:
    each call after the first forks (the conversation does not extend the previous call's)."""
    stand = make_stand()
    add = tool_call_text("add", {"a": 1, "b": 2})
    stand.script.replies += [add, "3", "3", "3", "3", "3", "3", "3"]
    with openai.OpenAI(base_url=stand.gateway.create_session("s"), api_key="x", max_retries=0) as client:

        def call(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Any:
            return client.chat.completions.create(model="m", messages=messages, tools=tools or [ADD_TOOL])

        first = [{"role": "system", "content": "math"}, {"role": "user", "content": "1+2?"}]
        out = call(first)
        tool_call = out.choices[0].message.tool_calls[0]
        echoed = {"role": "assistant", "tool_calls": [tool_call.model_dump()], "content": None}
        with_result = [*first, echoed, {"role": "tool", "tool_call_id": tool_call.id, "content": "3"}]
        call(with_result)  # extends
        changed = [*first, echoed, {"role": "tool", "tool_call_id": tool_call.id, "content": "three"}]
        call([*changed, {"role": "assistant", "content": "3"}, {"role": "user", "content": "ok"}])
        rewritten = [{"role": "system", "content": "math"}, {"role": "user", "content": "1 + 2?"}]
        history = [*rewritten, echoed, *changed[3:], {"role": "assistant", "content": "3"}]
        call([*history, {"role": "user", "content": "ok"}, {"role": "assistant", "content": "3"},
              {"role": "user", "content": "more"}])
        call([first[1], {"role": "assistant", "content": "3"}, {"role": "user", "content": "and?"}])
        call([{"role": "system", "content": "you check sums"}, {"role": "user", "content": "1+2=3?"}])
        call([{"role": "system", "content": "you check sums"}, {"role": "user", "content": "1+2=3?"}])
        call([{"role": "system", "content": "you check sums"}, {"role": "user", "content": "1+2=3?"},
              {"role": "assistant", "content": "3"}, {"role": "user", "content": "sure?"}], tools=[SUB_TOOL])
    verdicts = [(t.joined, t.chain_break) for t in stand.gateway.traces("s")]
    assert verdicts == [
        ("start", ""),
        ("extended", ""),
        ("forked", "tool result changed"),
        ("forked", "history rewritten"),
        ("forked", "context compacted"),
        ("forked", "sub-agent"),
        ("forked", "repeat"),
        ("forked", "tools changed"),
    ]
