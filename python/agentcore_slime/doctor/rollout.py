"""Rollout checks: the gateway's renderer for the model, who can reach the gateway, free ports.
(A gateway address agents reach is a blocking check bin/train runs too:
:mod:`agentcore_slime.preflight.reach`.)
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from ..preflight.context import Context
from ..preflight.report import Result, failed, passed, warned
from ..settings.config import gateway_pool_size

_PROBE = Path(__file__).with_name("_renderer_probe.py")
#: (env-file key if the schema has one, Ray's default, check name, what it is)
RAY_PORTS = (
    ("RAY_PORT", 6379, "ray-gcs", "Ray GCS"),
    ("RAY_DASHBOARD_PORT", 8265, "ray-dashboard", "Ray dashboard / job API"),
    ("RAY_CLIENT_SERVER_PORT", 10001, "ray-client", "Ray client server"),
    ("RAY_DASHBOARD_AGENT_PORT", 52365, "ray-dashboard-agent", "Ray dashboard agent"),
)


def check_renderer(ctx: Context) -> Result:
    """The renderer family the gateway resolves, and whether cumulative mode can bridge.

    :param ctx: the check context.
    """
    name = "rollout.renderer"
    model_dir = Path(str(ctx.value("MODEL_DIR")))
    if not model_dir.is_dir():  # the probe would fail with the tokenizer loader's words for it
        return failed(name, f"not checked: MODEL_DIR {model_dir} is not a directory (see model.config)",
                      "point MODEL_DIR at a local HF model directory")
    args = [
        str(ctx.value("MODEL_DIR")),
        str(ctx.value("RENDERER_FAMILY") or "auto"),
        str(ctx.value("SGLANG_TOOL_CALL_PARSER") or ""),
        str(ctx.value("SGLANG_REASONING_PARSER") or ""),
    ]
    data, error = ctx.run_job_python(_PROBE, *args)
    if data is None or data.get("error"):
        why = error or str((data or {}).get("error"))
        return failed(name, f"the gateway cannot build a renderer: {why}", _renderer_fix(why))
    found = f"family {data['family']} ({data['reason']})"
    cumulative = bool(ctx.value("CUMULATIVE_TOKEN_MODE"))
    if data.get("bridge"):
        return passed(name, f"{found}; cumulative mode bridges with {data['bridge']}")
    if cumulative:
        return warned(
            name,
            f"{found}; CUMULATIVE_TOKEN_MODE=true but no bridge fits: every call is rendered in full",
            "set RENDERER_FAMILY to a renderers family of this model, or CUMULATIVE_TOKEN_MODE=false",
        )
    return passed(name, f"{found}; no bridge (CUMULATIVE_TOKEN_MODE is off)")


def _renderer_fix(why: str) -> str:
    """The fix for a renderer that cannot be built: a missing package is installed, not fixed
    in the env file."""
    missing = re.search(r"No module named '([^']+)'", why)
    if missing:
        package = missing.group(1).split(".")[0]
        return (
            f"the job's python lacks {package}: install the toolkit's dependencies into it "
            f"(pip install -e python/, or pip install {package})"
        )
    return "fix RENDERER_FAMILY / MODEL_DIR, or the parsers"


def port_in_use(port: int) -> bool:
    """Whether a TCP listener holds ``port`` on this host (a bind of all addresses fails).

    :param port: the port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def check_ports(ctx: Context) -> list[Result]:
    """The gateway's ports (GATEWAY_PORT + i for each of its processes) and Ray's ports are free.

    :param ctx: the check context.
    """
    first = int(str(ctx.value("GATEWAY_PORT")))
    setting, concurrent = (int(str(ctx.value(key) or 0)) for key in ("GATEWAY_PROCESSES", "MAX_CONCURRENT"))
    wanted = [("GATEWAY_PORT", first, "gateway", "gateway")]
    if first:  # process i of the gateway listens on GATEWAY_PORT + i
        more = range(1, gateway_pool_size(setting, concurrent))
        wanted += [("GATEWAY_PORT", first + i, f"gateway-{i}", f"gateway process {i}") for i in more]
        wanted = [w for w in wanted if w[1] <= 65535]  # past it: bin/train refuses GATEWAY_PORT
    for key, default, slug, what in RAY_PORTS:
        value = ctx.value(key)  # None when the schema has no such key: Ray's default
        wanted.append((key, int(str(value)) if value is not None else default, slug, what))
    results = []
    for key, port, slug, what in wanted:
        name = f"rollout.port.{slug}"
        if port == 0:
            results.append(passed(name, f"{key}=0: the {what} picks a free port"))
        elif port_in_use(port):
            results.append(
                warned(
                    name,
                    f"port {port} ({what}) is in use",
                    f"stop what listens there (ss -ltnp 'sport = :{port}'; bin/train stops only this user's "
                    f"stale Ray and SGLang), or choose another {key}",
                )
            )
        else:
            results.append(passed(name, f"port {port} ({what}) is free"))
    return results


def check_gateway_exposure(ctx: Context) -> Result:
    """Who reaches the gateway: a WARN when it serves every interface (GATEWAY_HOST unset,
    ``0.0.0.0`` or ``::``), saying what reaches it and what to do.

    :param ctx: the check context.
    """
    name = "rollout.gateway-exposure"
    host = ctx.value("GATEWAY_HOST")
    first = int(str(ctx.value("GATEWAY_PORT")))
    setting, concurrent = (int(str(ctx.value(key) or 0)) for key in ("GATEWAY_PROCESSES", "MAX_CONCURRENT"))
    count = gateway_pool_size(setting, concurrent)
    ports = "a free port per gateway process" if not first else (
        f"port {first}" if count == 1 else f"ports {first}-{first + count - 1}"
    )
    if host and str(host) not in ("0.0.0.0", "::"):
        return passed(name, f"the gateway serves GATEWAY_HOST={host} (and 127.0.0.1) on {ports}")
    tls = ctx.value("GATEWAY_TLS_CERT") is not None
    seen = (
        "" if tls else " and see the session id in every URL it can observe on the way (plain HTTP; "
        "the session id is the agent's only credential)"
    )
    return warned(
        name,
        f"the gateway serves every interface of this node ({'GATEWAY_HOST unset' if not host else host}) on "
        f"{ports}, in {'HTTPS' if tls else 'plain HTTP'}: any host that reaches this node there can open "
        f"connections (the gateway closes idle ones first and never a call of a live session){seen}",
        "allow only your agents' source addresses to those ports (security group or firewall rule; "
        "ACR agents in VPC mode come from your subnets' addresses), set GATEWAY_HOST to the address "
        "they reach, and GATEWAY_TLS_CERT/GATEWAY_TLS_KEY where the path is not private (docs/launcher.md, "
        "'Operating the gateway')",
    )


def check_rollout(ctx: Context) -> list[Result]:
    """Every rollout check.

    :param ctx: the check context.
    """
    return [check_renderer(ctx), check_gateway_exposure(ctx), *check_ports(ctx)]
