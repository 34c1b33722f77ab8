"""Fixtures for the rollout tests (rollout/, episodes/, settings/, evaluate/): local S3 (moto
server), stand-in agent and gateway.

The shim's production code runs unchanged: boto3 reaches the moto server through
``AWS_ENDPOINT_URL_S3``, the local transport POSTs to the stand-in agent over loopback
HTTP, and ``generate_rollout`` goes through its real state holder with only the gateway
factory swapped for :class:`StandinGateway`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agentcore_slime.rollout import runtime

from fakes.s3 import LocalS3
from fakes.standins import Behaviour, Script, StandinAgent, StandinGateway


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    with LocalS3() as server:
        yield server


@pytest.fixture
def s3_bucket(local_s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket; boto3 in this process points at the local server."""
    for key, value in local_s3.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("TRACE_LOG", raising=False)
    return local_s3.create_bucket()


@pytest.fixture
def gateway() -> StandinGateway:
    return StandinGateway()


class AgentHandle:
    """Starts stand-in agents for a test and stops them afterwards."""

    def __init__(self, local_s3: LocalS3, gateway: StandinGateway) -> None:
        self.local_s3 = local_s3
        self.gateway = gateway
        self.agents: list[StandinAgent] = []

    def start(self, script: Script | None = None) -> StandinAgent:
        agent = StandinAgent(
            script or (lambda payload, sid: Behaviour()), self.local_s3.client(), self.gateway
        )
        agent.start()
        self.agents.append(agent)
        return agent

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()


@pytest.fixture
def agents(local_s3: LocalS3, gateway: StandinGateway) -> Iterator[AgentHandle]:
    handle = AgentHandle(local_s3, gateway)
    yield handle
    handle.stop()


@pytest.fixture
def shim_state(gateway: StandinGateway) -> Iterator[Any]:
    """The rollout's state holder with the stand-in gateway; torn down after the test."""
    state = runtime._STATE
    state.reset()
    calls: list[Any] = []

    def factory(config: Any, args: Any) -> StandinGateway:
        calls.append(config)
        return gateway

    state.gateway_factory = factory
    state.factory_calls = calls  # type: ignore[attr-defined]
    yield state
    state.reset()
    state.gateway_factory = runtime.default_gateway_factory
