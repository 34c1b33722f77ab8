"""Drift-free by default, and a verdict for every call (CallTrace.joined, chain_break).

A Qwen3-style chat template (old turns lose their reasoning, built locally like the toy
Qwen2.5 tokenizer) through the real openai SDK -> gateway -> scripted SGLang server, merged by
the rollout's own merge: with default settings an episode trains as one sample; with
``CUMULATIVE_TOKEN_MODE=false`` (every call re-rendered) the same episode forks, and the trace
says why. A rewritten reply is abandoned (untrained), so that episode is one record too.

With the PUBLISHED Qwen3 template (tests/fixtures/chat_templates/qwen3.jinja, its provenance in
chat_templates.py: reasoning kept only after the last user query, the last reply's empty
``<think>`` block while it is last, ``<think>``/``<tool_call>`` ordinary added tokens as in the
real tokenizer), default settings otherwise (``SGLANG_REASONING_PARSER=qwen3``, the ``qwen`` tool
parser): six episodes of two and three user turns with tool loops are one sample each; the bridge
that follows the template's re-render (``CUMULATIVE_BRIDGE=template``, the default before) splits
them into one sample per user turn, 16 in all (the failure issue 44 measured).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.rollout.traces import merge_traces
from chat_templates import FAMILIES, build_family_dir
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


# user turns per episode (each: tool calls before the answer): 3+3+3+3+2+2 = 16 user turns
QWEN3_EPISODES = [(1, 0, 2), (0, 0, 0), (2, 1, 0), (0, 1, 1), (1, 0), (0, 2)]


@pytest.fixture(scope="module")
def qwen3_published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from transformers import AutoTokenizer

    directory = build_family_dir(tmp_path_factory.mktemp("qwen3-published"), FAMILIES["qwen3"])
    return directory, AutoTokenizer.from_pretrained(str(directory))


def _qwen3_replies(turns: tuple[int, ...]) -> list[str]:
    """What Qwen3 samples in thinking mode: reasoning, then a tool call or the answer."""
    replies = []
    for turn, tools in enumerate(turns):
        for step in range(tools):
            call = tool_call_text("add", {"a": turn, "b": step})
            replies.append(f"<think>\nI add {turn} and {step}.\n</think>\n\n{call}")
        replies.append(f"<think>\nDone with {turn}.\n</think>\n\nThe sum is {turn}.")
    return replies


def _qwen3_episode(base_url: str, turns: tuple[int, ...]) -> None:
    """An openai-SDK agent: tool results as tool messages, each reply sent back whole as the SDK
    parsed it (content, tool calls and the ``reasoning_content`` the gateway returned)."""
    with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30) as client:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You add numbers."}]
        for turn in range(len(turns)):
            messages.append({"role": "user", "content": f"Question {turn}?"})
            while True:
                out = client.chat.completions.create(model="m", messages=messages, tools=[ADD_TOOL])
                reply = out.choices[0].message
                messages.append(reply.model_dump(exclude_none=True))
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": "7"})


def _qwen3_samples(model: tuple[Path, Any], **config: Any) -> tuple[int, list[str]]:
    replies = [r for turns in QWEN3_EPISODES for r in _qwen3_replies(turns)]
    gateway, engine = _serve(model, replies, **config)
    samples, forks = 0, []
    try:
        for i, turns in enumerate(QWEN3_EPISODES):
            _qwen3_episode(gateway.create_session(f"e{i}"), turns)
            traces = gateway.traces(f"e{i}")
            samples += len(merge_traces(traces))
            forks += [t.chain_break for t in traces if t.joined == "forked"]
    finally:
        gateway.shutdown()
        engine.stop()
    return samples, forks


def test_the_published_qwen3_template_gives_one_sample_per_episode(qwen3_published) -> None:
    assert _qwen3_samples(qwen3_published) == (len(QWEN3_EPISODES), [])


def test_following_the_published_qwen3_rerender_splits_at_every_user_turn(qwen3_published) -> None:
    """The measured failure: 6 episodes, 16 samples, one fork per later user turn."""
    samples, forks = _qwen3_samples(qwen3_published, cumulative_bridge="template")
    assert samples == 16 == sum(len(turns) for turns in QWEN3_EPISODES)
    assert forks == ["reasoning dropped"] * 10


def test_the_renderers_qwen3_family_bridges_every_user_turn_too(qwen3_published) -> None:
    """renderers' own Qwen3 renderer (RENDERER_FAMILY=qwen3): its bridge declines a new user
    turn under the family's retention policy (CUMULATIVE_BRIDGE=template: 16 samples); by default
    the gateway bridges with thinking_retention="all", which renders only the new messages."""
    assert _qwen3_samples(qwen3_published, renderer_family="qwen3") == (len(QWEN3_EPISODES), [])
    samples, forks = _qwen3_samples(qwen3_published, renderer_family="qwen3", cumulative_bridge="template")
    assert samples == 16 and set(forks) == {"reasoning dropped"}
