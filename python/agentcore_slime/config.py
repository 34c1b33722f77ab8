"""The toolkit's rollout configuration, read from slime's ``args``.

``bin/train`` renders ``runs/<EXP_ID>/toolkit.yaml`` and passes it to slime with
``--custom-config-path``; slime sets each top-level key as an attribute of ``args``.
For development (running the rollout outside ``bin/train``), a key that is missing or
``null`` falls back to the environment variable of the same name in upper case
(``AGENT_URL``, ``S3_BUCKET``, ...), then to the default below.

:func:`load_config` validates everything at once and raises one :class:`ConfigError`
that lists every bad key, what is wrong, and where to set it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:bedrock-agentcore:(?P<region>[a-z0-9-]+):\d{12}:runtime/[A-Za-z0-9_.-]+$"
)
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
REWARD_MODES = ("grpo", "identity")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A missing or invalid rollout setting; the message says which key and where to fix it."""


@dataclass(frozen=True)
class ToolkitConfig:
    """Validated rollout settings (the keys of toolkit.yaml).

    :param agent_runtime_arn: the ACR runtime to invoke (exclusive with ``agent_url``).
    :param agent_url: a locally running agent's root URL (exclusive with the ARN).
    :param s3_bucket: bucket the agents write results to.
    :param exp_id: experiment id: the first part of every result key.
    :param gateway_port: port of the trace-capturing gateway (0 = any free port).
    :param gateway_host: address agents use to reach the gateway (None = slime's router ip).
    :param acr_timeout: seconds an episode may take, from invoke to result.
    :param model_id: the model name agents send to the gateway.
    :param acr_tps_limit: new ACR calls per second (invoke and stop share it).
    :param max_concurrent: episodes in flight at once, across all groups.
    :param max_pool_connections: boto3 connection pool size (and worker threads).
    :param reward_postprocessing: ``grpo`` or ``identity`` (see rewards.py).
    :param cumulative_token_mode: gateway builds prompts by extending the previous call.
    :param renderer_family: ``auto`` or a ``renderers`` family name.
    :param gateway_log_level: the gateway's log level.
    :param sglang_tool_call_parser: tool-call parser the gateway uses (None = off).
    :param sglang_reasoning_parser: reasoning parser the gateway uses (None = off).
    :param result_poll_interval: seconds between two S3 LISTs of a step's result prefix.
    :param source: where the settings came from (named in error messages).
    """

    agent_runtime_arn: str | None
    agent_url: str | None
    s3_bucket: str
    exp_id: str
    gateway_port: int = 9090
    gateway_host: str | None = None
    acr_timeout: float = 900.0
    model_id: str = "default"
    acr_tps_limit: float = 25.0
    max_concurrent: int = 100
    max_pool_connections: int = 116
    reward_postprocessing: str = "grpo"
    cumulative_token_mode: bool = False
    renderer_family: str = "auto"
    gateway_log_level: str = "warning"
    sglang_tool_call_parser: str | None = "qwen"
    sglang_reasoning_parser: str | None = None
    result_poll_interval: float = 0.25
    source: str = "toolkit.yaml"

    @property
    def region(self) -> str | None:
        """The AWS region of the runtime ARN (None for a local agent)."""
        if not self.agent_runtime_arn:
            return None
        match = ARN_RE.match(self.agent_runtime_arn)
        return match.group("region") if match else None


class _Reader:
    """Reads keys from args, then the environment, collecting problems."""

    def __init__(self, args: Any, source: str) -> None:
        self.args = args
        self.source = source
        self.problems: list[str] = []

    def raw(self, key: str) -> tuple[Any, str]:
        value = getattr(self.args, key, None)
        if value is not None:
            return value, self.source
        env = os.environ.get(key.upper())
        if env is not None and env.strip() != "":
            return env.strip(), f"environment variable {key.upper()}"
        return None, ""

    def problem(self, key: str, what: str) -> None:
        self.problems.append(
            f"{key}: {what} (set {key} in {self.source}, or {key.upper()} in the environment)"
        )

    def get(self, key: str, default: Any, convert: Callable[[Any], Any], check: str = "") -> Any:
        value, origin = self.raw(key)
        if value is None:
            return default
        try:
            return convert(value)
        except (TypeError, ValueError):
            self.problem(key, f"{value!r} from {origin} is not {check}")
            return default


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _integer(value: Any) -> int:
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(value)
    return int(value)


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    return float(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise ValueError(value)


def _optional_text(value: Any) -> str | None:
    text = _text(value)
    return None if text.lower() in {"", "none", "null"} else text


def _source_of(args: Any) -> str:
    path = getattr(args, "custom_config_path", None)
    return str(path) if path else "runs/<EXP_ID>/toolkit.yaml"


def _check_target(reader: _Reader, arn: str | None, url: str | None) -> None:
    if arn and url:
        reader.problem("agent_runtime_arn", "both agent_runtime_arn and agent_url are set; keep exactly one")
    elif not arn and not url:
        reader.problem("agent_runtime_arn", "neither agent_runtime_arn nor agent_url is set; set exactly one")
    if arn and not ARN_RE.match(arn):
        reader.problem(
            "agent_runtime_arn",
            f"{arn!r} is not an AgentCore runtime ARN "
            "(expected arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>)",
        )
    if url and not re.match(r"^https?://[^/\s]+", url):
        reader.problem("agent_url", f"{url!r} is not an http(s) URL (e.g. http://127.0.0.1:8080)")


def _check_ranges(reader: _Reader, values: dict[str, Any]) -> None:
    for key in ("acr_timeout", "acr_tps_limit", "result_poll_interval"):
        if values[key] <= 0:
            reader.problem(key, f"{values[key]!r} must be greater than 0")
    for key in ("max_concurrent", "max_pool_connections"):
        if values[key] < 1:
            reader.problem(key, f"{values[key]!r} must be at least 1")
    if not 0 <= values["gateway_port"] <= 65535:
        reader.problem(
            "gateway_port", f"{values['gateway_port']!r} is not a port (0-65535; 0 = any free port)"
        )
    if values["reward_postprocessing"] not in REWARD_MODES:
        reader.problem(
            "reward_postprocessing",
            f"{values['reward_postprocessing']!r} is not one of {', '.join(REWARD_MODES)}",
        )


def load_config(args: Any) -> ToolkitConfig:
    """Read and validate the rollout settings from slime's ``args`` (env fallbacks).

    :param args: slime's argument namespace.
    :raises ConfigError: listing every missing or invalid key.
    """
    reader = _Reader(args, _source_of(args))
    arn = reader.get("agent_runtime_arn", None, _optional_text, "a string")
    url = reader.get("agent_url", None, _optional_text, "a string")
    _check_target(reader, arn, url)
    bucket = reader.get("s3_bucket", None, _optional_text, "a string")
    if not bucket:
        reader.problem("s3_bucket", "not set; name the bucket the agents write results to")
    elif not BUCKET_RE.match(bucket):
        reader.problem(
            "s3_bucket", f"{bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, . or -)"
        )
    exp_id = reader.get("exp_id", None, _optional_text, "a string")
    if not exp_id:
        reader.problem("exp_id", "not set; it is the first part of every result key in S3")
    elif exp_id.startswith("/") or exp_id.endswith("/") or any(c.isspace() for c in exp_id):
        reader.problem("exp_id", f"{exp_id!r} must not start or end with '/' or contain spaces")
    max_concurrent = reader.get("max_concurrent", 100, _integer, "an integer")
    values: dict[str, Any] = {
        "gateway_port": reader.get("gateway_port", 9090, _integer, "an integer"),
        "gateway_host": reader.get("gateway_host", None, _optional_text, "a string"),
        "acr_timeout": reader.get("acr_timeout", 900.0, _number, "a number of seconds"),
        "model_id": reader.get("model_id", "default", _text, "a string"),
        "acr_tps_limit": reader.get("acr_tps_limit", 25.0, _number, "a number"),
        "max_concurrent": max_concurrent,
        "max_pool_connections": reader.get(
            "max_pool_connections", max_concurrent + 16, _integer, "an integer"
        ),
        "reward_postprocessing": reader.get("reward_postprocessing", "grpo", _text, "a string"),
        "cumulative_token_mode": reader.get("cumulative_token_mode", False, _boolean, "true or false"),
        "renderer_family": reader.get("renderer_family", "auto", _text, "a string"),
        "gateway_log_level": reader.get("gateway_log_level", "warning", _text, "a string"),
        "sglang_tool_call_parser": reader.get("sglang_tool_call_parser", "qwen", _optional_text, "a string"),
        "sglang_reasoning_parser": reader.get("sglang_reasoning_parser", None, _optional_text, "a string"),
        "result_poll_interval": reader.get("result_poll_interval", 0.25, _number, "a number of seconds"),
    }
    _check_ranges(reader, values)
    if reader.problems:
        raise ConfigError("invalid rollout configuration:\n  " + "\n  ".join(reader.problems))
    return ToolkitConfig(
        agent_runtime_arn=arn,
        agent_url=url,
        s3_bucket=str(bucket),
        exp_id=str(exp_id),
        source=reader.source,
        **values,
    )


def check_slime_args(args: Any) -> None:
    """Reject slime settings the shim cannot honour, before anything starts.

    - ``--rollout-top-p`` other than 1.0: slime then needs top-p replay data on every
      sample (``rollout_top_p_token_ids``), which the gateway does not record, and training
      would fail after the first rollout.
    - ``--reward-key`` / ``--eval-reward-key``: agent rewards are scalars, so a reward dict
      key cannot be looked up.

    :raises ConfigError: naming each offending flag and how to fix it.
    """
    problems = []
    top_p = getattr(args, "rollout_top_p", None)
    if top_p is not None and float(top_p) != 1.0:
        problems.append(
            f"rollout_top_p: {top_p!r} is not supported (slime then needs top-p replay data on every "
            "sample, which the gateway does not record; pass --rollout-top-p 1.0)"
        )
    for key in ("reward_key", "eval_reward_key"):
        if getattr(args, key, None):
            problems.append(
                f"{key}: {getattr(args, key)!r} is set, but agent rewards are scalars "
                f"(remove --{key.replace('_', '-')})"
            )
    if problems:
        raise ConfigError("unsupported slime settings:\n  " + "\n  ".join(problems))
