"""Claude Code's and Codex's own requests, as recorded, through the protocol adapters.

The fixtures (tests/fixtures/agents/) are the bodies Claude Code 2.1.197 and Codex 0.171.0 sent
in their default configuration (print mode / ``codex exec``) to the gateway, one shell tool call
and a final answer (tests/python/gateway/test_agent_clis.py runs the CLIs themselves; the
fixtures' README says how they were recorded). Only a random device id was zeroed. Fast checks
of every shape the issue found: mid-conversation system messages, the billing header, system
blocks, namespace and hosted tools, developer messages, side calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.gateway.conversation import ChainState, normalize_messages, tools_key
from agentcore_slime.gateway.protocols import MESSAGES, RESPONSES
from agentcore_slime.gateway.protocols.anthropic import BILLING_HEADER
from agentcore_slime.gateway.protocols.common import REMINDER_OPEN
from agentcore_slime.gateway.protocols.responses import output_items
from agentcore_slime.gateway.side_calls import side_call
from agentcore_slime.gateway.wire import dump_json

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agents"


def recorded(name: str) -> list[dict[str, Any]]:
    return list(json.loads((FIXTURES / name).read_text()))


CLAUDE = recorded("claude_code-2.1.197.json")
CODEX = recorded("codex-0.171.0.json")


def test_claude_code_mid_conversation_system_message_is_a_reminder_in_place() -> None:
    body = CLAUDE[1]["body"]
    roles = [m["role"] for m in body["messages"]]
    assert roles[:2] == ["user", "system"]  # what Claude Code sends with a model name it does not know
    chat = MESSAGES.parse(dump_json(body))
    assert [m["role"] for m in chat.messages[:3]] == ["system", "user", "user"]
    late = chat.messages[2]["content"]
    assert late.startswith(REMINDER_OPEN + "Available agent types for the Agent tool")
    assert late.endswith("\n</system-reminder>")
    assert sum(m["role"] == "system" for m in chat.messages) == 1  # templates that allow one take it


def test_claude_code_system_blocks_lose_the_billing_header_and_keep_paragraphs() -> None:
    for call in CLAUDE:
        body = call["body"]
        assert body["system"][0]["text"].startswith(BILLING_HEADER)  # sent on every call, hash varies
        system = MESSAGES.parse(dump_json(body)).messages[0]
        assert system["role"] == "system" and BILLING_HEADER not in system["content"]
        second = body["system"][1]["text"]
        assert system["content"].startswith(second + "\n\n")
    headers = {c["body"]["system"][0]["text"] for c in CLAUDE}
    assert len(headers) > 1  # it changes between calls: kept, it would fork every call


def test_claude_code_title_call_is_a_side_call_and_the_main_calls_are_not() -> None:
    title, first, second = (MESSAGES.parse(dump_json(c["body"])) for c in CLAUDE)
    assert title.tools is None and title.constraint == "output_config.format"
    assert side_call(title, normalize_messages(title.messages), None) == "output_config.format without tools"
    assert first.tools and first.constraint == ""
    assert side_call(first, normalize_messages(first.messages), None) == ""
    chain = _chain(first)
    assert side_call(second, normalize_messages(second.messages), chain) == ""
    # the title call again in the middle of the episode: still a side call
    assert side_call(title, normalize_messages(title.messages), chain) != ""


def test_a_tool_less_call_that_opens_another_conversation_is_a_side_call() -> None:
    first = MESSAGES.parse(dump_json(CLAUDE[1]["body"]))
    summary = dict(CLAUDE[1]["body"], tools=[], system="Summarize this page.")
    summary["messages"] = [{"role": "user", "content": "page text"}]
    parsed = MESSAGES.parse(dump_json(summary))
    assert side_call(parsed, normalize_messages(parsed.messages), _chain(first)) == (
        "another conversation without tools"
    )
    # the main conversation's own last turn without tools (same opening) stays main
    same = MESSAGES.parse(dump_json(dict(CLAUDE[2]["body"], tools=[])))
    assert side_call(same, normalize_messages(same.messages), _chain(first)) == ""


def _chain(chat: Any) -> ChainState:
    from array import array

    return ChainState(array("i", [1]), 1, normalize_messages(chat.messages), {}, tools_key(chat.tools))


def test_claude_code_tool_result_and_is_error_reach_the_model() -> None:
    body = json.loads(json.dumps(CLAUDE[2]["body"]))
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    tool = [m for m in MESSAGES.parse(dump_json(body)).messages if m["role"] == "tool"][-1]
    assert "MARKER-42" in tool["content"] and not tool["content"].startswith("Error: ")
    result["is_error"] = True
    tool = [m for m in MESSAGES.parse(dump_json(body)).messages if m["role"] == "tool"][-1]
    assert tool["content"].startswith("Error: ") and "MARKER-42" in tool["content"]


def test_codex_default_tools_namespace_flattened_and_web_search_not_offered() -> None:
    body = CODEX[0]["body"]
    kinds = [t["type"] for t in body["tools"]]
    assert "namespace" in kinds and "web_search" in kinds
    chat = RESPONSES.parse(dump_json(body))
    names = [t["function"]["name"] for t in chat.tools or []]
    namespace = next(t for t in body["tools"] if t["type"] == "namespace")
    inner = [t["name"] for t in namespace["tools"]]
    assert set(inner) <= set(names) and "exec_command" in names
    assert chat.extras["namespaces"] == dict.fromkeys(inner, namespace["name"])
    assert chat.extras["dropped_tools"] == ["web_search"]
    assert len(names) == len(set(names)) == sum(t["type"] == "function" for t in body["tools"]) + len(inner)


def test_codex_call_of_a_namespaced_tool_goes_back_with_its_namespace() -> None:
    chat = RESPONSES.parse(dump_json(CODEX[0]["body"]))
    name = next(iter(chat.extras["namespaces"]))
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}},
    ]
    items = output_items({"content": None, "tool_calls": calls}, chat.extras)
    assert items[0]["name"] == name and items[0]["namespace"] == chat.extras["namespaces"][name]
    assert "namespace" not in items[1]


def test_codex_developer_messages_open_as_one_system_message() -> None:
    body = CODEX[1]["body"]
    assert [i.get("role") for i in body["input"][:2]] == ["developer", "developer"]
    chat = RESPONSES.parse(dump_json(body))
    assert [m["role"] for m in chat.messages[:3]] == ["system", "user", "user"]
    first, second = (_text(i) for i in body["input"][:2])
    assert chat.messages[0]["content"] == first + "\n\n" + second
    assert [m["role"] for m in chat.messages[-2:]] == ["assistant", "tool"]
    assert "MARKER-42" in chat.messages[-1]["content"]


def test_codex_late_developer_message_is_rendered_in_place() -> None:
    body = json.loads(json.dumps(CODEX[1]["body"]))
    late = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "mode"}]}
    body["input"].append(late)
    chat = RESPONSES.parse(dump_json(body))
    assert chat.messages[-1] == {"role": "user", "content": REMINDER_OPEN + "mode\n</system-reminder>"}
    before = RESPONSES.parse(dump_json(CODEX[1]["body"])).messages
    assert chat.messages[: len(before)] == before  # nothing earlier was rewritten


def _text(item: dict[str, Any]) -> str:
    return "".join(part["text"] for part in item["content"])


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_every_recorded_field_is_listed_in_docs_agents(fixture: str) -> None:
    """Each field the CLIs send is named in docs/agents.md: top-level ones (an object's as
    ``key.field``, or the whole object: ``metadata``), and the types of the content blocks, input
    items and tools."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "agents.md").read_text()
    names: set[str] = set()
    for call in recorded(fixture):
        for key, value in call["body"].items():
            names |= {f"{key}.{field}" for field in value} if isinstance(value, dict) else {key}
        for listed in ("messages", "input", "tools", "system"):
            for entry in call["body"].get(listed) or []:
                content = entry.get("content") if isinstance(entry.get("content"), list) else []
                typed = [x for x in [entry, *content] if isinstance(x, dict) and x.get("type")]
                names |= {str(x["type"]) for x in typed}
    named = {name for name in names if f"`{name}`" in docs or f"`{name.split('.')[0]}`" in docs}
    missing = sorted(names - named)
    assert missing == []


SUBAGENT = recorded("claude_code-2.1.197-subagent.json")  # the main call spawns one via the Agent tool


def test_claude_code_sub_agent_is_a_trained_fork_not_a_side_call() -> None:
    """The sub-agent's calls are offered tools (a subset of the main conversation's): they stay the
    episode's, a named fork; only the title call is a side call."""
    parsed = [MESSAGES.parse(dump_json(c["body"])) for c in SUBAGENT]
    main = _chain(parsed[1])
    kinds = [side_call(chat, normalize_messages(chat.messages), main) for chat in parsed]
    assert kinds == ["output_config.format without tools", "", "", "", ""]
    sub_tools = {t["function"]["name"] for t in parsed[2].tools or []}
    main_tools = {t["function"]["name"] for t in parsed[1].tools or []}
    assert sub_tools and sub_tools < main_tools
    # the sub-agent's own late system message (after its tool result) is a reminder in place too
    assert parsed[3].messages[-1]["content"].startswith(REMINDER_OPEN)


def test_reasoning_echoed_back_reaches_the_prompt() -> None:
    """With the reasoning parser on, Claude Code sends the thinking block back, Codex the reasoning item."""
    claude = recorded("claude_code-2.1.197-reasoning.json")[-1]["body"]
    assistant = [m for m in MESSAGES.parse(dump_json(claude)).messages if m["role"] == "assistant"][-1]
    assert assistant["reasoning_content"] == "I should run it." and assistant["tool_calls"]
    codex = recorded("codex-0.171.0-reasoning.json")[-1]["body"]
    assert [i["type"] for i in codex["input"][-3:]] == ["reasoning", "function_call", "function_call_output"]
    assistant = [m for m in RESPONSES.parse(dump_json(codex)).messages if m["role"] == "assistant"][-1]
    assert assistant["reasoning_content"] == "I should run it." and assistant["tool_calls"]


def test_codex_context_compaction_continues_the_main_conversation() -> None:
    """Codex's compaction call offers no tools but continues the main conversation (same opening,
    its history, then the compaction prompt): its summary is what the episode goes on from, so it
    stays main (a fork), not a side call."""
    calls = recorded("codex-0.171.0-compaction.json")
    first, compaction, after = (RESPONSES.parse(dump_json(c["body"])) for c in calls)
    assert compaction.tools is None and "CONTEXT CHECKPOINT COMPACTION" in compaction.messages[-1]["content"]
    chain = _chain(first)
    assert side_call(compaction, normalize_messages(compaction.messages), chain) == ""
    assert side_call(after, normalize_messages(after.messages), chain) == ""
