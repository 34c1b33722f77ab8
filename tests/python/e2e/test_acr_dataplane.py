"""boto3's bedrock-agentcore client reaches the ACR data-plane stand-in (fakes/acr_dataplane.py).

Only the endpoint is redirected (``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``); the calls are the real
botocore ones, with their parameter validation, serialisation, error mapping and retries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from bedrock_agentcore.runtime import BedrockAgentCoreApp
from botocore.config import Config
from fakes.acr_dataplane import AcrDataPlane, AgentServer

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/echo-agent-AbCdEf1234"
SID = "session-0123456789abcdef0123456789abcdef"


def _echo_app() -> BedrockAgentCoreApp:
    app = BedrockAgentCoreApp()

    @app.entrypoint
    def echo(payload: dict, context) -> dict:
        if payload.get("explode"):
            raise RuntimeError("agent exploded")
        return {"echo": payload, "session_id": context.session_id}

    return app


@pytest.fixture(scope="module")
def agent_url() -> Iterator[str]:
    with AgentServer(_echo_app()) as server:
        yield server.url


@pytest.fixture
def dataplane(agent_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[AcrDataPlane]:
    plane = AcrDataPlane({ARN: agent_url})
    plane.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    yield plane
    plane.stop()


def _client():
    config = Config(retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("bedrock-agentcore", region_name="us-west-2", config=config)


def test_invoke_forwards_payload_and_session_header(dataplane: AcrDataPlane) -> None:
    reply = _client().invoke_agent_runtime(agentRuntimeArn=ARN, runtimeSessionId=SID,
                                           payload=json.dumps({"prompt": "hi"}), qualifier="DEFAULT")
    assert reply["statusCode"] == 200
    assert reply["runtimeSessionId"] == SID
    assert reply["contentType"] == "application/json"
    assert json.loads(reply["response"].read()) == {"echo": {"prompt": "hi"}, "session_id": SID}
    [call] = dataplane.invocations
    assert (call.arn, call.session_id, call.qualifier, json.loads(call.body)) == (ARN, SID, "DEFAULT",
                                                                                {"prompt": "hi"})


def test_stop_runtime_session_is_recorded(dataplane: AcrDataPlane) -> None:
    reply = _client().stop_runtime_session(agentRuntimeArn=ARN, runtimeSessionId=SID)
    assert reply["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert dataplane.stops == [(ARN, SID)]


def test_unknown_runtime_is_resource_not_found(dataplane: AcrDataPlane) -> None:
    client = _client()
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke_agent_runtime(agentRuntimeArn=ARN + "x", runtimeSessionId=SID, payload="{}")


def test_container_error_is_runtime_client_error(dataplane: AcrDataPlane) -> None:
    client = _client()
    with pytest.raises(client.exceptions.RuntimeClientError, match="agent exploded"):
        client.invoke_agent_runtime(agentRuntimeArn=ARN, runtimeSessionId=SID,
                                    payload=json.dumps({"explode": True}))
    assert len(dataplane.invocations) == 1  # a sender fault: botocore does not retry it


def test_throttling_is_retried_by_botocore(dataplane: AcrDataPlane) -> None:
    dataplane._faults.throttle_first = 1
    reply = _client().invoke_agent_runtime(agentRuntimeArn=ARN, runtimeSessionId=SID, payload="{}")
    assert json.loads(reply["response"].read())["session_id"] == SID
    assert [c.status for c in dataplane.invocations] == [429, 200]


def test_short_session_id_is_rejected_by_the_stand_in(dataplane: AcrDataPlane) -> None:
    """botocore validates the length client-side; the stand-in enforces it too for raw HTTP callers."""
    import urllib.error
    import urllib.parse
    import urllib.request

    url = f"{dataplane.url}/runtimes/{urllib.parse.quote(ARN, safe='')}/invocations"
    request = urllib.request.Request(url, data=b"{}", method="POST",
                                     headers={"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "short"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    with caught.value as error:
        assert error.code == 400
        assert error.headers["x-amzn-ErrorType"] == "ValidationException"
