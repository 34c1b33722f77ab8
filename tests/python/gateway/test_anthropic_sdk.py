"""The real anthropic SDK (``messages.create``, streaming, ``count_tokens``) on a session.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one. Checked: what the
SDK parses (text, tool_use, stop reasons, usage), token-exact traces, and that the same
conversation gives the chat path's prompt ids, completion ids, logprobs and samples.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from protocol_helpers import ADD_FUNCTION, ANSWER, QUESTION, SYSTEM, TOOL_RESULT, assert_token_exact

ADD = {"name": "add", "description": ADD_FUNCTION["description"], "input_schema": ADD_FUNCTION["parameters"]}


def _client(stand: Any, sid: str, **sampling: Any) -> anthropic.Anthropic:
    stand.gateway.create_session(sid, sampling or {"max_new_tokens": 200})
    base = f"{stand.gateway.url}/sessions/{sid}"
    return anthropic.Anthropic(base_url=base, api_key="unused", max_retries=2, timeout=30)


def _create(client: anthropic.Anthropic, stream: bool, **kwargs: Any) -> Any:
    if not stream:
        return client.messages.create(model="claude-sonnet-4-5", max_tokens=200, **kwargs)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=200, **kwargs) as events:
        names = [event.type for event in events]
        message = events.get_final_message()
    assert names[0] == "message_start" and names[-1] == "message_stop"
    return message


def test_plain_text_reply(make_stand, tokenizer) -> None:
    stand = make_stand()
    stand.script.replies += ["Hello there."]
    client = _client(stand, "a-1", temperature=0.5)
    out = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=50,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Say hello."}],
        temperature=0.9,
        top_k=5,
    )
    assert [b.type for b in out.content] == ["text"] and out.content[0].text == "Hello there."
    assert out.stop_reason == "end_turn" and out.role == "assistant"
    [trace] = stand.gateway.traces("a-1")
    assert out.usage.input_tokens == len(trace.prompt_token_ids)
    assert out.usage.output_tokens == len(trace.completion_token_ids)
    assert_token_exact([trace], stand.engine.requests)
    sent = stand.engine.requests[0]["sampling_params"]
    assert sent["temperature"] == 0.5 and sent["top_k"] == 5 and sent["max_new_tokens"] == 50
    assert trace.messages[0] == {"role": "system", "content": "Be brief."}
    text = tokenizer.decode(trace.prompt_token_ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")


@pytest.mark.parametrize("stream", [False, True])
def test_tool_episode_equals_the_chat_path(tool_episode, stream: bool) -> None:
    stand = tool_episode.stand
    client = _client(stand, "a-2")
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]

    first = _create(client, stream, system=SYSTEM, messages=messages, tools=[ADD])
    assert first.stop_reason == "tool_use"
    [use] = first.content
    assert use.type == "tool_use" and use.name == "add" and use.input == {"a": 2, "b": 3}
    assert use.id.startswith("toolu_")
    messages += [
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}]},
    ]
    second = _create(client, stream, system=SYSTEM, messages=messages, tools=[ADD])
    assert second.stop_reason == "end_turn" and second.content[0].text == ANSWER

    traces = tool_episode.assert_same_as_chat("a-2")
    assert [t.token_mode for t in traces] == ["rendered", "bridged"]
    assert second.usage.input_tokens == len(traces[1].prompt_token_ids)


def test_count_tokens_is_the_next_prompt_length(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["fine"]
    client = _client(stand, "a-3")
    request: dict[str, Any] = {
        "system": SYSTEM,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [ADD],
    }
    counted = client.messages.count_tokens(model="claude-sonnet-4-5", **request)
    assert stand.engine.requests == [] and stand.gateway.traces("a-3") == []
    client.messages.create(model="claude-sonnet-4-5", max_tokens=20, **request)
    assert counted.input_tokens == len(stand.engine.requests[0]["input_ids"])


def test_stop_sequence_and_max_tokens(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["one two END three", "word " * 50]
    client = _client(stand, "a-4")
    out = client.messages.create(
        model="m", max_tokens=100, stop_sequences=["END"], messages=[{"role": "user", "content": "go"}]
    )
    assert out.stop_reason == "stop_sequence" and out.stop_sequence == "END"
    cut = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "go"}])
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 5
    assert [t.finish_reason for t in stand.gateway.traces("a-4")] == ["stop", "length"]


BAD_BODIES = [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
    ({"messages": [{"role": "user", "content": [{"type": "nonsense"}]}]}, "unknown content block"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "role"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "10"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "no tool here"},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}],
                },
            ]
        },
        "answers no tool_use",
    ),
]


@pytest.mark.parametrize(("body", "words"), BAD_BODIES)
def test_bad_requests_get_anthropic_errors_and_record_nothing(make_stand, body, words) -> None:
    stand = make_stand()
    client = _client(stand, "a-5")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="m", **{"max_tokens": 10, **body})
    error = caught.value.body
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]
    assert stand.engine.requests == [] and stand.gateway.traces("a-5") == []


def test_malformed_json_unknown_session_and_no_retry(make_stand) -> None:
    stand = make_stand()
    stand.gateway.create_session("a-6")
    url = f"{stand.gateway.url}/sessions/a-6/v1/messages"
    reply = httpx.post(url, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.headers["x-should-retry"] == "false"
    assert reply.json()["type"] == "error" and "not valid JSON" in reply.json()["error"]["message"]
    missing = anthropic.Anthropic(base_url=f"{stand.gateway.url}/sessions/nope", api_key="x", max_retries=2)
    with pytest.raises(anthropic.NotFoundError) as caught:
        missing.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "not_found_error"
    wrong = httpx.post(f"{stand.gateway.url}/sessions/a-6/v1/messages/nothing", json={})
    assert wrong.status_code == 404 and wrong.json()["type"] == "error"
    assert stand.gateway.traces("a-6") == []
