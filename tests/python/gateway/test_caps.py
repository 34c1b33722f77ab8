"""MAX_CALLS_PER_EPISODE / MAX_TOKENS_PER_EPISODE at the gateway, for every protocol.

A Strands agent whose model never stops calling its tool (the scripted engine answers every
call with a tool call) runs on each protocol's model class (chat, Responses, Anthropic
Messages, Bedrock ConverseStream): once the session has made its capped number of calls, the
next call gets a short final reply with a normal end of turn, the agent's loop ends without an
exception, and the gateway recorded only the sampled calls. The real SDKs (openai, anthropic,
boto3, anthropic's Bedrock client) check the non-streamed shapes of that reply.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one.
"""

from __future__ import annotations

import gc
import json
import warnings
from typing import Any

import anthropic
import boto3
import openai
import pytest
from agentcore_slime.gateway.caps import CAPPED_TEXT
from gateway_helpers import ADD_TOOL, tool_call_text
from strands import Agent, tool
from test_strands_protocols import _anthropic, _bedrock, _chat, _responses

LOOP = tool_call_text("add", {"a": 1, "b": 1})


@pytest.mark.parametrize(
    "model",
    [_chat, _responses, _anthropic, _bedrock],
    ids=["chat", "responses", "anthropic", "bedrock"],
)
def test_a_looping_strands_agent_is_capped_and_ends_its_turn(make_stand, model) -> None:
    stand = make_stand(max_calls_per_episode=3)
    stand.script.replies += [LOOP] * 10  # never stops on its own
    calls: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first addend
            b: second addend
        """
        calls.append(a + b)
        return a + b

    stand.gateway.create_session("looping", {"max_new_tokens": 64})
    agent = Agent(
        model=model(stand.gateway.url, "looping"), tools=[add], callback_handler=None
    )
    result = agent("Add 1 and 1 until told to stop.")
    assert result.stop_reason == "end_turn"
    assert CAPPED_TEXT in str(result)
    assert calls == [2, 2, 2]  # three sampled tool calls, then the final reply
    assert len(stand.engine.requests) == 3  # the final reply never reached the engine
    traces = stand.gateway.traces("looping")
    assert len(traces) == 3 and all(
        CAPPED_TEXT not in json.dumps(t.response_message) for t in traces
    )
    del agent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_the_token_cap_counts_sampled_tokens(make_stand, tokenizer) -> None:
    stand = make_stand(max_tokens_per_episode=12)
    long = "one two three four five six seven eight nine ten eleven twelve thirteen"
    stand.script.replies += [long, "never sampled"]
    base = stand.gateway.create_session("tokens", {"max_new_tokens": 64})
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "count"}]
    first = client.chat.completions.create(model="m", messages=messages)
    assert first.choices[0].message.content == long
    assert len(stand.gateway.traces("tokens")[0].completion_token_ids) >= 12
    messages += [
        {"role": "assistant", "content": long},
        {"role": "user", "content": "go on"},
    ]
    second = client.chat.completions.create(model="m", messages=messages)
    assert second.choices[0].message.content == CAPPED_TEXT
    assert second.choices[0].finish_reason == "stop"
    assert (
        stand.script.replies == ["never sampled"]
        and len(stand.gateway.traces("tokens")) == 1
    )


def _capped_stand(make_stand: Any, sid: str) -> Any:
    """A session that used up its one call."""
    stand = make_stand(max_calls_per_episode=1)
    stand.script.replies += [LOOP]
    base = stand.gateway.create_session(sid, {"max_new_tokens": 64})
    openai.OpenAI(
        base_url=base, api_key="unused", max_retries=0
    ).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "add"}],
        tools=[ADD_TOOL],  # type: ignore[list-item]
    )
    return stand


@pytest.mark.parametrize("stream", [False, True])
def test_chat_and_responses_sdks_read_the_final_reply(make_stand, stream: bool) -> None:
    stand = _capped_stand(make_stand, "sdk")
    client = openai.OpenAI(
        base_url=f"{stand.gateway.url}/sessions/sdk/v1", api_key="unused", max_retries=0
    )
    messages: Any = [{"role": "user", "content": "add again"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=messages, tools=[ADD_TOOL], stream=True
            )
        )  # type: ignore[list-item]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [
            c.choices[0].finish_reason
            for c in chunks
            if c.choices and c.choices[0].finish_reason
        ]
        assert (text, finish) == (CAPPED_TEXT, ["stop"])
    else:
        reply = client.chat.completions.create(
            model="m", messages=messages, tools=[ADD_TOOL]
        )  # type: ignore[list-item]
        assert (
            reply.choices[0].finish_reason == "stop"
            and not reply.choices[0].message.tool_calls
        )
        assert reply.choices[0].message.content == CAPPED_TEXT
    response = client.responses.create(model="m", input="add again", stream=False)
    assert response.status == "completed" and response.output_text == CAPPED_TEXT
    assert len(stand.gateway.traces("sdk")) == 1 and len(stand.engine.requests) == 1


def test_anthropic_and_bedrock_sdks_read_the_final_reply(make_stand) -> None:
    stand = _capped_stand(make_stand, "sdk")
    base = f"{stand.gateway.url}/sessions/sdk"
    messages = anthropic.Anthropic(
        base_url=base, api_key="unused", max_retries=0
    ).messages.create(
        model="claude",
        max_tokens=64,
        messages=[{"role": "user", "content": "add again"}],
    )
    assert messages.stop_reason == "end_turn"
    assert [(b.type, getattr(b, "text", None)) for b in messages.content] == [
        ("text", CAPPED_TEXT)
    ]
    bedrock = boto3.client(
        "bedrock-runtime",
        endpoint_url=base,
        region_name="us-east-1",
        aws_access_key_id="placeholder",
        aws_secret_access_key="placeholder",
    )
    converse = bedrock.converse(
        modelId="m", messages=[{"role": "user", "content": [{"text": "add again"}]}]
    )
    assert converse["stopReason"] == "end_turn"
    assert converse["output"]["message"]["content"] == [{"text": CAPPED_TEXT}]
    invoke = anthropic.AnthropicBedrock(
        base_url=base,
        aws_access_key="p",
        aws_secret_key="p",
        aws_region="us-east-1",
        max_retries=0,
    ).messages.create(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "add again"}]
    )
    assert invoke.stop_reason == "end_turn" and invoke.content[0].text == CAPPED_TEXT  # type: ignore[union-attr]
    assert len(stand.gateway.traces("sdk")) == 1 and len(stand.engine.requests) == 1
