"""Late system and developer messages under templates that allow one system message.

Qwen3.5/3.6's published template (the models of slime's own coding-agent example) raises a
render error for a system message after the first; Qwen3's renders it as a second system turn.
Claude Code's recorded main call (a mid-conversation system message) on the Messages route,
Codex's recorded call with a late developer message added on the Responses route, and a chat
conversation with a system message after the first turn, go through the real gateway on the
chat-template path (``RENDERER_FAMILY=default``) over the scripted engine: each is answered,
its prompt has one system turn, and the late text sits, wrapped, after the turns before it; the
prompt holds every tool the CLI offered (a namespace's functions included) and its tool result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from chat_templates import FAMILIES, build_family_dir
from fakes.sglang_server import Completion, FakeSGLang

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
LATE = "Plan mode is over; go on."


@pytest.fixture(scope="module", params=["qwen3.5", "qwen3"])
def stand(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from transformers import AutoTokenizer

    family = FAMILIES[request.param]
    directory = build_family_dir(tmp_path_factory.mktemp(family.name), family)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    stop = tokenizer.convert_tokens_to_ids(family.stops[0])

    def policy(input_ids: list[int], sampling_params: dict[str, Any]) -> Completion:
        ids = [*tokenizer.encode("done", add_special_tokens=False), stop]
        return Completion(ids, {"type": "stop", "matched": stop})

    with FakeSGLang(policy, tokenizer=tokenizer, context_length=262144) as engine:
        gateway = Gateway(GatewayConfig(
            str(directory), host="127.0.0.1", port=0, renderer_family="default",
            tool_call_parser="none", reasoning_parser="none",
        ))
        gateway.start(engine.url)
        try:
            yield gateway, engine, tokenizer
        finally:
            gateway.shutdown()


def _post(stand: Any, sid: str, path: str, body: dict[str, Any]) -> str:
    """The prompt the engine got for ``body`` (decoded), after a 200."""
    gateway, engine, tokenizer = stand
    gateway.create_session(sid)
    reply = httpx.post(f"{gateway.url}/sessions/{sid}{path}", json=body, timeout=60)
    assert reply.status_code == 200, reply.text[:500]
    return str(tokenizer.decode(engine.requests[-1]["input_ids"]))


def _system_turns(prompt: str) -> int:
    return prompt.count("<|im_start|>system")


def test_claude_code_mid_conversation_system_message(stand) -> None:
    body = json.loads((AGENTS / "claude_code-2.1.197.json").read_text())[2]["body"]
    prompt = _post(stand, f"cc-{id(stand)}", "/v1/messages", {**body, "stream": False})
    assert _system_turns(prompt) == 1
    late = prompt.index("<system-reminder>\nAvailable agent types for the Agent tool")
    assert prompt.index("Run echo MARKER") < late < prompt.index("MARKER-42")
    missing = [t["name"] for t in body["tools"] if f'"name": "{t["name"]}"' not in prompt]
    assert missing == []


def test_codex_late_developer_message(stand) -> None:
    body = json.loads((AGENTS / "codex-0.171.0.json").read_text())[1]["body"]
    late = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": LATE}]}
    body = {**body, "input": [*body["input"], late], "stream": False}
    prompt = _post(stand, f"cx-{id(stand)}", "/v1/responses", body)
    assert _system_turns(prompt) == 1
    assert prompt.index("MARKER-42") < prompt.index(f"<system-reminder>\n{LATE}\n</system-reminder>")
    functions = [t for t in body["tools"] if t["type"] == "function"]
    functions += [f for t in body["tools"] if t["type"] == "namespace" for f in t["tools"]]
    missing = [t["name"] for t in functions if f'"name": "{t["name"]}"' not in prompt]
    assert missing == [] and '"web_search"' not in prompt


def test_chat_system_message_after_the_first_turn(stand) -> None:
    messages = [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "2 + 3?"},
        {"role": "assistant", "content": "5"},
        {"role": "system", "content": LATE},
        {"role": "user", "content": "and 4 + 4?"},
    ]
    prompt = _post(stand, f"chat-{id(stand)}", "/v1/chat/completions", {"model": "m", "messages": messages})
    assert _system_turns(prompt) == 1
    assert prompt.index("2 + 3?") < prompt.index(f"<system-reminder>\n{LATE}") < prompt.index("4 + 4?")
