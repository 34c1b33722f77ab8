"""Small pure parts: engine answer validation, config from the environment, SSE framing."""

from __future__ import annotations

import json

import pytest
from agentcore_slime.gateway import GatewayConfig
from agentcore_slime.gateway.engine import EngineError, _result
from agentcore_slime.gateway.wire import Reply


def _answer(ids, entries, finish):
    return {
        "output_ids": ids,
        "meta_info": {"finish_reason": finish, "output_token_logprobs": entries},
    }


def test_engine_answer_is_checked() -> None:
    ok = _result(
        _answer(
            [5, 7], [[-0.1, 5, None], [-0.2, 7, None]], {"type": "stop", "matched": 7}
        )
    )
    assert (
        ok.output_ids == [5, 7]
        and ok.logprobs == [-0.1, -0.2]
        and ok.finish_type == "stop"
    )
    with pytest.raises(EngineError, match="1 logprobs for 2 output ids") as err:
        _result(_answer([5, 7], [[-0.1, 5, None]], {"type": "stop", "matched": 7}))
    assert not err.value.retryable
    with pytest.raises(EngineError, match="aborted") as err:
        _result(
            _answer(
                [5], [[-0.1, 5, None]], {"type": "abort", "message": "weights updating"}
            )
        )
    assert err.value.retryable
    with pytest.raises(EngineError, match="malformed"):
        _result({"text": "no ids"})


def test_config_from_env() -> None:
    env = {
        "MODEL_DIR": "/m",
        "CUMULATIVE_TOKEN_MODE": "true",
        "GATEWAY_PORT": "0",
        "SGLANG_CONTEXT_LENGTH": "8192",
        "SGLANG_TOOL_CALL_PARSER": "qwen25",
        "GATEWAY_LOG_LEVEL": "info",
    }
    config = GatewayConfig.from_env(env)
    assert (config.model_dir, config.cumulative_token_mode, config.port) == (
        "/m",
        True,
        0,
    )
    assert (config.context_length, config.tool_call_parser, config.log_level) == (
        8192,
        "qwen25",
        "info",
    )
    with pytest.raises(ValueError, match="GATEWAY_PORT='x' is not an integer"):
        GatewayConfig.from_env({"MODEL_DIR": "/m", "GATEWAY_PORT": "x"})
    with pytest.raises(ValueError, match="GATEWAY_LOG_LEVEL"):
        GatewayConfig.from_env({"MODEL_DIR": "/m", "GATEWAY_LOG_LEVEL": "loud"})
    with pytest.raises(ValueError, match="MODEL_DIR"):
        GatewayConfig.from_env({})


def test_sse_framing() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "r",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
        ],
    }
    events = Reply("m", message, "tool_calls", 3, 2).sse_events(include_usage=True)
    assert events[-1] == b"data: [DONE]\n\n"
    chunks = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    assert all(e.endswith(b"\n\n") and e.startswith(b"data: ") for e in events)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[1]["choices"][0]["delta"] == {"reasoning_content": "r"}
    assert chunks[2]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[4]["choices"] == [] and chunks[4]["usage"]["total_tokens"] == 5
