"""Gateway settings: the :class:`GatewayConfig` seam and its environment fallback.

The settings a user sets (model id, parsers, family, host, port, ...) are declared once in
:mod:`agentcore_slime.settings.schema` (``Key(..., gateway="<field>")``): the fields of
:class:`GatewayConfig` are generated from them, :meth:`GatewayConfig.from_toolkit` copies the
rollout's values, :meth:`GatewayConfig.from_env` parses their environment names with the same
vocabulary as ``bin/train``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from agentcore_slime.errors import ConfigError
from agentcore_slime.settings.schema import NONE, expected, gateway_keys, parse_text, parse_typed

if TYPE_CHECKING:
    from agentcore_slime.settings.config import ToolkitConfig

ADMIN_SECRET_HEADER = "X-Gateway-Admin-Secret"  # admin requests carry the run's secret in it


def short_id(session_id: str) -> str:
    """A session id as logs show it: its first 8 characters and "...", enough to match log
    lines with a run's records, too little to call the session (the id is the agent routes'
    only credential: 36 random characters)."""
    return session_id[:8] + "..." if len(session_id) > 8 else session_id


#: names the gateway's start checks against the installed ``renderers`` (family.py), not the
#: constructor
_NAMES_CHECKED_AT_START = ("renderer_family", "tool_call_parser", "reasoning_parser")

SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "max_new_tokens", "min_p", "repetition_penalty"})


@dataclass
class GatewayConfig:
    """How the gateway renders, samples and serves.

    The fields between the markers are the settings the schema hands to the gateway
    (``Key(..., gateway="<field>")``), generated from it: their types, defaults and meaning are
    declared there (and in docs/gateway.md's table). The fields after them are no settings: what
    the rollout derives from slime's args, and the gateway's limits, which tests shrink (a gateway
    process gets them in its JSON like the rest).

    :param engine_outage_seconds: how long a call retries an engine that went away (connection
        refused or reset, a router's 502/503/504), so that it lands on the engines left once the
        dead one is removed from the router; 0 = the ``engine_retries`` of any failure. The
        rollout sets it from slime's fault-tolerance args (``engine.outage_seconds``).
    :param engine_retries: extra attempts on engine connection errors / 5xx.
    :param engine_retry_backoff: first retry delay (s), doubled per attempt.
    :param engine_timeout: read timeout (s) for one completion; a call that waited that long
        fails (the engine is told to abort it), it is not retried.
    :param engine_health_attempts: ``GET /health`` tries (1 s apart) before ``start`` gives up.
    :param client_timeout: seconds a client may take to send a request's head or body, and
        an idle keep-alive connection stays open (slow or stalled clients are cut off).
    :param render_timeout: seconds a call may wait for its prompt to be built (queued and
        rendering); past it the call gets 503 ``render_timeout`` and the session stays usable.
    :param session_body_bytes: request-body bytes one session may have in flight (read or
        being read, declared by ``Content-Length``); past it a call gets 429.
    :param stored_replies: ``Idempotency-Key`` replies a session keeps for retries (the oldest
        is dropped first).
    :param routed_experts_layers: rollout routing replay (slime's ``--use-rollout-routing-replay``):
        the model's layers (``--num-layers``), with ``routed_experts_topk`` (``--moe-router-topk``);
        0 = off. On, every call asks the engine for the routed experts of the positions its
        session does not hold yet (gateway/routing.py). The rollout sets both from slime's args.
    :param routed_experts_topk: experts per token (see ``routed_experts_layers``).
    """

    # generated: PYTHONPATH=python python3 -m agentcore_slime.settings.schema gateway-fields (tests check it)
    model_dir: str
    model_id: str = "default"
    host: str | None = None
    port: int = 9090
    tls_cert: str | None = None
    tls_key: str | None = None
    tool_call_parser: str | None = "auto"
    reasoning_parser: str | None = "auto"
    cumulative_token_mode: bool = True
    cumulative_bridge: str = "new-messages"
    renderer_family: str = "auto"
    log_level: str = "warning"
    context_length: int | None = None
    max_calls_per_episode: int | None = None
    max_tokens_per_episode: int | None = None
    # end generated
    engine_outage_seconds: float = 0.0
    engine_retries: int = 3
    engine_retry_backoff: float = 0.5
    engine_timeout: float = 900.0
    engine_health_attempts: int = 10
    client_timeout: float = 30.0
    render_timeout: float = 120.0
    session_body_bytes: int = 128 * 1024**2
    stored_replies: int = 64
    routed_experts_layers: int = 0
    routed_experts_topk: int = 0
    #: completion cap when neither the session nor the agent set one
    default_max_new_tokens: ClassVar[int] = 4096
    #: client connections served at once (also capped by the open-files limit); at the cap, the
    #: oldest connection without a request in progress is closed
    max_connections: ClassVar[int] = 4096

    def __post_init__(self) -> None:
        if not self.model_dir:
            raise ConfigError(
                "GatewayConfig.model_dir is empty (set MODEL_DIR / --hf-checkpoint to the model directory)"
            )
        for key in gateway_keys():
            value = getattr(self, key.gateway)
            try:
                if value is not None and key.gateway not in _NAMES_CHECKED_AT_START:
                    parse_typed(key, value)
            except ValueError as exc:
                raise ConfigError(f"{key.gateway}={value!r}: {exc}", expected(key)) from None
        zero_ok = ("engine_retries", "engine_retry_backoff", "engine_outage_seconds")
        timeouts = ("engine_timeout", "client_timeout", "render_timeout")
        for name in (*zero_ok, *timeouts, "session_body_bytes", "stored_replies"):
            value, bound = getattr(self, name), ">= 0" if name in zero_ok else "> 0"
            if not (math.isfinite(value) and (value >= 0 if name in zero_ok else value > 0)):
                raise ConfigError(f"{name} {value!r} must be a finite number {bound}")
        routing = (self.routed_experts_layers, self.routed_experts_topk)
        if any(type(v) is not int or v < 0 for v in routing) or (0 in routing and any(routing)):
            raise ConfigError(
                f"routed_experts_layers/topk {routing!r} must be two positive integers (or both 0: off)"
            )

    @property
    def level(self) -> int:
        return int(logging.getLevelName(self.log_level.upper()))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> GatewayConfig:
        """Build from environment variables (the development fallback of toolkit.yaml).

        Each setting declared with ``gateway=`` in the schema (MODEL_DIR, MODEL_ID,
        RENDERER_FAMILY, CUMULATIVE_TOKEN_MODE, SGLANG_TOOL_CALL_PARSER, ...); empty or unset
        variables keep the field's default; ``overrides`` win.

        :raises ConfigError: a value that is not valid for its setting.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for key in gateway_keys():
            text = env.get(key.name, "")
            if not text.strip():
                continue
            try:
                value = parse_text(key, text)
            except ValueError as exc:
                raise ConfigError(f"{key.name}={text.strip()!r} is {exc}", expected(key)) from None
            values[key.gateway] = None if value == NONE else value
        known = {f.name for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if k in known})
        values.setdefault("model_dir", "")
        return cls(**values)

    @classmethod
    def from_toolkit(cls, config: ToolkitConfig, **more: Any) -> GatewayConfig:
        """The rollout's gateway settings (each ``Key`` with ``rollout=True`` and ``gateway=``)
        plus ``more``: what only slime's args know (``model_dir``, ``context_length``, ...).

        :raises ConfigError: a value that is not valid for its setting.
        """
        values = {key.gateway: getattr(config, key.yaml_key) for key in gateway_keys() if key.rollout}
        return cls(**{**values, **more})


def check_sampling_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Validate a session's sampling params (the trainer's values).

    :raises ValueError: unknown keys or values out of range, with the fix.
    """
    params = dict(params or {})
    unknown = set(params) - SAMPLING_KEYS
    if unknown:
        raise ValueError(f"unknown sampling params {sorted(unknown)} (allowed: {sorted(SAMPLING_KEYS)})")
    checks: dict[str, Callable[[Any], bool]] = {
        "temperature": lambda v: v >= 0,
        "top_p": lambda v: 0 < v <= 1,
        "top_k": lambda v: v == int(v) and (v == -1 or v >= 1),
        "max_new_tokens": lambda v: isinstance(v, int) and v >= 1,
        "min_p": lambda v: 0 <= v <= 1,
        "repetition_penalty": lambda v: 0 < v <= 2,  # SGLang's SamplingParams.verify range
    }
    for key, value in params.items():
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not checks[key](value)
        ):
            raise ValueError(f"sampling param {key}={value!r} is out of range")
    if params.get("top_k") is not None:  # a JSON integer: sglang-router 0.3.2 rejects 20.0 (i32)
        params["top_k"] = int(params["top_k"])
    return {k: v for k, v in params.items() if v is not None}
