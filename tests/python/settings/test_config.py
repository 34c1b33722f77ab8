"""Rollout configuration: toolkit.yaml keys on slime's args, env fallbacks, one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from agentcore_slime.settings.config import ConfigError, check_slime_args, load_config
from fakes.standins import make_args

ARN = "arn:aws:bedrock-agentcore:eu-central-1:123456789012:runtime/math_agent-AbC123"


def test_defaults_and_typed_values() -> None:
    config = load_config(make_args(agent_runtime_arn=ARN, s3_bucket="rl-results", max_pool_connections=None))
    assert config.region == "eu-central-1"
    assert config.agent_url is None and config.s3_bucket == "rl-results" and config.exp_id == "exp-test"
    assert config.max_pool_connections == config.max_concurrent  # the schema's default_from
    assert config.sglang_tool_call_parser == "auto"  # null in toolkit.yaml means the default
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
    assert config.max_pool_connections == 5
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
        "invalid rollout configuration (runs/exp-test/toolkit.yaml):",
        "acr_timeout: 'soon' from runs/exp-test/toolkit.yaml: not a number",
        "max_concurrent: 0 from runs/exp-test/toolkit.yaml: out of range "
        "(MAX_CONCURRENT must be an integer >= 1",
        "reward_postprocessing: 'ppo' from runs/exp-test/toolkit.yaml: not allowed "
        "(REWARD_POSTPROCESSING must be one of: grpo, identity",
        "gateway_port: 70000 from runs/exp-test/toolkit.yaml: out of range",
        "cumulative_token_mode: 'maybe' from runs/exp-test/toolkit.yaml: not a boolean",
        "set acr_timeout in runs/exp-test/toolkit.yaml, or ACR_TIMEOUT in the environment)",
    ):
        assert text in message
    assert len(caught.value.errors) == 5  # type: ignore[attr-defined]


def test_cross_checks_once_every_value_is_valid() -> None:
    args = make_args(
        agent_runtime_arn="arn:aws:lambda:us-east-1:1:function/x", agent_url="http://h:1", s3_bucket=None
    )
    with pytest.raises(ConfigError) as caught:
        load_config(args)
    message = str(caught.value)
    assert "s3_bucket: not set (bucket the agent writes its results to) (set s3_bucket in" in message
    assert "set exactly one of AGENT_RUNTIME_ARN and AGENT_URL (both are set)" in message


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({}, "set exactly one of AGENT_RUNTIME_ARN and AGENT_URL"),
        ({"agent_url": "localhost:8080"}, "is not an http(s) URL"),
        ({"agent_url": "http://h:1", "s3_bucket": "Bad_Bucket"}, "is not a valid S3 bucket name"),
        ({"agent_url": "http://h:1", "exp_id": "/abs"}, "EXP_ID='/abs' is not safe"),
        ({"agent_url": "http://h:1", "exp_id": None}, "exp_id: not set"),
        ({"agent_url": "http://h:1", "max_concurrent": 2.5}, "max_concurrent: 2.5 from"),
        ({"agent_url": "http://h:1", "acr_tps_limit": True}, "acr_tps_limit: True from"),
        (
            {"agent_url": "http://h:1", "sglang_tool_call_parser": "pythonic"},
            "must be one of: auto, qwen, qwen25",
        ),
        ({"agent_url": "http://h:1", "renderer_family": "qwen-3"}, "RENDERER_FAMILY must be one of: auto"),
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


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"log_passrate": True}, "log_passrate: --log-passrate is not supported (slime's train actor"),
        ({"global_batch_size": 4}, "--global-batch-size 4 does not divide the rollout's 6 episodes"),
    ],
)
def test_refused_slime_settings(overrides: dict[str, object], text: str) -> None:
    """A hand-edited train.sh gets the same refusal as bin/train, at the first call."""
    check_slime_args(make_args(global_batch_size=6, log_passrate=False))
    with pytest.raises(ConfigError, match="unsupported slime settings") as caught:
        check_slime_args(make_args(**overrides))
    assert text in str(caught.value)


def test_unknown_toolkit_yaml_key_names_the_closest(tmp_path: Path) -> None:
    """slime copies every key onto args; a misspelt one would silently leave the default."""
    path = tmp_path / "toolkit.yaml"
    path.write_text(
        'agent_url: "http://h:1"\ns3_bucket: "rl-results"\nmax_concurent: 4\nrollout_batch_size: 2\n'
    )
    args = make_args(custom_config_path=str(path))
    for key, value in yaml.safe_load(path.read_text()).items():
        setattr(args, key, value)
    with pytest.raises(ConfigError) as caught:
        load_config(args)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"invalid rollout configuration ({path}):"
    assert f"{path}: unknown key 'max_concurent' (did you mean max_concurrent?" in lines[1]
    assert f"{path}: unknown key 'rollout_batch_size'" in lines[2] and "EXTRA_FLAGS" in lines[2]


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("max_concurrent", "many", "max_concurrent: 'many' from"),
        (
            "cumulative_token_mode",
            "yes",
            "cumulative_token_mode: 'yes' from",
        ),  # one vocabulary: true/false/1/0
        ("gateway_port", 1.5, "gateway_port: 1.5 from"),
        ("acr_timeout", [1], "acr_timeout: [1] from"),
        ("model_id", 7, "model_id: 7 from"),
    ],
)
def test_mistyped_toolkit_yaml_values(key: str, value: object, text: str) -> None:
    with pytest.raises(ConfigError, match="invalid rollout configuration") as caught:
        load_config(make_args(agent_url="http://h:1", s3_bucket="rl-results", **{key: value}))
    assert text in str(caught.value)


def test_none_turns_a_parser_off_and_null_means_the_default() -> None:
    base = {"agent_url": "http://h:1", "s3_bucket": "rl-results"}
    assert load_config(make_args(**base, sglang_tool_call_parser="none")).sglang_tool_call_parser is None
    assert load_config(make_args(**base, sglang_tool_call_parser=None)).sglang_tool_call_parser == "auto"
