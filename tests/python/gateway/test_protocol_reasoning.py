"""Reasoning (the reasoning parser on) and forced tool choices on the protocol routes.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one, with
``SGLANG_REASONING_PARSER=qwen3`` (``<think>...</think>``). Each protocol returns the
reasoning in its own shape (Anthropic ``thinking`` blocks, Responses ``reasoning`` items,
Bedrock ``reasoningContent``), read by the real SDKs; a forced ``tool_choice`` is accepted
and not enforced (docs/agents.md).
"""

from __future__ import annotations

from typing import Any

import anthropic
import boto3
import openai

REPLY = "<think>add them</think>It is 5."


def _stand(make_stand: Any, sid: str) -> Any:
    stand = make_stand(reasoning_parser="qwen3")
    stand.script.replies += [REPLY]
    stand.gateway.create_session(sid, {"max_new_tokens": 100})
    return stand


def test_anthropic_thinking_block(make_stand) -> None:
    stand = _stand(make_stand, "t-1")
    client = anthropic.Anthropic(base_url=f"{stand.gateway.url}/sessions/t-1", api_key="x", max_retries=0)
    out = client.messages.create(
        model="m",
        max_tokens=50,
        messages=[{"role": "user", "content": "2 + 3?"}],
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": "add", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any"},
    )
    assert [b.type for b in out.content] == ["thinking", "text"]
    assert out.content[0].thinking == "add them" and out.content[1].text == "It is 5."
    [trace] = stand.gateway.traces("t-1")
    assert trace.response_message["reasoning_content"] == "add them"


def test_responses_reasoning_item(make_stand) -> None:
    stand = _stand(make_stand, "t-2")
    client = openai.OpenAI(base_url=f"{stand.gateway.url}/sessions/t-2/v1", api_key="x", max_retries=0)
    out = client.responses.create(
        model="m",
        input="2 + 3?",
        tools=[{"type": "function", "name": "add", "parameters": {"type": "object"}}],
        tool_choice="required",
    )
    reasoning, message = out.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "add them"
    assert out.output_text == "It is 5."


def test_converse_reasoning_content(make_stand) -> None:
    stand = _stand(make_stand, "t-3")
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=f"{stand.gateway.url}/sessions/t-3",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    spec = {"toolSpec": {"name": "add", "inputSchema": {"json": {"type": "object"}}}}
    out = client.converse(
        modelId="m",
        messages=[{"role": "user", "content": [{"text": "2 + 3?"}]}],
        toolConfig={"tools": [spec], "toolChoice": {"tool": {"name": "add"}}},
    )
    content = out["output"]["message"]["content"]
    assert content == [{"reasoningContent": {"reasoningText": {"text": "add them"}}}, {"text": "It is 5."}]


def test_echoed_reasoning_reaches_the_trace_in_chat_form(make_stand) -> None:
    stand = _stand(make_stand, "t-4")
    stand.script.replies += ["ok"]
    client = anthropic.Anthropic(base_url=f"{stand.gateway.url}/sessions/t-4", api_key="x", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "2 + 3?"}]
    first = client.messages.create(model="m", max_tokens=50, messages=messages)
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "thanks"},
    ]
    client.messages.create(model="m", max_tokens=50, messages=messages)
    echoed = stand.gateway.traces("t-4")[1].messages[1]
    assert echoed == {"role": "assistant", "content": "It is 5.", "reasoning_content": "add them"}
