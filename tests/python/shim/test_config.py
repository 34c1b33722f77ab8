"""Rollout configuration: toolkit.yaml keys on slime's args, env fallbacks, one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from agentcore_slime.config import ConfigError, check_slime_args, load_config

from shim.standins import make_args

ARN = "arn:aws:bedrock-agentcore:eu-central-1:123456789012:runtime/math_agent-AbC123"


def test_defaults_and_typed_values() -> None:
    config = load_config(make_args(agent_runtime_arn=ARN, s3_bucket="rl-results", max_pool_connections=None))
    assert config.region == "eu-central-1"
    assert config.agent_url is None and config.s3_bucket == "rl-results" and config.exp_id == "exp-test"
    assert config.max_pool_connections == config.max_concurrent + 16
    assert config.sglang_tool_call_parser == "qwen"  # null in toolkit.yaml means the default
    assert config.source == "runs/exp-test/toolkit.yaml"


def test_environment_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_URL", "http://127.0.0.1:8080")
    monkeypatch.setenv("S3_BUCKET", "my-bucket")
    monkeypatch.setenv("ACR_TIMEOUT", "30")
    monkeypatch.setenv("CUMULATIVE_TOKEN_MODE", "true")
    monkeypatch.setenv("MAX_CONCURRENT", "5")
    args = make_args(acr_timeout=None, cumulative_token_mode=None, max_concurrent=None)
    del args.custom_config_path
    config = load_config(args)
    assert config.agent_url == "http://127.0.0.1:8080" and config.s3_bucket == "my-bucket"
    assert (config.acr_timeout, config.cumulative_token_mode, config.max_concurrent) == (30.0, True, 5)
    assert config.max_pool_connections == 21
    assert config.region is None


def test_args_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_BUCKET", "env-bucket")
    assert load_config(make_args(agent_url="http://h:1", s3_bucket="yaml-bucket")).s3_bucket == "yaml-bucket"


def test_every_problem_is_reported_once_with_key_and_file() -> None:
    args = make_args(
        agent_runtime_arn="arn:aws:lambda:us-east-1:1:function/x",
        agent_url="http://h:1",
        s3_bucket=None,
        acr_timeout="soon",
        max_concurrent=0,
        reward_postprocessing="ppo",
        gateway_port=70000,
        cumulative_token_mode="maybe",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(args)
    message = str(caught.value)
    for text in (
        "agent_runtime_arn: both agent_runtime_arn and agent_url are set",
        "is not an AgentCore runtime ARN",
        "s3_bucket: not set",
        "acr_timeout: 'soon' from runs/exp-test/toolkit.yaml is not a number of seconds",
        "max_concurrent: 0 must be at least 1",
        "reward_postprocessing: 'ppo' is not one of grpo, identity",
        "gateway_port: 70000 is not a port",
        "cumulative_token_mode: 'maybe'",
        "(set s3_bucket in runs/exp-test/toolkit.yaml, or S3_BUCKET in the environment)",
    ):
        assert text in message


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({}, "neither agent_runtime_arn nor agent_url is set"),
        ({"agent_url": "localhost:8080"}, "is not an http(s) URL"),
        ({"agent_url": "http://h:1", "s3_bucket": "Bad_Bucket"}, "is not an S3 bucket name"),
        ({"agent_url": "http://h:1", "exp_id": "/abs"}, "exp_id: '/abs' must not start or end with '/'"),
        ({"agent_url": "http://h:1", "exp_id": None}, "exp_id: not set"),
        ({"agent_url": "http://h:1", "max_concurrent": 2.5}, "max_concurrent: 2.5 from"),
        ({"agent_url": "http://h:1", "acr_tps_limit": True}, "acr_tps_limit: True from"),
    ],
)
def test_single_problems(overrides: dict[str, object], text: str) -> None:
    values = {"s3_bucket": "rl-results", **overrides}
    with pytest.raises(ConfigError, match="invalid rollout configuration") as caught:
        load_config(make_args(**values))
    assert text in str(caught.value)


GOLDEN = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "golden").glob("*toolkit.yaml"))


@pytest.mark.skipif(not GOLDEN, reason="no rendered toolkit.yaml goldens in tests/fixtures/golden")
@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_reads_what_bin_train_renders(path: Path) -> None:
    """The seam with bin/train: its rendered toolkit.yaml, applied like slime's --custom-config-path."""
    args = make_args(custom_config_path=str(path))
    for key, value in yaml.safe_load(path.read_text()).items():
        setattr(args, key, value)
    config = load_config(args)
    assert config.source == str(path)
    assert (config.agent_runtime_arn is None) != (config.agent_url is None)
    assert isinstance(config.max_concurrent, int) and isinstance(config.cumulative_token_mode, bool)


def test_unsupported_slime_settings() -> None:
    check_slime_args(make_args())
    with pytest.raises(ConfigError) as caught:
        check_slime_args(make_args(rollout_top_p=0.9, reward_key="acc"))
    message = str(caught.value)
    assert "rollout_top_p: 0.9 is not supported" in message and "pass --rollout-top-p 1.0" in message
    assert "reward_key: 'acc' is set, but agent rewards are scalars (remove --reward-key)" in message
