"""The real boto3 ``bedrock-runtime`` client (``converse``, ``converse_stream``) and
``anthropic.AnthropicBedrock`` (InvokeModel with the Messages body) on a session.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one. boto3 signs
with placeholder credentials (the gateway does not check SigV4). Checked: what the SDKs
parse (botocore decodes the event-stream frames, CRCs included), token-exact traces, that
the same conversation gives the chat path's prompt ids, completion ids, logprobs and
samples, Bedrock-shaped errors with nothing recorded, and that botocore's
``amz-sdk-invocation-id`` makes a retried call one trace.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import boto3
import httpx
import pytest
from agentcore_slime.gateway.protocols.eventstream import event_message, message
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError
from protocol_helpers import ADD_FUNCTION, ANSWER, QUESTION, SYSTEM, TOOL_RESULT, assert_token_exact

MODEL_ID = "us.anthropic.claude-sonnet-4-20250514-v1:0"  # strands' default: any id is accepted
ADD_SPEC = {
    "toolSpec": {
        "name": "add",
        "description": ADD_FUNCTION["description"],
        "inputSchema": {"json": ADD_FUNCTION["parameters"]},
    }
}


def _client(stand: Any, sid: str, create: bool = True, **sampling: Any) -> Any:
    if create:
        stand.gateway.create_session(sid, sampling or {"max_new_tokens": 200})
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=f"{stand.gateway.url}/sessions/{sid}",
        region_name="us-east-1",
        aws_access_key_id="placeholder",
        aws_secret_access_key="placeholder",
        config=Config(retries={"max_attempts": 3, "mode": "standard"}),
    )


def _converse(client: Any, stream: bool, **kwargs: Any) -> dict[str, Any]:
    """One call; a streamed one is folded back into converse's response shape."""
    if not stream:
        return dict(client.converse(modelId=MODEL_ID, **kwargs))
    events = list(client.converse_stream(modelId=MODEL_ID, **kwargs)["stream"])
    assert "messageStart" in events[0] and "metadata" in events[-1]
    blocks: dict[int, dict[str, Any]] = {}
    stop = None
    for event in events:
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = start["start"]["toolUse"]
            blocks[start["contentBlockIndex"]] = {"toolUse": {**use, "input": ""}}
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]
            block = blocks.setdefault(delta["contentBlockIndex"], {})
            if "text" in delta["delta"]:
                block["text"] = block.get("text", "") + delta["delta"]["text"]
            if "toolUse" in delta["delta"]:
                block["toolUse"]["input"] += delta["delta"]["toolUse"]["input"]
        elif "messageStop" in event:
            stop = event["messageStop"]["stopReason"]
    for block in blocks.values():
        if "toolUse" in block:
            block["toolUse"]["input"] = json.loads(block["toolUse"]["input"])
    content = [blocks[i] for i in sorted(blocks)]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": events[-1]["metadata"]["usage"],
    }


def test_converse_plain_text(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["Hello there."]
    client = _client(stand, "b-1", temperature=0.5)
    out = client.converse(
        modelId=MODEL_ID,
        system=[{"text": "Be brief."}, {"cachePoint": {"type": "default"}}],
        messages=[{"role": "user", "content": [{"text": "Say hello."}]}],
        inferenceConfig={"maxTokens": 40, "temperature": 0.9, "topP": 0.8},
    )
    assert out["output"]["message"]["content"] == [{"text": "Hello there."}]
    assert out["stopReason"] == "end_turn"
    [trace] = stand.gateway.traces("b-1")
    assert out["usage"] == {
        "inputTokens": len(trace.prompt_token_ids),
        "outputTokens": len(trace.completion_token_ids),
        "totalTokens": len(trace.prompt_token_ids) + len(trace.completion_token_ids),
    }
    assert_token_exact([trace], stand.engine.requests)
    sent = stand.engine.requests[0]["sampling_params"]
    assert sent["temperature"] == 0.5 and sent["top_p"] == 0.8 and sent["max_new_tokens"] == 40
    assert trace.messages[0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize("stream", [False, True])
def test_converse_tool_episode_equals_the_chat_path(tool_episode, stream: bool) -> None:
    stand = tool_episode.stand
    client = _client(stand, "b-2")
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": QUESTION}]}]
    request = {"system": [{"text": SYSTEM}], "toolConfig": {"tools": [ADD_SPEC], "toolChoice": {"auto": {}}}}

    first = _converse(client, stream, messages=messages, **request)
    assert first["stopReason"] == "tool_use"
    [block] = first["output"]["message"]["content"]
    use = block["toolUse"]
    assert (
        use["name"] == "add" and use["input"] == {"a": 2, "b": 3} and use["toolUseId"].startswith("tooluse_")
    )
    messages += [
        first["output"]["message"],
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": TOOL_RESULT}]}}],
        },
    ]
    second = _converse(client, stream, messages=messages, **request)
    assert second["stopReason"] == "end_turn"
    assert second["output"]["message"]["content"] == [{"text": ANSWER}]

    traces = tool_episode.assert_same_as_chat("b-2")
    assert second["usage"]["inputTokens"] == len(traces[1].prompt_token_ids)


def test_a_retried_invocation_is_traced_once(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["once"]
    client = _client(stand, "b-3")
    sent: list[tuple[dict[str, str], bytes]] = []
    client.meta.events.register(
        "before-send", lambda request, **_: sent.append((dict(request.headers), request.body))
    )
    client.converse(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    [(headers, body)] = sent
    invocation = headers["amz-sdk-invocation-id"]
    url = f"{stand.gateway.url}/sessions/b-3/model/{MODEL_ID}/converse"
    again = httpx.post(url, content=body, headers={"amz-sdk-invocation-id": invocation})
    assert again.status_code == 200 and again.json()["output"]["message"]["content"] == [{"text": "once"}]
    assert len(stand.gateway.traces("b-3")) == 1 and len(stand.engine.requests) == 1


def test_model_ids_with_slashes_and_colons_are_accepted(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["ok"]
    client = _client(stand, "b-4")
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku-v1:0"
    out = client.converse(modelId=arn, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert out["output"]["message"]["content"] == [{"text": "ok"}]


BAD_REQUESTS = [
    (
        {
            "messages": [
                {"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": b"x"}}}]}
            ]
        },
        "image",
    ),
    ({"messages": [{"role": "system", "content": [{"text": "x"}]}]}, "role"),
    (
        {
            "messages": [
                {"role": "user", "content": [{"text": "x"}]},
                {
                    "role": "user",
                    "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "5"}]}}],
                },
            ]
        },
        "answers no toolUse",
    ),
    (
        {
            "messages": [{"role": "user", "content": [{"text": "x"}]}],
            "additionalModelRequestFields": {"top_k": 0.5},
        },
        "top_k",
    ),
]


@pytest.mark.parametrize(("request_fields", "words"), BAD_REQUESTS)
def test_bad_requests_get_validation_exceptions_and_record_nothing(make_stand, request_fields, words) -> None:
    stand = make_stand()
    client = _client(stand, "b-5")
    attempts: list[int] = []
    client.meta.events.register("before-send", lambda **_: attempts.append(1))
    with pytest.raises(ClientError) as caught:
        client.converse(modelId=MODEL_ID, **request_fields)
    error = caught.value.response
    assert error["Error"]["Code"] == "ValidationException" and words in error["Error"]["Message"]
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert len(attempts) == 1  # botocore does not retry a 400
    assert stand.engine.requests == [] and stand.gateway.traces("b-5") == []


def test_unknown_session_and_malformed_json(make_stand) -> None:
    stand = make_stand()
    with pytest.raises(ClientError) as caught:
        _client(stand, "nope", create=False).converse(
            modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "x"}]}]
        )
    assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException"
    stand.gateway.create_session("b-6")
    reply = httpx.post(f"{stand.gateway.url}/sessions/b-6/model/m/converse-stream", content=b"{")
    assert reply.status_code == 400 and reply.headers["x-amzn-errortype"].startswith("ValidationException:")
    assert "not valid JSON" in reply.json()["message"]
    assert stand.gateway.traces("b-6") == []


def test_event_stream_frames_decode_in_botocore() -> None:
    buffer = EventStreamBuffer()
    frame = event_message("messageStart", {"role": "assistant"})
    buffer.add_data(frame[:7])  # split frames are reassembled
    buffer.add_data(frame[7:] + message({":message-type": "event", ":event-type": "x"}, "é".encode()))
    first, second = list(buffer)
    assert first.headers == {
        ":event-type": "messageStart",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(first.payload) == {"role": "assistant"} and second.payload == "é".encode()
    corrupt = bytearray(frame)
    corrupt[-1] ^= 1
    broken = EventStreamBuffer()
    broken.add_data(bytes(corrupt))
    with pytest.raises(Exception, match="Checksum mismatch"):
        list(broken)


def _anthropic_bedrock(stand: Any, sid: str) -> anthropic.AnthropicBedrock:
    stand.gateway.create_session(sid, {"max_new_tokens": 200})
    return anthropic.AnthropicBedrock(
        base_url=f"{stand.gateway.url}/sessions/{sid}",
        aws_access_key="placeholder",
        aws_secret_key="placeholder",
        aws_region="us-east-1",
        max_retries=0,
    )


ADD = {"name": "add", "description": ADD_FUNCTION["description"], "input_schema": ADD_FUNCTION["parameters"]}


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_bedrock_invoke_tool_episode_equals_the_chat_path(tool_episode, stream: bool) -> None:
    stand = tool_episode.stand
    client = _anthropic_bedrock(stand, "b-7")

    def create(**kwargs: Any) -> Any:
        if not stream:
            return client.messages.create(
                model=MODEL_ID, max_tokens=200, system=SYSTEM, tools=[ADD], **kwargs
            )
        with client.messages.stream(
            model=MODEL_ID, max_tokens=200, system=SYSTEM, tools=[ADD], **kwargs
        ) as events:
            return events.get_final_message()

    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = create(messages=messages)
    [use] = first.content
    assert first.stop_reason == "tool_use" and use.input == {"a": 2, "b": 3}
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}]},
    ]
    second = create(messages=messages)
    assert second.content[0].text == ANSWER and second.stop_reason == "end_turn"
    tool_episode.assert_same_as_chat("b-7")


def test_anthropic_bedrock_errors_are_bedrock_shaped(make_stand) -> None:
    stand = make_stand()
    client = _anthropic_bedrock(stand, "b-8")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=MODEL_ID, max_tokens=5, messages=[{"role": "user", "content": [{"type": "image"}]}]
        )
    assert caught.value.response.headers["x-amzn-errortype"].startswith("ValidationException:")
    assert stand.gateway.traces("b-8") == []
