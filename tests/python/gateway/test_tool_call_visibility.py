"""Malformed and family-specific tool calls through the real SDK clients and the gateway.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one. A completion whose
tool call no parser can read reaches the agent as SGLang's server returns it (the whole text
as content, every protocol, streamed or not); the call's trace is flagged, the flag reaches
the Sample's metadata, and the loss mask covers exactly the sampled ids.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import boto3
import openai
import pytest
from agentcore_slime.rollout.samples import ShimRecord
from agentcore_slime.rollout.traces import merge_traces_to_samples
from botocore.config import Config
from protocol_helpers import ADD_FUNCTION
from slime.utils.types import Sample

MALFORMED = '<tool_call>\n{"name": "add", "arguments": {oops}\n</tool_call>'
MENTION = "I would use <tool_call> syntax normally."
CHAT_TOOLS = [{"type": "function", "function": ADD_FUNCTION}]
QUESTION = "What is 2 + 3?"


def _chat(base: str, stream: bool) -> str:
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    kwargs: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": CHAT_TOOLS,
    }
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        assert not message.tool_calls
        return str(message.content)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _responses(base: str, stream: bool) -> str:
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    tools = [{"type": "function", "name": "add", "parameters": ADD_FUNCTION["parameters"]}]
    if not stream:
        out = client.responses.create(model="m", input=QUESTION, tools=tools)  # type: ignore[arg-type]
    else:
        with client.responses.stream(model="m", input=QUESTION, tools=tools) as events:  # type: ignore[arg-type]
            out = events.get_final_response()
    assert [item.type for item in out.output] == ["message"]
    return out.output_text


def _messages(base: str, stream: bool) -> str:
    client = anthropic.Anthropic(
        base_url=base.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=30
    )
    kwargs: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [{"name": "add", "input_schema": ADD_FUNCTION["parameters"]}],
    }
    if not stream:
        out = client.messages.create(**kwargs)
    else:
        with client.messages.stream(**kwargs) as events:
            out = events.get_final_message()
    assert [block.type for block in out.content] == ["text"] and out.stop_reason == "end_turn"
    return str(out.content[0].text)  # type: ignore[union-attr]


def _converse(base: str, stream: bool) -> str:
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=base.removesuffix("/v1"),
        region_name="us-east-1",
        aws_access_key_id="placeholder",
        aws_secret_access_key="placeholder",
        config=Config(retries={"max_attempts": 1}),
    )
    kwargs: dict[str, Any] = {
        "modelId": "m",
        "messages": [{"role": "user", "content": [{"text": QUESTION}]}],
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "add", "inputSchema": {"json": ADD_FUNCTION["parameters"]}}}]
        },
    }
    if not stream:
        out = client.converse(**kwargs)
        blocks = out["output"]["message"]["content"]
        assert [list(b) for b in blocks] == [["text"]] and out["stopReason"] == "end_turn"
        return str(blocks[0]["text"])
    events = list(client.converse_stream(**kwargs)["stream"])
    assert not any("contentBlockStart" in e for e in events)  # no toolUse block
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


CLIENTS = {"chat": _chat, "responses": _responses, "messages": _messages, "converse": _converse}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("protocol", list(CLIENTS))
@pytest.mark.parametrize("text", [MALFORMED, MENTION], ids=["invalid-json", "mention"])
def test_an_unreadable_call_reaches_the_agent_whole_and_is_flagged(
    make_stand, protocol: str, stream: bool, text: str
) -> None:
    stand = make_stand()
    stand.script.replies += [text]
    sid = f"{protocol}-{int(stream)}-{len(text)}"
    base = stand.gateway.create_session(sid, {"max_new_tokens": 200})
    assert CLIENTS[protocol](base, stream) == text  # what SGLang's server returns for it
    [trace] = stand.gateway.traces(sid)
    assert trace.tool_call_errors and trace.response_message["content"] == text
    template = Sample(group_index=0, index=0, prompt=QUESTION, label="5", metadata={"q": 1})
    [sample] = merge_traces_to_samples([trace], template, session_id=sid, reward=0.0, rollout_id=0)
    assert ShimRecord.of(sample).tool_call_errors == (0,)
    assert sample.metadata["agentcore"]["tool_call_errors"] == [0]
    assert sample.loss_mask == [1] * len(trace.completion_token_ids)
    assert sample.tokens[len(trace.prompt_token_ids) :] == trace.completion_token_ids


def test_a_valid_call_is_not_flagged_and_its_sample_carries_no_flag(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ['<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>']
    base = stand.gateway.create_session("ok", {"max_new_tokens": 200})
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    out = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": QUESTION}],
        tools=CHAT_TOOLS,  # type: ignore[arg-type]
    )
    [call] = out.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"a": 2, "b": 3}  # type: ignore[union-attr]
    [trace] = stand.gateway.traces("ok")
    assert trace.tool_call_errors == []
    template = Sample(group_index=0, index=0, prompt=QUESTION, label="5", metadata={})
    [sample] = merge_traces_to_samples([trace], template, session_id="ok", reward=1.0, rollout_id=0)
    assert "tool_call_errors" not in sample.metadata["agentcore"]


SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
        },
    },
}


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (
            "qwen3_coder",
            "Looking.\n<tool_call>\n<function=search>\n<parameter=q>\n2024\n</parameter>\n"
            "<parameter=limit>\n3\n</parameter>\n</function>\n</tool_call>",
        ),
        (
            "glm45",
            "Looking.\n<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>2024</arg_value>\n"
            "<arg_key>limit</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        ),
        (
            "glm",
            "Looking.\n<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>2024</arg_value>\n"
            "<arg_key>limit</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        ),
    ],
)
def test_xml_like_families_type_their_values_by_the_schema(make_stand, parser: str, text: str) -> None:
    """The digits of a string parameter stay a string; an integer parameter becomes a number."""
    stand = make_stand(tool_call_parser=parser)
    stand.script.replies += [text]
    base = stand.gateway.create_session("x", {"max_new_tokens": 200})
    client = anthropic.Anthropic(
        base_url=base.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=30
    )
    out = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=200,
        messages=[{"role": "user", "content": "Find 2024."}],
        tools=[{"name": "search", "input_schema": SEARCH["function"]["parameters"]}],  # type: ignore[list-item]
    )
    assert [b.type for b in out.content] == ["text", "tool_use"] and out.stop_reason == "tool_use"
    assert out.content[0].text == "Looking."  # type: ignore[union-attr]
    assert out.content[1].input == {"q": "2024", "limit": 3}  # type: ignore[union-attr]
    [trace] = stand.gateway.traces("x")
    assert trace.tool_call_errors == []
