"""The real openai SDK's Responses API (``responses.create``, plain, tools, streamed) on a session.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one. Checked: what the
SDK parses, token-exact traces, and that the same conversation gives the chat path's
prompt ids, completion ids, logprobs and samples.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from protocol_helpers import ADD_FUNCTION, ANSWER, QUESTION, SYSTEM, TOOL_RESULT, assert_token_exact

ADD = {"type": "function", **ADD_FUNCTION}  # the Responses API's function tool is flat


def _client(stand: Any, sid: str, **sampling: Any) -> openai.OpenAI:
    base = stand.gateway.create_session(sid, sampling or {"max_new_tokens": 200})
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=2, timeout=30)


def _create(client: openai.OpenAI, stream: bool, **kwargs: Any) -> Any:
    if not stream:
        return client.responses.create(model="gpt-5", **kwargs)
    events = list(client.responses.create(model="gpt-5", stream=True, **kwargs))
    assert events[0].type == "response.created"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    with client.responses.stream(model="gpt-5", **kwargs) as stream_helper:  # the SDK's accumulator
        assert stream_helper.get_final_response().output_text == events[-1].response.output_text
    return events[-1].response


def test_plain_text_reply(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["Hello there."]
    client = _client(stand, "r-1", temperature=0.5)
    out = client.responses.create(
        model="gpt-5",
        instructions="Be brief.",
        input="Say hello.",
        max_output_tokens=40,
        temperature=0.9,
        store=True,
    )
    assert out.output_text == "Hello there." and out.status == "completed"
    [trace] = stand.gateway.traces("r-1")
    assert out.usage.input_tokens == len(trace.prompt_token_ids)
    assert out.usage.output_tokens == len(trace.completion_token_ids)
    assert out.usage.total_tokens == out.usage.input_tokens + out.usage.output_tokens
    assert_token_exact([trace], stand.engine.requests)
    sent = stand.engine.requests[0]["sampling_params"]
    assert sent["temperature"] == 0.5 and sent["max_new_tokens"] == 40
    assert trace.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_episode_equals_the_chat_path(tool_episode, stream: bool) -> None:
    stand = tool_episode.stand
    if stream:  # the accumulator's second pass of each call samples again
        stand.script.replies[:] = [r for r in stand.script.replies for _ in (0, 1)]
    client = _client(stand, "r-2")
    items: list[Any] = [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]

    first = _create(client, stream, instructions=SYSTEM, input=items, tools=[ADD])
    [call] = first.output
    assert call.type == "function_call" and call.name == "add" and call.call_id.startswith("call_")
    assert call.arguments == '{"a": 2, "b": 3}'
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT})
    second = _create(client, stream, instructions=SYSTEM, input=items, tools=[ADD])
    assert second.output_text == ANSWER and second.status == "completed"

    # streamed, every call ran twice (create, then the stream helper): keep each first one
    traces = tool_episode.assert_same_as_chat("r-2", every=2 if stream else 1)
    assert second.usage.input_tokens == len(traces[1].prompt_token_ids)


def test_max_output_tokens_is_incomplete(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["word " * 40, "word " * 40]
    client = _client(stand, "r-3")
    out = client.responses.create(model="m", input="talk", max_output_tokens=6)
    assert out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens"
    assert out.usage.output_tokens == 6
    events = list(client.responses.create(model="m", input="talk", max_output_tokens=6, stream=True))
    assert events[-1].type == "response.incomplete"
    assert [t.finish_reason for t in stand.gateway.traces("r-3")] == ["length", "length"]


BAD_BODIES = [
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:"}]}]},
        "input_image",
    ),
    ({"input": [{"type": "web_search_call", "id": "w"}]}, "not supported"),
    (
        {"input": [{"type": "function_call_output", "call_id": "call_9", "output": "5"}]},
        "answers no function_call",
    ),
    ({"input": "x", "tools": [{"type": "nonsense"}]}, "tool type"),
    ({"input": []}, "input"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
]


@pytest.mark.parametrize(("body", "words"), BAD_BODIES)
def test_bad_requests_get_openai_errors_and_record_nothing(make_stand, body, words) -> None:
    stand = make_stand()
    client = _client(stand, "r-4")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", **body)
    assert words in caught.value.body["message"] and caught.value.body["type"] == "invalid_request_error"
    assert stand.engine.requests == [] and stand.gateway.traces("r-4") == []


def test_malformed_json_is_an_openai_error_not_retried(make_stand) -> None:
    stand = make_stand()
    base = stand.gateway.create_session("r-5")
    reply = httpx.post(f"{base}/responses", content=b"{", headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.headers["x-should-retry"] == "false"
    assert "not valid JSON" in reply.json()["error"]["message"]
    assert stand.gateway.traces("r-5") == []
