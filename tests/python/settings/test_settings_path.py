"""Evidence that every setting the rollout or the gateway reads travels the whole path:

env file -> ``bin/train --render-only`` (the real command) -> runs/<EXP_ID>/toolkit.yaml and the
slime flags -> slime's ``--custom-config-path`` step (each top-level key becomes an attribute of
``args``, as slime ``arguments.py:2013-2019`` does) -> :func:`load_config` (the rollout's
``ToolkitConfig``) -> :func:`gateway_config` (the ``GatewayConfig`` the gateway is started with).

A non-default value set in the env file must arrive on the object that uses it, and an unset
setting must arrive as the default declared in the schema. slime itself does not run here: the
two slime steps (argparse of the rendered flags, the YAML copy) are restated in a few lines.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from agentcore_slime.rollout.runtime import gateway_config
from agentcore_slime.settings.config import load_config
from agentcore_slime.settings.schema import (
    KEYS_BY_NAME,
    NONE,
    Key,
    Kind,
    Value,
    gateway_keys,
    parse_text,
    rollout_keys,
)

REPO = Path(__file__).resolve().parents[3]
ROUTER_IP = "10.9.8.7"
#: every setting the rollout or the gateway reads
READ = {key.name: key for key in (*rollout_keys(), *gateway_keys())}

#: a valid value other than the default for each setting whose kind alone cannot pick one
NON_DEFAULT_TEXT = {
    "EXP_ID": "evidence-exp",
    "S3_BUCKET": "evidence-bucket",
    "AGENT_URL": "http://127.0.0.1:8181",
    "MODEL_ID": "evidence-policy",
    "GATEWAY_HOST": "10.1.2.3",
    "GATEWAY_PORT": "9191",
    "MAX_POOL_CONNECTIONS": "7",
    "SGLANG_CONTEXT_LENGTH": "4096",
    "SGLANG_REASONING_PARSER": "qwen3",
    "MAX_EXTRA_GROUPS": "5",
    "EVAL_TIMEOUT": "600.0",
    "NODE_HOUR_USD": "98.32",
    "AGENT_COST_KEY": "spent_usd",
    "BUDGET_USD": "1000",
    "MAX_CALLS_PER_EPISODE": "12",
    "MAX_TOKENS_PER_EPISODE": "5000",
    "GATEWAY_TLS_CERT": "/etc/gateway/cert.pem",
    "GATEWAY_TLS_KEY": "/etc/gateway/key.pem",
}


def _non_default(key: Key) -> str:
    if key.name in NON_DEFAULT_TEXT:
        return NON_DEFAULT_TEXT[key.name]
    if key.choices:
        return next(choice for choice in key.choices if choice not in (key.default, NONE))
    if key.kind is Kind.BOOL:
        return "false" if parse_text(key, "") else "true"
    if key.kind is Kind.INT:
        return str(int(str(parse_text(key, ""))) + 3)
    if key.kind is Kind.FLOAT:
        return repr(float(str(parse_text(key, ""))) * 2)
    raise AssertionError(f"add a non-default value for {key.name} to NON_DEFAULT_TEXT")


def _typed(key: Key, text: str) -> Value:
    value = parse_text(key, text)
    return None if value == NONE else value


def _bin_train(env: dict[str, str], tmp_path: Path) -> tuple[Path, list[str]]:
    """Run the real bin/train --render-only; return the run directory and the slime argv."""
    env_file = tmp_path / "exp.env"
    env_file.write_text("".join(f"{name}={shlex.quote(value)}\n" for name, value in env.items()))
    runs = tmp_path / "runs"
    process_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "TOOLKIT_PYTHON": sys.executable,
        "TOOLKIT_RUNS_DIR": str(runs),
    }
    result = subprocess.run(
        [str(REPO / "bin" / "train"), "--render-only", str(env_file)],
        env=process_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    run_dir = runs / env["EXP_ID"]
    script = (run_dir / "train.sh").read_text()
    assert "${MODEL_ARGS[@]}" in script
    return run_dir, shlex.split(
        script.split("# Configuration", 1)[1].split("\nwandb_args()", 1)[0], comments=True
    )


def _slime_args(run_dir: Path, words: list[str]) -> SimpleNamespace:
    """What slime's args hold for the rollout: the flags it reads, then toolkit.yaml's keys."""

    def flag(name: str) -> str | None:
        return words[words.index(name) + 1] if name in words else None

    context = flag("--sglang-context-length")
    args = SimpleNamespace(
        hf_checkpoint=flag("--hf-checkpoint"),
        sglang_context_length=int(context) if context else None,
        sglang_router_ip=ROUTER_IP,
        sglang_router_port=3000,
        custom_config_path=flag("--custom-config-path"),
    )
    assert args.custom_config_path == str(run_dir / "toolkit.yaml")
    for name, value in yaml.safe_load((run_dir / "toolkit.yaml").read_text()).items():
        setattr(args, name, value)
    return args


def _required(tmp_path: Path) -> dict[str, str]:
    return {
        "EXP_ID": "evidence-exp",
        "S3_BUCKET": "evidence-bucket",
        "AGENT_URL": "http://127.0.0.1:8181",
        "MODEL_DIR": str(tmp_path / "model"),
        "DATA_PATH": str(tmp_path / "train.jsonl"),
        "MODEL_TYPE": "qwen2.5-3B",
    }


def _arrived(key: Key, config: Any, gateway: Any) -> list[Value]:
    """The value of ``key`` on every object that uses it."""
    found = []
    if key.rollout:
        found.append(getattr(config, key.yaml_key))
    if key.gateway:
        found.append(getattr(gateway, key.gateway))
    return found


@pytest.fixture(autouse=True)
def _no_environment_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in READ:
        monkeypatch.delenv(name, raising=False)


def test_every_setting_set_in_the_env_file_arrives_where_it_is_used(tmp_path: Path) -> None:
    env = _required(tmp_path)
    # AGENT_RUNTIME_ARN is exclusive with AGENT_URL: the next test sets it
    env.update(
        {
            name: _non_default(key)
            for name, key in READ.items()
            if name not in env and key.name != "AGENT_RUNTIME_ARN"
        }
    )
    run_dir, words = _bin_train(env, tmp_path)
    args = _slime_args(run_dir, words)
    config = load_config(args)
    gateway = gateway_config(config, args)
    for name, text in env.items():
        if name in READ:
            key = READ[name]
            expected = _typed(key, text)
            assert key.default is None or expected != _typed(key, ""), f"{name}: pick a non-default value"
            assert _arrived(key, config, gateway) == [expected] * len(_arrived(key, config, gateway)), name
    assert set(READ) - set(env) == {"AGENT_RUNTIME_ARN"}


def test_the_runtime_arn_arrives(tmp_path: Path) -> None:
    arn = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:runtime/evidence-AbC1"
    env = {**_required(tmp_path), "AGENT_RUNTIME_ARN": arn}
    del env["AGENT_URL"]
    config = load_config(_slime_args(*_bin_train(env, tmp_path)))
    assert (config.agent_runtime_arn, config.agent_url, config.region) == (arn, None, "eu-west-1")


def _declared_default(key: Key) -> Value:
    if key.default_from:
        return _declared_default(KEYS_BY_NAME[key.default_from])
    return _typed(key, "")


def test_every_unset_setting_arrives_as_its_declared_default(tmp_path: Path) -> None:
    env = _required(tmp_path)
    run_dir, words = _bin_train(env, tmp_path)
    args = _slime_args(run_dir, words)
    config = load_config(args)
    gateway = gateway_config(config, args)
    for name, key in READ.items():
        if name in env or name == "AGENT_RUNTIME_ARN":
            continue
        values = _arrived(key, config, gateway)
        if name == "GATEWAY_HOST":  # unset: the gateway serves on slime's router address
            assert values == [None, ROUTER_IP]
        else:
            assert values == [_declared_default(key)] * len(values), name


def test_without_bin_train_the_rollout_falls_back_to_the_same_defaults() -> None:
    """Outside bin/train (no toolkit.yaml, no environment), the rollout's defaults are the declared ones."""
    args = SimpleNamespace(agent_url="http://h:1", s3_bucket="b-bucket", exp_id="e")
    config = load_config(args)
    for key in rollout_keys():
        if key.name not in ("AGENT_URL", "S3_BUCKET", "EXP_ID", "AGENT_RUNTIME_ARN"):
            assert getattr(config, key.yaml_key) == _declared_default(key), key.name
