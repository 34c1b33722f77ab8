"""The trace-capturing OpenAI-compatible gateway between agents and SGLang ``/generate``.

The rollout starts the gateway for its training process (:class:`~.pool.GatewayPool` of
``GATEWAY_PROCESSES`` :class:`GatewayProcess`: the :class:`Gateway` in supervised child
processes), creates a session per episode, hands the session's base URL to the agent and reads
back the per-call :class:`CallTrace` records.
See docs/gateway.md.
"""

from __future__ import annotations

from .config import GatewayConfig
from .process import GatewayProcess, GatewayProcessDied
from .server import Gateway
from .trace import CallTrace

__all__ = ["CallTrace", "Gateway", "GatewayConfig", "GatewayProcess", "GatewayProcessDied"]
