"""AWS checks (skipped with --offline): credentials, the runtime ARN, S3 access, the runtime itself.

S3 is probed with a small object under ``<EXP_ID>/.doctor/``: written, read back, listed and
deleted, the four operations the rollout and the agents need. The runtime's existence is asked
of the control plane (``GetAgentRuntime``, read-only); a caller without that permission gets a
WARN, since training itself only needs ``InvokeAgentRuntime``. boto3 is imported here only.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..preflight.context import Context
from ..preflight.report import Result, failed, passed, warned

#: error codes that mean "not permitted" rather than "does not exist"
DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException")


def make_client(service: str, region: str | None = None) -> Any:
    """A boto3 client (the one seam tests replace for the control plane).

    :param service: the boto3 service name.
    :param region: the region (``None`` = boto3's default chain).
    """
    import boto3

    return boto3.client(service, region_name=region)


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", type(exc).__name__))
    return type(exc).__name__


def arn_parts(arn: str) -> tuple[str, str, str]:
    """(region, account, runtime id) of a validated AgentCore runtime ARN.

    :param arn: ``arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>``.
    """
    parts = arn.split(":")
    return parts[3], parts[4], parts[5].split("/", 1)[1]


def check_credentials(ctx: Context) -> Result:
    """Credentials resolve, and the caller's account (STS) against the ARN's.

    :param ctx: the check context.
    """
    name = "aws.credentials"
    try:
        import boto3

        if boto3.Session().get_credentials() is None:
            return failed(
                name,
                "no AWS credentials found",
                "export AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
            )
        account = str(make_client("sts").get_caller_identity()["Account"])
    except ImportError:
        return failed(name, "boto3 is not installed in the doctor's python", "pip install boto3")
    except Exception as exc:  # noqa: BLE001 - any botocore failure is reported
        return failed(
            name,
            f"credentials do not work: {_code(exc)}: {exc}",
            "refresh them (aws sts get-caller-identity)",
        )
    arn = ctx.value("AGENT_RUNTIME_ARN")
    if arn is None:
        return passed(name, f"credentials of account {account}")
    region, arn_account, _ = arn_parts(str(arn))
    found = f"credentials of account {account}; the runtime ARN is in {region}, account {arn_account}"
    if arn_account != account:
        return warned(
            name,
            found,
            "use credentials of the runtime's account (cross-account invocation needs a resource policy)",
        )
    return passed(name, found)


def check_s3(ctx: Context) -> Result:
    """Write, read, list and delete one probe object under ``<EXP_ID>/.doctor/``.

    :param ctx: the check context.
    """
    name, bucket = "aws.s3", str(ctx.value("S3_BUCKET"))
    key = f"{ctx.value('EXP_ID')}/.doctor/probe-{uuid.uuid4().hex}.json"
    body = b'{"probe": "bin/doctor"}'
    step, written = "write", False
    try:
        s3 = make_client("s3")
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        written, step = True, "read"
        if s3.get_object(Bucket=bucket, Key=key)["Body"].read() != body:
            return failed(
                name, f"s3://{bucket}/{key} read back different bytes", "check the bucket's configuration"
            )
        step = "list"
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
        if not any(item.get("Key") == key for item in listed):
            return failed(name, f"s3://{bucket}/{key} is not listed", "allow s3:ListBucket on the bucket")
        step = "delete"
        s3.delete_object(Bucket=bucket, Key=key)
        written = False
    except Exception as exc:  # noqa: BLE001 - any botocore failure is reported
        return failed(
            name,
            f"cannot {step} s3://{bucket}/{key}: {_code(exc)}",
            f"allow s3:PutObject, GetObject, ListBucket and DeleteObject on {bucket}/{ctx.value('EXP_ID')}/*",
        )
    finally:
        if written:
            try:
                s3.delete_object(Bucket=bucket, Key=key)
            except Exception:  # noqa: BLE001,S110 - best effort; the failure is already reported
                pass
    return passed(name, f"wrote, read, listed and deleted s3://{bucket}/{key}")


def check_runtime(ctx: Context) -> Result:
    """The agent runtime exists (read-only control-plane call; WARN when not permitted).

    :param ctx: the check context.
    """
    name, arn = "aws.runtime", ctx.value("AGENT_RUNTIME_ARN")
    if arn is None:
        return passed(name, f"AGENT_URL={ctx.value('AGENT_URL')}: no ACR runtime to look up")
    region, _, runtime_id = arn_parts(str(arn))
    try:
        reply = make_client("bedrock-agentcore-control", region).get_agent_runtime(agentRuntimeId=runtime_id)
    except Exception as exc:  # noqa: BLE001 - classified below
        code = _code(exc)
        if code == "ResourceNotFoundException":
            return failed(
                name,
                f"no agent runtime {runtime_id} in {region}",
                "copy AGENT_RUNTIME_ARN from the deployment",
            )
        if code in DENIED:
            return warned(
                name,
                f"not permitted to look up {runtime_id} ({code})",
                "allow bedrock-agentcore:GetAgentRuntime to check it",
            )
        return warned(
            name, f"cannot look up {runtime_id}: {code}: {exc}", "check the region and network access"
        )
    status = reply.get("status", "unknown")
    if status != "READY":
        return warned(name, f"agent runtime {runtime_id} is {status}", "wait until the runtime is READY")
    return passed(name, f"agent runtime {runtime_id} in {region} is READY")


def check_aws(ctx: Context) -> list[Result]:
    """Every AWS check (the caller skips them with --offline).

    :param ctx: the check context.
    """
    credentials = check_credentials(ctx)
    if credentials.status.value == "FAIL":
        return [credentials]
    return [credentials, check_s3(ctx), check_runtime(ctx)]
