"""Real Strands agents with ``BedrockModel``, ``AnthropicModel`` and ``OpenAIResponsesModel``
on a session: the same tool-using episode as with ``OpenAIModel`` (chat completions), and
the same training samples.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one; cumulative mode
on. Each provider streams (its default). The only change to each agent is where its model
client points (the session's address for that protocol); Bedrock gets placeholder
credentials (the gateway does not check SigV4).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from gateway_helpers import tool_call_text
from protocol_helpers import assert_same_samples, assert_token_exact
from strands import Agent, tool
from strands.models.anthropic import AnthropicModel
from strands.models.bedrock import BedrockModel
from strands.models.openai import OpenAIModel
from strands.models.openai_responses import OpenAIResponsesModel


def _chat(url: str, sid: str) -> Any:
    base = f"{url}/sessions/{sid}/v1"
    return OpenAIModel(
        client_args={"base_url": base, "api_key": "unused"}, model_id="default", params={"max_tokens": 256}
    )


def _responses(url: str, sid: str) -> Any:
    base = f"{url}/sessions/{sid}/v1"
    return OpenAIResponsesModel(
        client_args={"base_url": base, "api_key": "unused"},
        model_id="gpt-5",
        params={"max_output_tokens": 256},
    )


def _anthropic(url: str, sid: str) -> Any:
    return AnthropicModel(
        client_args={"base_url": f"{url}/sessions/{sid}", "api_key": "unused"},
        model_id="claude-sonnet-4-5",
        max_tokens=256,
    )


def _bedrock(url: str, sid: str) -> Any:
    session = boto3.Session(
        aws_access_key_id="placeholder", aws_secret_access_key="placeholder", region_name="us-east-1"
    )
    return BedrockModel(endpoint_url=f"{url}/sessions/{sid}", boto_session=session, max_tokens=256)


def _episode(stand: Any, sid: str, model: Callable[[str, str], Any]) -> list[tuple[int, int]]:
    """One agent run: it calls ``add`` once and answers."""
    stand.script.replies += [tool_call_text("add", {"a": 19, "b": 23}), "The sum is 42."]
    calls: list[tuple[int, int]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first addend
            b: second addend
        """
        calls.append((a, b))
        return a + b

    stand.gateway.create_session(sid, {"temperature": 1.0, "max_new_tokens": 256})
    agent = Agent(
        model=model(stand.gateway.url, sid),
        tools=[add],
        callback_handler=None,
        system_prompt="Use tools for arithmetic.",
    )
    assert "The sum is 42." in str(agent("What is 19 + 23?"))
    del agent  # strands' AnthropicModel keeps an AsyncAnthropic client whose pooled connection
    with warnings.catch_warnings():  # outlives the agent's event loop: let it go here, unreported
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    return calls


@pytest.mark.parametrize(
    "model", [_bedrock, _anthropic, _responses], ids=["bedrock", "anthropic", "responses"]
)
def test_strands_agent_trains_the_same_on_every_protocol(make_stand, model) -> None:
    stand = make_stand(cumulative_token_mode=True)
    assert _episode(stand, "chat", _chat) == [(19, 23)]
    reference = stand.gateway.traces("chat")
    before = len(stand.engine.requests)

    assert _episode(stand, "other", model) == [(19, 23)]
    traces = stand.gateway.traces("other")
    assert_token_exact(traces, stand.engine.requests[before:])
    assert_same_samples(traces, reference)
    assert [t.token_mode for t in traces] == ["rendered", "bridged"]
