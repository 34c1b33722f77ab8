"""Blocking checks that a run's episodes can happen at all: an ACR agent can reach the
gateway's address, and the run has AWS credentials to invoke agents and read rewards.

Neither fails at start-up: a gateway on a loopback address makes every episode time out after
ACR_TIMEOUT, and missing credentials fail every episode, with the GPUs already up. Agents on
ACR run in AWS, so a loopback address can never work for them. The credentials are looked up
offline, with the job's boto3 (its own chain: environment, profile files, container and
instance roles); whether they work is bin/doctor's aws.credentials (it asks STS).
"""

from __future__ import annotations

from pathlib import Path

from ..addresses import is_loopback, own_address
from .context import Context
from .report import Result, failed, passed, warned

_PROBE = Path(__file__).with_name("_credentials_probe.py")


def runtime_host(environ: dict[str, str]) -> str:
    """The address slime picks when GATEWAY_HOST is unset (slime ``get_host_info`` at fa3c990):
    SLIME_HOST_IP, else the source address of a UDP route probe, else the hostname's address.

    :param environ: the process environment.
    """
    return environ.get("SLIME_HOST_IP") or own_address()


def check_gateway_address(ctx: Context) -> Result:
    """Agents on ACR can reach the gateway: its address is not loopback.

    :param ctx: the check context.
    """
    name = "rollout.gateway-address"
    host = ctx.value("GATEWAY_HOST")
    where = f"GATEWAY_HOST={host}" if host else f"{runtime_host(dict(ctx.environ))} (chosen at run time)"
    address = str(host) if host else where.split()[0]
    if ctx.value("AGENT_RUNTIME_ARN") is None:
        return passed(name, f"{where}; agents run locally (AGENT_URL)")
    if is_loopback(address):
        return failed(
            name,
            f"{where} is a loopback address, which agents on ACR cannot reach (every episode would time out)",
            "set GATEWAY_HOST to this node's address that the agent's network reaches",
        )
    return passed(name, f"{where} is not loopback")


def check_credentials_found(ctx: Context) -> Result:
    """The job's boto3 finds AWS credentials (train.sh's Ray workers inherit this environment).

    :param ctx: the check context.
    """
    name = "aws.credentials"
    data, error = ctx.run_job_python(_PROBE)
    if data is None or data.get("error"):
        why = error or str((data or {}).get("error"))
        return warned(
            name,
            f"cannot tell whether the run has AWS credentials: {why}",
            "install the toolkit's dependencies (boto3) into the job's python; bin/doctor checks the rest",
        )
    if not data.get("found"):
        return failed(
            name,
            "no AWS credentials found: the run's workers inherit this shell's environment, and without "
            "credentials no episode can invoke the agent or read its reward from S3",
            "export AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or run on a node with an "
            "instance role); bin/doctor checks that they work",
        )
    return passed(name, f"found ({data.get('method') or 'boto3'})")


def check_reach(ctx: Context) -> list[Result]:
    """The gateway's address for an ACR agent (bin/doctor's table has it too).

    :param ctx: the check context.
    """
    return [check_gateway_address(ctx)]


def check_launch_credentials(ctx: Context) -> list[Result]:
    """The credentials, found offline: the launchers' gate only (bin/doctor's aws checks ask STS).

    :param ctx: the check context.
    """
    return [check_credentials_found(ctx)]
