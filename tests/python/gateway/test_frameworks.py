"""LangChain chat models (``ChatOpenAI`` on chat completions and on Responses,
``ChatAnthropic``, ``ChatBedrockConverse``) and the OpenAI Agents SDK on a session.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one; cumulative mode
on. Each framework runs one tool-using episode with the real package, pointed at the
session's address for its protocol; every run must give token-exact traces and the same
samples as ``ChatOpenAI`` on chat completions. (LangGraph's agents call these same chat
models.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from gateway_helpers import tool_call_text
from protocol_helpers import assert_same_samples, assert_token_exact

QUESTION = "What is 19 + 23?"
SYSTEM = "Use tools for arithmetic."


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def _chat_openai(url: str, sid: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="unused", model="m", max_retries=0)


def _responses_openai(url: str, sid: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=f"{url}/sessions/{sid}/v1",
        api_key="unused",
        model="m",
        max_retries=0,
        use_responses_api=True,
    )


def _anthropic(url: str, sid: str) -> Any:
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(
        base_url=f"{url}/sessions/{sid}", api_key="unused", model="claude-sonnet-4-5", max_tokens=256
    )


def _bedrock(url: str, sid: str) -> Any:
    from langchain_aws import ChatBedrockConverse

    return ChatBedrockConverse(
        endpoint_url=f"{url}/sessions/{sid}",
        model="us.anthropic.claude-sonnet-4-20250514-v1:0",
        region_name="us-east-1",
        aws_access_key_id="placeholder",
        aws_secret_access_key="placeholder",
        max_tokens=256,
    )


def _langchain_episode(stand: Any, sid: str, make: Callable[[str, str], Any]) -> None:
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool

    stand.script.replies += [tool_call_text("add", {"a": 19, "b": 23}), "The sum is 42."]
    stand.gateway.create_session(sid, {"max_new_tokens": 256})
    adder = tool(add, parse_docstring=True)
    model = make(stand.gateway.url, sid).bind_tools([adder])
    messages: list[Any] = [SystemMessage(SYSTEM), HumanMessage(QUESTION)]
    first = model.invoke(messages)
    [call] = first.tool_calls
    assert call["name"] == "add" and call["args"] == {"a": 19, "b": 23}
    messages += [first, ToolMessage(str(adder.invoke(call["args"])), tool_call_id=call["id"])]
    second = model.invoke(messages)
    assert "The sum is 42." in second.text


@pytest.mark.parametrize(
    "make", [_responses_openai, _anthropic, _bedrock], ids=["responses", "anthropic", "bedrock-converse"]
)
def test_langchain_chat_models_train_the_same_on_every_protocol(make_stand, make) -> None:
    stand = make_stand(cumulative_token_mode=True)
    _langchain_episode(stand, "chat", _chat_openai)
    reference = stand.gateway.traces("chat")
    before = len(stand.engine.requests)
    _langchain_episode(stand, "other", make)
    traces = stand.gateway.traces("other")
    assert_token_exact(traces, stand.engine.requests[before:])
    assert_same_samples(traces, reference)


def test_openai_agents_sdk_runs_a_tool_episode_on_responses(make_stand) -> None:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # the SDK would upload its traces to OpenAI
    stand = make_stand(cumulative_token_mode=True)

    async def run(sid: str, model_class: Any) -> str:
        stand.gateway.create_session(sid, {"max_new_tokens": 256})
        async with AsyncOpenAI(
            base_url=f"{stand.gateway.url}/sessions/{sid}/v1", api_key="unused", max_retries=0
        ) as client:
            model = model_class(model="m", openai_client=client)
            agent = Agent(name="calc", instructions=SYSTEM, tools=[function_tool(add)], model=model)
            result = await Runner.run(agent, QUESTION)
        return str(result.final_output)

    runs: dict[str, Any] = {}
    for sid, model_class in (("chat", OpenAIChatCompletionsModel), ("responses", OpenAIResponsesModel)):
        stand.script.replies += [tool_call_text("add", {"a": 19, "b": 23}), "The sum is 42."]
        assert "The sum is 42." in asyncio.run(run(sid, model_class))
        runs[sid] = stand.gateway.traces(sid)
    assert_token_exact(runs["responses"], stand.engine.requests[len(runs["chat"]) :])
    assert_same_samples(runs["responses"], runs["chat"])
