"""Coding agents' tool kinds and side calls through the real SDKs, the gateway and the scripted engine.

Responses: a ``namespace`` tool's function called (the SDK reads the item's ``namespace``), a
``custom`` (freeform) tool called (a ``custom_tool_call``), ``local_shell`` (a
``local_shell_call``), hosted tools not offered and named on the trace; the calls sent back as
the SDK types them. Anthropic: a server tool not offered. Chat: a side call (``response_format``
without tools) between two main calls leaves the main conversation one sample.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
from agentcore_slime.rollout.traces import merge_traces
from gateway_helpers import ADD_TOOL, tool_call_text
from protocol_helpers import ANSWER, QUESTION, SYSTEM, TOOL_CALL, TOOL_RESULT

NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
}
CUSTOM = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}


def _responses(stand: Any, sid: str) -> openai.OpenAI:
    base = stand.gateway.create_session(sid, {"max_new_tokens": 200})
    return openai.OpenAI(base_url=base, api_key="x", max_retries=0, timeout=30)


def test_responses_namespace_custom_and_hosted_tools(make_stand, tokenizer) -> None:
    stand = make_stand()
    stand.script.replies += [
        tool_call_text("spawn_agent", {"message": "go"}),
        tool_call_text("apply_patch", {"input": "*** Begin Patch"}),
        "done",
    ]
    client = _responses(stand, "r-1")
    tools: list[Any] = [NAMESPACE, CUSTOM, {"type": "web_search"}, {"type": "file_search"}]
    first = client.responses.create(model="m", input="go", tools=tools)
    [call] = first.output
    assert call.type == "function_call" and call.name == "spawn_agent" and call.namespace == "multi_agent_v1"
    history: list[Any] = [
        {"role": "user", "content": "go"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "agent 1"},
    ]
    second = client.responses.create(model="m", input=history, tools=tools)
    [custom] = second.output
    assert custom.type == "custom_tool_call" and custom.name == "apply_patch"
    assert custom.input == "*** Begin Patch"
    history += [
        custom.model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": custom.call_id, "output": "patched"},
    ]
    third = client.responses.create(model="m", input=history, tools=tools)
    assert third.output_text == "done"
    traces = stand.gateway.traces("r-1")
    assert [t.hosted_tools for t in traces] == [["web_search", "file_search"]] * 3
    assert [t.joined for t in traces] == ["start", "extended", "extended"]
    assert len(merge_traces(traces)) == 1
    text = tokenizer.decode(stand.engine.requests[-1]["input_ids"])
    assert '"name": "spawn_agent"' in text and '"name": "apply_patch"' in text and "web_search" not in text


def test_responses_local_shell(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += [tool_call_text("local_shell", {"command": ["ls", "-l"]}), "listed"]
    client = _responses(stand, "r-2")
    first = client.responses.create(model="m", input="list", tools=[{"type": "local_shell"}])
    [call] = first.output
    assert call.type == "local_shell_call" and call.action.command == ["ls", "-l"]
    history: list[Any] = [
        {"role": "user", "content": "list"},
        call.model_dump(exclude_none=True),
        {"type": "local_shell_call_output", "id": "o1", "call_id": call.call_id, "output": "a.txt"},
    ]
    second = client.responses.create(model="m", input=history, tools=[{"type": "local_shell"}])
    assert second.output_text == "listed"
    assert [t.joined for t in stand.gateway.traces("r-2")] == ["start", "extended"]


def test_anthropic_server_tool_is_not_offered(make_stand) -> None:
    stand = make_stand()
    stand.script.replies += ["no search here"]
    stand.gateway.create_session("a-1", {"max_new_tokens": 50})
    client = anthropic.Anthropic(base_url=f"{stand.gateway.url}/sessions/a-1", api_key="x", max_retries=0)
    out = client.messages.create(
        model="m",
        max_tokens=50,
        messages=[{"role": "user", "content": "find it"}],
        tools=[{"type": "web_search_20250305", "name": "web_search"}],  # type: ignore[list-item]
    )
    assert out.content[0].text == "no search here"  # type: ignore[union-attr]
    [trace] = stand.gateway.traces("a-1")
    assert trace.hosted_tools == ["web_search"]


def test_a_side_call_between_main_calls_leaves_one_sample(make_stand) -> None:
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += [TOOL_CALL, '{"title": "Sums"}', ANSWER]
    base = stand.gateway.create_session("c-1", {"max_new_tokens": 200})
    client = openai.OpenAI(base_url=base, api_key="x", max_retries=0, timeout=30)
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model="m", messages=messages, tools=[ADD_TOOL])  # type: ignore[list-item]
    reply = first.choices[0].message.model_dump(exclude_none=True)
    title = {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "object"}}}
    side: list[Any] = [{"role": "user", "content": "Title this: " + QUESTION}]
    client.chat.completions.create(model="m", messages=side, response_format=title)  # type: ignore[arg-type]
    result = {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": TOOL_RESULT}
    messages += [reply, result]
    client.chat.completions.create(model="m", messages=messages, tools=[ADD_TOOL])  # type: ignore[arg-type]
    traces = stand.gateway.traces("c-1")
    assert [t.side_call for t in traces] == ["", "response_format without tools", ""]
    assert [t.joined for t in traces] == ["start", "", "extended"]  # the main chain went on past it
    assert [s.calls for s in merge_traces(traces)] == [[0, 2]]
    assert [s.calls for s in merge_traces(traces, train_side_calls=True)] == [[0, 2], [1]]
