"""AWS checks against moto's S3 and STS in server mode (real boto3 over HTTP).

The control plane's GetAgentRuntime is answered through botocore's Stubber on a real
``bedrock-agentcore-control`` client (moto does not serve that API): request validation and
error parsing are botocore's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from agentcore_slime.doctor import aws
from agentcore_slime.preflight.report import Status
from botocore.stub import Stubber
from fakes.doctor_helpers import MakeContext, by_name
from fakes.s3 import LocalS3


@pytest.fixture(scope="module")
def moto() -> Iterator[LocalS3]:
    with LocalS3() as server:
        yield server


@pytest.fixture
def aws_env(moto: LocalS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LocalS3:
    for key, value in moto.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto.url)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto


def control_plane(monkeypatch: pytest.MonkeyPatch, reply: dict[str, Any] | None, error: str = "") -> None:
    """Route make_client("bedrock-agentcore-control") to a stubbed real client."""
    real = aws.make_client

    def make(service: str, region: str | None = None) -> Any:
        if service != "bedrock-agentcore-control":
            return real(service, region)
        client = boto3.client(service, region_name=region)
        stubber = Stubber(client)
        expected = {"agentRuntimeId": "agent-AbC123"}
        if error:
            stubber.add_client_error("get_agent_runtime", service_error_code=error, expected_params=expected)
        else:
            stubber.add_response("get_agent_runtime", reply, expected)
        stubber.activate()
        return client

    monkeypatch.setattr(aws, "make_client", make)


RUNTIME = {
    "agentRuntimeArn": "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-AbC123",
    "agentRuntimeName": "agent",
    "agentRuntimeId": "agent-AbC123",
    "agentRuntimeVersion": "1",
    "createdAt": "2026-01-01T00:00:00Z",
    "lastUpdatedAt": "2026-01-01T00:00:00Z",
    "roleArn": "arn:aws:iam::123456789012:role/agent",
    "networkConfiguration": {"networkMode": "PUBLIC"},
    "status": "READY",
    "lifecycleConfiguration": {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800},
}


def test_everything_passes_and_the_probe_object_is_gone(
    aws_env: LocalS3, make_context: MakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = aws_env.create_bucket()
    control_plane(monkeypatch, RUNTIME)
    results = by_name(aws.check_aws(make_context(S3_BUCKET=bucket, offline=False)))
    assert [r.status for r in results.values()] == [Status.PASS] * 3, [r.line() for r in results.values()]
    assert "account 123456789012" in results["aws.credentials"].found
    assert f"s3://{bucket}/doctor-exp/.doctor/probe-" in results["aws.s3"].found
    assert aws_env.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_no_credentials_fail(
    aws_env: LocalS3, make_context: MakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    results = aws.check_aws(make_context(offline=False))
    assert [(r.check, r.status) for r in results] == [("aws.credentials", Status.FAIL)]


def test_another_account_than_the_arns_warns(aws_env: LocalS3, make_context: MakeContext) -> None:
    arn = "arn:aws:bedrock-agentcore:eu-west-1:999999999999:runtime/agent-AbC123"
    result = aws.check_credentials(make_context(AGENT_RUNTIME_ARN=arn))
    assert result.status is Status.WARN and "in eu-west-1, account 999999999999" in result.found


def test_a_bucket_that_cannot_be_written_fails(aws_env: LocalS3, make_context: MakeContext) -> None:
    result = aws.check_s3(make_context(S3_BUCKET="no-such-bucket-here"))
    assert result.status is Status.FAIL and "cannot write s3://no-such-bucket-here/" in result.found
    assert "NoSuchBucket" in result.found and "s3:PutObject" in result.fix


@pytest.mark.parametrize(
    ("error", "status", "text"),
    [
        ("ResourceNotFoundException", Status.FAIL, "no agent runtime agent-AbC123 in us-west-2"),
        ("AccessDeniedException", Status.WARN, "not permitted to look up agent-AbC123"),
    ],
)
def test_the_runtime_lookup_classifies_errors(
    aws_env: LocalS3,
    make_context: MakeContext,
    monkeypatch: pytest.MonkeyPatch,
    error: str,
    status: Status,
    text: str,
) -> None:
    control_plane(monkeypatch, None, error)
    result = aws.check_runtime(make_context())
    assert result.status is status and text in result.found


def test_a_runtime_that_is_not_ready_warns(
    aws_env: LocalS3, make_context: MakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    control_plane(monkeypatch, {**RUNTIME, "status": "CREATE_FAILED"})
    result = aws.check_runtime(make_context())
    assert result.status is Status.WARN and "is CREATE_FAILED" in result.found
