"""Fixtures for the gateway tests: the toy model dir, a scripted engine, a running gateway.

Stand-ins: the toy tokenizer (fakes.toy_tokenizer) replaces a Qwen2.5-Instruct checkpoint
and the scripted server (fakes.sglang_server) replaces SGLang; everything else (renderers,
transformers, aiohttp, the openai SDK, strands) is the real code over real loopback HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from fakes.sglang_server import FakeSGLang, Policy, text_policy
from fakes.toy_tokenizer import build_toy_tokenizer
from gateway_helpers import Script
from protocol_helpers import ToolEpisode, play_reference


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local Qwen2.5-like model directory (tokenizer + config.json), built once per run."""
    return build_toy_tokenizer(tmp_path_factory.mktemp("toy-qwen2.5"))


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path) -> Any:
    """The toy tokenizer loaded through transformers, as the gateway loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


@dataclass
class Stand:
    """A running scripted engine + gateway."""

    gateway: Gateway
    engine: FakeSGLang
    script: Script


@pytest.fixture
def make_stand(model_dir: Path, tokenizer: Any) -> Iterator[Callable[..., Stand]]:
    """Factory: ``make_stand(policy=None, fake_kwargs..., **config_overrides)`` -> Stand."""
    started: list[Stand] = []

    def make(
        policy: Policy | None = None,
        fake: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> Stand:
        script = Script()
        engine = FakeSGLang(
            policy or text_policy(tokenizer, script.respond),
            tokenizer=tokenizer,
            **(fake or {}),
        )
        engine.start()
        config = {
            "host": "127.0.0.1",
            "port": 0,
            "engine_retry_backoff": 0.01,
            **overrides,
        }
        gateway = Gateway(GatewayConfig(str(model_dir), **config))
        try:
            gateway.start(engine.url)
        except BaseException:
            engine.stop()
            raise
        stand = Stand(gateway, engine, script)
        started.append(stand)
        return stand

    yield make
    for stand in started:
        stand.gateway.shutdown()
        stand.engine.stop()


@pytest.fixture
def tool_episode(make_stand: Callable[..., Stand]) -> ToolEpisode:
    """A stand on which chat played the reference tool episode, scripted to play it again
    through another protocol (protocol_helpers.play_reference)."""
    return play_reference(make_stand)
