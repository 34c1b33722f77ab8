"""The real openai SDK against the gateway over loopback HTTP, JSON and SSE replies.

Engine: the scripted SGLang server (fakes.sglang_server); tokenizer: the toy Qwen2.5-like
one. What is checked: the reply the SDK parses (content, tool calls, finish reason, usage)
and that each trace holds exactly what the engine received and sampled.
"""

from __future__ import annotations

import json

import openai
import pytest
from fakes.sglang_server import fake_logprob
from gateway_helpers import ADD_TOOL, tool_call_text


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_then_answer(make_stand, tokenizer, stream: bool) -> None:
    stand = make_stand(cumulative_token_mode=False)  # every call rendered in full (not the default)
    stand.script.replies += [tool_call_text("add", {"a": 2, "b": 3}), "2 + 3 = 5."]
    base = stand.gateway.create_session(
        "s-1", {"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 300}
    )
    assert base == f"{stand.gateway.url}/sessions/s-1/v1"
    client = _client(base)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]

    first = _ask(client, messages, stream)
    assert first["finish_reason"] == "tool_calls"
    call = first["message"]["tool_calls"][0]
    assert call["function"]["name"] == "add" and json.loads(
        call["function"]["arguments"]
    ) == {"a": 2, "b": 3}
    assert call["id"].startswith("call_") and call["type"] == "function"
    messages += [
        first["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "5"},
    ]
    second = _ask(client, messages, stream)
    assert second["finish_reason"] == "stop"
    assert second["message"]["content"] == "2 + 3 = 5."

    traces = stand.gateway.traces("s-1")
    assert len(traces) == 2 == len(stand.engine.requests)
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for trace, sent in zip(traces, stand.engine.requests, strict=True):
        assert trace.prompt_token_ids == sent["input_ids"]
        assert (
            trace.completion_token_ids[-1] == stop_id
        )  # the sampled stop token is kept
        assert trace.logprobs == [
            fake_logprob(t, i) for i, t in enumerate(trace.completion_token_ids)
        ]
        assert trace.finish_reason == "stop" and trace.token_mode == "rendered"
        assert sent["return_logprob"] is True
        assert (
            sent["sampling_params"]["temperature"] == 0.6
            and sent["sampling_params"]["top_p"] == 0.9
        )
        assert sent["sampling_params"]["max_new_tokens"] == 300
        assert stop_id in sent["sampling_params"]["stop_token_ids"]
    assert (
        tokenizer.decode(traces[0].completion_token_ids)
        == tool_call_text("add", {"a": 2, "b": 3}) + "<|im_end|>"
    )
    # the trace keeps what the template rendered: the wire id of the tool result is not
    assert traces[1].messages[-1] == {"role": "tool", "content": "5"}
    called = traces[1].messages[-2]["tool_calls"][0]["function"]
    assert called == {"name": "add", "arguments": {"a": 2, "b": 3}}
    assert traces[1].response_message["content"] == "2 + 3 = 5."
    assert second["usage"] == {
        "prompt_tokens": len(traces[1].prompt_token_ids),
        "completion_tokens": len(traces[1].completion_token_ids),
        "total_tokens": len(traces[1].prompt_token_ids)
        + len(traces[1].completion_token_ids),
    }


def _ask(client: openai.OpenAI, messages: list, stream: bool) -> dict:
    """One call; returns {message, finish_reason, usage} as plain dicts either way."""
    if not stream:
        out = client.chat.completions.create(
            model="default", messages=messages, tools=[ADD_TOOL]
        )
        choice = out.choices[0]
        return {
            "message": choice.message.model_dump(exclude_none=True),
            "finish_reason": choice.finish_reason,
            "usage": out.usage.model_dump(exclude_none=True),
        }
    events = list(
        client.chat.completions.create(
            model="default",
            messages=messages,
            tools=[ADD_TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    message: dict = {"role": "assistant", "content": ""}
    finish, usage, calls = None, None, {}
    for event in events:
        if event.usage:
            usage = event.usage.model_dump(exclude_none=True)
        for choice in event.choices:
            message["content"] += choice.delta.content or ""
            for piece in choice.delta.tool_calls or []:
                slot = calls.setdefault(
                    piece.index,
                    {
                        "id": piece.id,
                        "type": "function",
                        "function": {"name": "", "arguments": ""},
                    },
                )
                slot["function"]["name"] += piece.function.name or ""
                slot["function"]["arguments"] += piece.function.arguments or ""
            finish = choice.finish_reason or finish
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
        message["content"] = message["content"] or None
    return {
        "message": {k: v for k, v in message.items() if v is not None},
        "finish_reason": finish,
        "usage": usage,
    }


def test_agent_cannot_raise_trainer_values_but_can_lower_max_tokens(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["ok", "ok"]
    client = _client(
        stand.gateway.create_session("s-2", {"temperature": 1.0, "max_new_tokens": 64})
    )
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        temperature=0.0,
        max_tokens=10_000,
        stop=["END"],
    )
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=7,
        extra_body={"top_k": 5},
    )
    first, second = (r["sampling_params"] for r in stand.engine.requests)
    assert (
        first["temperature"] == 1.0
        and first["max_new_tokens"] == 64
        and first["stop"] == ["END"]
    )
    assert (
        second["max_new_tokens"] == 7 and second["top_k"] == 5
    )  # not set by the trainer: the agent's


def test_length_finish_and_context_cap(make_stand) -> None:
    stand = make_stand(context_length=None, fake={"context_length": 400})
    stand.script.replies += ["word " * 200]
    client = _client(stand.gateway.create_session("s-3", {"max_new_tokens": 1000}))
    out = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "talk"}]
    )
    assert out.choices[0].finish_reason == "length"
    sent = stand.engine.requests[0]
    # the cap came from the engine's /v1/models max_model_len
    assert len(sent["input_ids"]) + sent["sampling_params"]["max_new_tokens"] == 400
    trace = stand.gateway.traces("s-3")[0]
    assert (
        trace.finish_reason == "length"
        and len(trace.completion_token_ids) == out.usage.completion_tokens
    )
    assert trace.engine_finish == {
        "type": "length",
        "length": len(trace.completion_token_ids),
    }


def test_models_route_lists_the_model_id(make_stand) -> None:
    stand = make_stand(model_id="my-policy")
    client = _client(stand.gateway.create_session("s-4"))
    assert [m.id for m in client.models.list().data] == ["my-policy"]
