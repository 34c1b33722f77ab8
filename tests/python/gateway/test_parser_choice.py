"""The issue's failure, before and after: a GLM model's calls through the real gateway.

A model directory that says it is GLM-4.5 (config.json ``model_type`` ``glm4_moe``; the toy
tokenizer stands in for GLM's, so the chat template renders and the GLM markers are plain text to
it, decoded back exactly). With ``SGLANG_TOOL_CALL_PARSER=qwen`` (the old default) every call is
unreadable: the agent gets raw text and the turn is flagged. Left unset (``auto``, the default)
the gateway chooses ``glm45`` from the model, as bin/train's and bin/doctor's check says it
would, and the agent gets the call.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from fakes.sglang_server import FakeSGLang, text_policy
from gateway_helpers import Script
from tool_call_texts import TOOLS, VALID

GLM_CALL = VALID["glm45"]["text then call"]  # "Let me look that up.\n<tool_call>search\n<arg_key>q..."


@pytest.fixture
def glm_dir(model_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "my-glm-finetune"
    shutil.copytree(model_dir, target)
    config = json.loads((target / "config.json").read_text())
    config["model_type"] = "glm4_moe"
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.fixture
def serve(glm_dir: Path, tokenizer: Any) -> Iterator[Any]:
    """``serve(**config)`` -> the base URL of a session on a gateway over the GLM directory."""
    running: list[tuple[Gateway, FakeSGLang]] = []

    def start(**config: Any) -> tuple[Gateway, str]:
        script = Script(replies=[GLM_CALL])
        engine = FakeSGLang(text_policy(tokenizer, script.respond), tokenizer=tokenizer)
        engine.start()
        gateway = Gateway(GatewayConfig(str(glm_dir), host="127.0.0.1", port=0, **config))
        running.append((gateway, engine))
        gateway.start(engine.url)
        return gateway, gateway.create_session("s", {"max_new_tokens": 300})

    yield start
    for gateway, engine in running:
        gateway.shutdown()
        engine.stop()


def _ask(base: str) -> Any:
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "cats?"}]
    return client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0]  # type: ignore[arg-type]


def test_before_qwen_on_a_glm_model_leaves_every_call_unreadable(serve: Any) -> None:
    gateway, base = serve(tool_call_parser="qwen")
    choice = _ask(base)
    assert choice.message.tool_calls is None and choice.message.content == GLM_CALL
    assert gateway.traces("s")[0].tool_call_errors  # flagged


def test_after_unset_chooses_glm45_from_the_model_and_the_agent_gets_the_call(serve: Any) -> None:
    gateway, base = serve()  # SGLANG_TOOL_CALL_PARSER / SGLANG_REASONING_PARSER: auto
    choice = _ask(base)
    (call,) = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("search", {"q": "cats"})
    assert choice.message.content == "Let me look that up." and choice.finish_reason == "tool_calls"
    assert gateway.traces("s")[0].tool_call_errors == []
