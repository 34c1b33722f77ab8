"""The episode runner against a real agentcore-rl-toolkit ``AgentCoreRLApp`` (unchanged agent code).

The app (``agentcore-rl-toolkit`` 0.2.0, ``bedrock-agentcore`` 1.25.0) is served by uvicorn on
loopback (``fakes.acr_dataplane.AgentServer``) and writes its results to the local moto S3
server through its own ``boto3.client("s3")``. Both transports are used: the local one
(POST /invocations with the session header) and boto3 ``bedrock-agentcore`` through the
ACR data-plane stand-in. This checks the wire contract (payload, ``_rollout``, session
header, reply ``result_key``, result layout, error results) against the real framework.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agentcore_slime.episodes import EpisodeOutcome, EpisodeRequest, make_runner, new_session_id
from agentcore_slime.settings.config import load_config
from fakes.acr_dataplane import AcrDataPlane, AgentServer
from fakes.standins import make_args

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/rl_app-XyZ987"


def build_app() -> Any:
    from agentcore_rl_toolkit import AgentCoreRLApp

    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    async def handler(payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("explode"):
            raise RuntimeError("the agent exploded")
        config = payload["_rollout"]
        assert config["base_url"].endswith("/v1") and config["model_id"] == "default"
        return {"rewards": [0.0, 1.0 if payload["answer"] == "4" else 0.0], "metrics": {"turns": 1}}

    return app


@pytest.fixture
def rl_app(s3_bucket: str) -> Iterator[str]:
    """The real app, created after the S3 environment points at moto (it builds its client at init)."""
    with AgentServer(build_app()) as server:
        yield server.url


def run(args: Any, payloads: list[dict[str, Any]]) -> list[EpisodeOutcome]:
    async def main() -> list[EpisodeOutcome]:
        with ThreadPoolExecutor(max_workers=4) as pool:
            launcher = make_runner(load_config(args), pool)
            requests = []
            for payload in payloads:
                sid = new_session_id()
                requests.append(
                    EpisodeRequest(
                        payload, sid, "step-9", f"http://gw/sessions/{sid}/v1", {"temperature": 1.0}
                    )
                )
            try:
                return list(await asyncio.gather(*(launcher.run_episode(r) for r in requests)))
            finally:
                await launcher.close()

    return asyncio.run(main())


PAYLOADS = [{"prompt": "2+2?", "answer": "4"}, {"prompt": "2+2?", "answer": "5"}, {"explode": True}]


def check(outcomes: list[EpisodeOutcome], bucket: str) -> None:
    assert [o.reward for o in outcomes] == [1.0, 0.0, None]
    assert outcomes[0].result is not None
    assert outcomes[0].result["result_key"] == f"exp-test/step-9/{outcomes[0].session_id}.json"
    assert outcomes[0].result["s3_bucket"] == bucket and outcomes[0].result["payload"]["answer"] == "4"
    assert "status_code 500): the agent exploded" in str(outcomes[2].reason)


def test_local_transport_with_a_real_rl_app(s3_bucket: str, rl_app: str) -> None:
    check(run(make_args(agent_url=rl_app, s3_bucket=s3_bucket), PAYLOADS), s3_bucket)


def test_acr_transport_with_a_real_rl_app(
    s3_bucket: str, rl_app: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with AcrDataPlane({ARN: rl_app}) as plane:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.url)
        outcomes = run(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket), PAYLOADS)
        check(outcomes, s3_bucket)
        assert sorted(sid for _, sid in plane.stops) == sorted(o.session_id for o in outcomes)
