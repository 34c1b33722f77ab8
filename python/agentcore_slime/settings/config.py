"""The toolkit's rollout configuration, read from slime's ``args``.

``bin/train`` renders ``runs/<EXP_ID>/toolkit.yaml`` and passes it to slime with
``--custom-config-path``; slime sets each top-level key as an attribute of ``args``.
For development (running the rollout outside ``bin/train``), a key that is missing or
``null`` falls back to the environment variable of the same name in upper case
(``AGENT_URL``, ``S3_BUCKET``, ...), then to the declared default.

Every key, its type, default and choices are declared once in
:mod:`agentcore_slime.settings.schema` (the ``Key(...)`` entries with ``rollout=True``);
:class:`ToolkitConfig` has one field per such key, generated from it. :func:`load_config` validates
everything at once, at the rollout's first call, and raises one
:class:`~agentcore_slime.errors.ConfigError` that lists every unknown key (naming the
closest known one) and every bad value, what is wrong, and where to set it.
"""

from __future__ import annotations

import difflib
import importlib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcore_slime.errors import ConfigError, raise_all
from agentcore_slime.settings.checks import (
    LOG_PASSRATE_HOW,
    check_agent,
    check_bucket,
    check_exp_id,
    check_global_batch_divides,
)
from agentcore_slime.settings.schema import (
    KEYS_BY_NAME,
    NONE,
    Key,
    Value,
    expected,
    parse_typed,
    rollout_keys,
)

__all__ = [
    "ConfigError",
    "SamplingSettings",
    "ToolkitConfig",
    "check_slime_args",
    "load_config",
    "load_function",
    "sampling_settings",
]

#: slime rollout flags whose hooks the agent rollout never calls (the agent generates and rewards)
UNSUPPORTED_ROLLOUT_FLAGS = {
    "custom_generate_function_path": "the agent talks to the policy itself; there is no generate function",
    "custom_rm_path": "the reward is the one the agent writes to S3",
    "rm_type": "the reward is the one the agent writes to S3",
    "group_rm": "the reward is the one the agent writes to S3",
    "rollout_sample_filter_path": "use --dynamic-sampling-filter-path (honoured) instead",
    "rollout_all_samples_process_path": "not called by the agent rollout",
    # slime v0.3.1 on applies these hooks in its default rollout only (slime/rollout/sample_hooks.py)
    "rollout_sample_hook_path": (
        "slime applies sample hooks only in its own default rollout, so the agent rollout would "
        "skip them silently; change the samples in --custom-reward-post-process-path's place "
        "or in the agent"
    ),
    "mask_offpolicy_in_partial_rollout": (
        "aborted agent episodes restart from their prompt (nothing off-policy is kept), so there is "
        "nothing to mask"
    ),
}

ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:bedrock-agentcore:(?P<region>[a-z0-9-]+):\d{12}:runtime/[A-Za-z0-9_.-]+$"
)


#: concurrent episodes one process serves before auto sizing adds another
SESSIONS_PER_PROCESS = 128
#: cores left to the rollout, the engines' CPU side and the agents per gateway process (auto sizing)
CORES_PER_PROCESS = 8
#: the most processes auto sizing starts
MAX_AUTO_PROCESSES = 8


def gateway_pool_size(setting: int, max_concurrent: int, cpus: int | None = None) -> int:
    """How many gateway processes to start: ``setting`` when > 0; 0 = auto, one process per
    :data:`SESSIONS_PER_PROCESS` concurrent episodes, at most one per :data:`CORES_PER_PROCESS`
    cores of this node and :data:`MAX_AUTO_PROCESSES`, at least 1 (a 2-core machine gets 1)."""
    if setting > 0:
        return setting
    cores = cpus if cpus is not None else (os.cpu_count() or 1)
    wanted = math.ceil(max(max_concurrent, 1) / SESSIONS_PER_PROCESS)
    return max(1, min(wanted, cores // CORES_PER_PROCESS, MAX_AUTO_PROCESSES))


@dataclass(frozen=True)
class ToolkitConfig:
    """Validated rollout settings: one field per ``Key(..., rollout=True)`` of the schema, named
    :attr:`~.schema.Key.yaml_key`; its type, default and meaning are declared there (and in
    docs/rollout.md's table). The fields between the markers are generated from the schema.

    :param source: where the settings came from (named in error messages).
    """

    # generated: PYTHONPATH=python python3 -m agentcore_slime.settings.schema toolkit-fields (tests check it)
    exp_id: str
    s3_bucket: str
    agent_runtime_arn: str | None
    agent_url: str | None
    num_nodes: int
    model_id: str
    acr_timeout: float
    acr_tps_limit: float
    max_concurrent: int
    max_pool_connections: int
    gateway_host: str | None
    gateway_port: int
    gateway_tls_cert: str | None
    gateway_tls_key: str | None
    gateway_processes: int
    reward_postprocessing: str
    sglang_tool_call_parser: str | None
    sglang_reasoning_parser: str | None
    infra_failures: str
    max_extra_groups: int | None
    cumulative_token_mode: bool
    cumulative_bridge: str
    renderer_family: str
    gateway_log_level: str
    result_poll_interval: float
    record_episodes: int
    eval_timeout: float | None
    node_hour_usd: float
    acr_vcpu_hour_usd: float
    acr_gb_hour_usd: float
    acr_active_cpu_share: float
    acr_memory_gb: float
    agent_cost_key: str
    budget_usd: float | None
    max_calls_per_episode: int | None
    max_tokens_per_episode: int | None
    train_side_calls: bool
    # end generated
    source: str = "toolkit.yaml"

    @property
    def region(self) -> str | None:
        """The AWS region of the runtime ARN (None for a local agent)."""
        if not self.agent_runtime_arn:
            return None
        match = ARN_RE.match(self.agent_runtime_arn)
        return match.group("region") if match else None


def _source_of(args: Any) -> str:
    path = getattr(args, "custom_config_path", None)
    return str(path) if path else "runs/<EXP_ID>/toolkit.yaml"


def _where(key: Key, source: str) -> str:
    return f"set {key.yaml_key} in {source}, or {key.name} in the environment"


def _unknown_keys(args: Any, source: str) -> list[ConfigError]:
    """Keys of the toolkit.yaml file that no setting declares (a typo or a renamed key).

    slime has already copied them onto ``args``, where they would be silently ignored.
    """
    path = getattr(args, "custom_config_path", None)
    if not path or not Path(str(path)).is_file():
        return []
    import yaml  # slime's own dependency; only needed when there is a file to read

    try:
        data = yaml.safe_load(Path(str(path)).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return [ConfigError(f"{source}: cannot be read ({exc})", "re-render it with bin/train")]
    if data is None:
        return []
    if not isinstance(data, dict):
        return [ConfigError(f"{source}: is not a mapping of keys to values", "re-render it with bin/train")]
    known = [key.yaml_key for key in rollout_keys()]
    problems = []
    for name in data:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see docs/rollout.md for the keys"
            problems.append(
                ConfigError(
                    f"{source}: unknown key {name!r}",
                    f"{hint} slime flags go on the command line (EXTRA_FLAGS), not into toolkit.yaml",
                )
            )
    return problems


def _read(args: Any, key: Key, source: str) -> tuple[Value, ConfigError | None]:
    """One setting: slime's args, else the environment, else the declared default."""
    raw: object = getattr(args, key.yaml_key, None)
    origin = source
    if raw is None:
        env = os.environ.get(key.name, "")
        if env.strip():
            raw, origin = env, f"environment variable {key.name}"
    try:
        return parse_typed(key, raw), None
    except ValueError as exc:
        how = f"{expected(key)}; {_where(key, source)}"
        return None, ConfigError(f"{key.yaml_key}: {raw!r} from {origin}: {exc}", how)


def _cross_checks(values: dict[str, Value], source: str) -> list[ConfigError]:
    problems = []
    for name in ("EXP_ID", "S3_BUCKET"):
        if values[name] is None:
            key = KEYS_BY_NAME[name]
            problems.append(ConfigError(f"{key.yaml_key}: not set ({key.help})", _where(key, source)))
    checks: list[Callable[[], None]] = [lambda: check_agent(values["AGENT_RUNTIME_ARN"], values["AGENT_URL"])]
    if values["EXP_ID"] is not None:
        checks.append(lambda: check_exp_id(str(values["EXP_ID"])))
    if values["S3_BUCKET"] is not None:
        checks.append(lambda: check_bucket(str(values["S3_BUCKET"])))
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            problems.append(ConfigError(exc.what, f"{exc.how}; set it in {source}"))
    return problems


def load_config(args: Any) -> ToolkitConfig:
    """Read and validate the rollout settings from slime's ``args`` (env fallbacks).

    :param args: slime's argument namespace.
    :raises ConfigError: listing every unknown key and every missing or invalid value.
    """
    source = _source_of(args)
    problems = _unknown_keys(args, source)
    values: dict[str, Value] = {}
    for key in rollout_keys():
        values[key.name], problem = _read(args, key, source)
        if problem is not None:
            problems.append(problem)
    for key in rollout_keys():
        if key.default_from and values[key.name] is None:
            values[key.name] = values[key.default_from]
        if values[key.name] == NONE and NONE in key.choices:
            values[key.name] = None
    if not problems:
        problems += _cross_checks(values, source)
    raise_all(problems, f"invalid rollout configuration ({source}):")
    by_field = {key.yaml_key: values[key.name] for key in rollout_keys()}
    return ToolkitConfig(source=source, **by_field)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SamplingSettings:
    """Over-sampling as slime's args and toolkit.yaml set it.

    :param fetch_size: groups fetched at a time (``--over-sampling-batch-size``).
    :param max_extra_groups: groups a step may start beyond ``--rollout-batch-size``.
    """

    fetch_size: int
    max_extra_groups: int


def sampling_settings(args: Any, config: ToolkitConfig) -> SamplingSettings:
    """Read ``--over-sampling-batch-size`` (slime's default: the rollout batch size) and the cap.

    :raises ConfigError: a size below the rollout batch size, or a cap below the over-sampling.
    """
    target = getattr(args, "rollout_batch_size", None)
    fetch = getattr(args, "over_sampling_batch_size", None) or target
    if not isinstance(target, int) or not isinstance(fetch, int) or isinstance(fetch, bool):
        raise ConfigError(
            f"over_sampling_batch_size: {fetch!r} / rollout_batch_size {target!r} must be integers",
            "pass --over-sampling-batch-size N, or set OVER_SAMPLING_BATCH_SIZE",
        )
    if fetch < target:
        raise ConfigError(
            f"over_sampling_batch_size: {fetch} is below rollout_batch_size {target}",
            "set OVER_SAMPLING_BATCH_SIZE >= ROLLOUT_BATCH_SIZE, or leave it unset",
        )
    cap = config.max_extra_groups if config.max_extra_groups is not None else fetch
    if cap < fetch - target:
        raise ConfigError(
            f"max_extra_groups: {cap} is below the {fetch - target} extra groups that "
            f"over_sampling_batch_size {fetch} starts",
            "raise MAX_EXTRA_GROUPS or lower OVER_SAMPLING_BATCH_SIZE",
        )
    return SamplingSettings(fetch, cap)


def _rollout_flag_problems(args: Any) -> list[ConfigError]:
    problems = []
    for key, why in UNSUPPORTED_ROLLOUT_FLAGS.items():
        if getattr(args, key, None):
            flag = f"--{key.replace('_', '-')}"
            problems.append(ConfigError(f"{key}: {flag} is set, but {why}", "remove the flag"))
    path = getattr(args, "dynamic_sampling_filter_path", None)
    if path:
        try:
            load_function(str(path))
        except ValueError as exc:
            problems.append(
                ConfigError(f"dynamic_sampling_filter_path: {exc}", "check --dynamic-sampling-filter-path")
            )
    return problems


def check_slime_args(args: Any) -> None:
    """Reject slime settings the shim cannot honour, before anything starts.

    The same flags are refused by ``bin/train`` (``settings/validate.py``); this catches a
    rendered script edited by hand.

    - ``--rollout-top-p`` other than 1.0: slime then needs top-p replay data on every
      sample (``rollout_top_p_token_ids``), which the gateway does not record, and training
      would fail after the first rollout.
    - ``--reward-key`` / ``--eval-reward-key``: agent rewards are scalars, so a reward dict
      key cannot be looked up.
    - ``--log-passrate``: slime's train actor then asserts exactly rollout_batch_size x
      n_samples_per_prompt samples, which multi-segment episodes and padding break.
    - a ``--global-batch-size`` that does not divide the rollout's episodes.
    - slime rollout hooks the agent rollout never calls (:data:`UNSUPPORTED_ROLLOUT_FLAGS`), and a
      ``--dynamic-sampling-filter-path`` that does not import.
    - ``--use-rollout-routing-replay`` without an MoE model's ``--num-layers``,
      ``--moe-router-topk`` and ``--num-experts`` (the shape of the routed experts every sample
      must carry; bin/train checks it against config.json, preflight/routing.py).

    :raises ConfigError: naming each offending flag and how to fix it.
    """
    problems = []
    top_p = getattr(args, "rollout_top_p", None)
    if top_p is not None and float(top_p) != 1.0:
        problems.append(
            ConfigError(
                f"rollout_top_p: {top_p!r} is not supported",
                "slime then needs top-p replay data on every sample, which the gateway does not "
                "record; pass --rollout-top-p 1.0",
            )
        )
    for key in ("reward_key", "eval_reward_key"):
        if getattr(args, key, None):
            problems.append(
                ConfigError(
                    f"{key}: {getattr(args, key)!r} is set, but agent rewards are scalars",
                    f"remove --{key.replace('_', '-')}",
                )
            )
    if getattr(args, "log_passrate", False) is True:
        problems.append(ConfigError("log_passrate: --log-passrate is not supported", LOG_PASSRATE_HOW))
    problems += _global_batch_problems(args)
    problems += _rollout_flag_problems(args)
    problems += _routing_replay_problems(args)
    raise_all(problems, "unsupported slime settings:")


def _routing_replay_problems(args: Any) -> list[ConfigError]:
    if not getattr(args, "use_rollout_routing_replay", False):
        return []
    names = ("num_layers", "moe_router_topk", "num_experts")
    shape = {name: getattr(args, name, None) for name in names}
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape.values()):
        return []
    return [
        ConfigError(
            f"use_rollout_routing_replay: --use-rollout-routing-replay needs an MoE model, got {shape}",
            "use the model script of a mixture-of-experts model, or remove --use-rollout-routing-replay",
        )
    ]


def _global_batch_problems(args: Any) -> list[ConfigError]:
    names = ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size")
    batch, n, gbs = (getattr(args, name, None) for name in names)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, n, gbs)):
        return []
    try:
        check_global_batch_divides(int(str(gbs)), int(str(batch)) * int(str(n)))
    except ConfigError as exc:
        return [exc]
    return []


def load_function(path: str) -> Callable[..., Any]:
    """Import ``package.module.function`` (the form of slime's ``--*-path`` flags).

    :raises ValueError: the path is malformed, the module or the attribute is missing.
    """
    module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{path!r} is not a dotted path module.function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"{module_name!r} has no function {attr!r}")
    return function  # type: ignore[no-any-return]
