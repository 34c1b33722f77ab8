"""Rollout checks: the gateway's renderer choice, free ports, a gateway address agents can reach.

The renderer is resolved by the gateway's own code in the job's python, on the locally built
Qwen2.5-like tokenizer of tests/python/fakes/toy_tokenizer.py (real transformers + renderers).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from agentcore_slime.doctor.rollout import check_gateway_exposure, check_ports, check_renderer
from agentcore_slime.preflight.reach import check_gateway_address
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import MakeContext, by_name, stub
from fakes.toy_tokenizer import build_toy_tokenizer


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_toy_tokenizer(tmp_path_factory.mktemp("toy") / "Qwen2.5-toy")


def test_a_chat_template_model_resolves_and_can_bridge(make_context: MakeContext, toy_model: Path) -> None:
    result = check_renderer(make_context(MODEL_DIR=str(toy_model), CUMULATIVE_TOKEN_MODE="true"))
    assert result.status is Status.PASS, result.line()
    assert result.found.startswith("family default (")
    assert "cumulative mode bridges with the chat template's rendering of the new messages" in result.found


def test_a_model_without_a_chat_template_fails_for_the_template_family(make_context: MakeContext) -> None:
    """The default fixture model has a bare tokenizer.json: no chat template to render with."""
    result = check_renderer(make_context(RENDERER_FAMILY="default"))
    assert result.status is Status.FAIL and "has no chat template" in result.found
    assert "RENDERER_FAMILY" in result.fix


def test_a_missing_model_dir_is_named_not_the_tokenizer_loader_error(make_context: MakeContext) -> None:
    """The unedited example's MODEL_DIR: the renderer check names it, not an OSError of the hub."""
    result = check_renderer(make_context(MODEL_DIR="/root/models/Qwen2.5-3B-Instruct"))
    assert result.status is Status.FAIL
    assert result.found == ("not checked: MODEL_DIR /root/models/Qwen2.5-3B-Instruct is not a directory "
                            "(see model.config)")


def test_ports_free_pass_and_a_held_port_is_named(make_context: MakeContext) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        results = by_name(check_ports(make_context(GATEWAY_PORT=str(port))))
        gateway = results["rollout.port.gateway"]
        assert gateway.status is Status.WARN and f"port {port} (gateway) is in use" in gateway.found
        assert "GATEWAY_PORT" in gateway.fix
    results = by_name(check_ports(make_context(GATEWAY_PORT=str(port))))
    assert results["rollout.port.gateway"].status is Status.PASS
    assert {"rollout.port.ray-gcs", "rollout.port.ray-dashboard", "rollout.port.ray-client"} <= set(results)


def test_gateway_port_zero_passes(make_context: MakeContext) -> None:
    gateway = by_name(check_ports(make_context(GATEWAY_PORT="0")))["rollout.port.gateway"]
    assert gateway.status is Status.PASS and "picks a free port" in gateway.found


def test_a_loopback_gateway_fails_when_agents_run_on_acr(make_context: MakeContext) -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        result = check_gateway_address(make_context(GATEWAY_HOST=host))
        assert result.status is Status.FAIL, host
        assert "GATEWAY_HOST" in result.fix


def test_a_routable_gateway_passes_and_a_local_agent_may_use_loopback(make_context: MakeContext) -> None:
    assert check_gateway_address(make_context(GATEWAY_HOST="10.0.0.5")).status is Status.PASS
    local = make_context(AGENT_RUNTIME_ARN="", AGENT_URL="http://127.0.0.1:8080", GATEWAY_HOST="127.0.0.1")
    assert check_gateway_address(local).status is Status.PASS


def test_the_run_time_address_comes_from_slime_host_ip(make_context: MakeContext) -> None:
    result = check_gateway_address(make_context(environ={"SLIME_HOST_IP": "127.0.0.2"}))
    assert result.status is Status.FAIL and "127.0.0.2 (chosen at run time)" in result.found


def test_ray_ports_come_from_the_settings_when_the_schema_has_them(make_context: MakeContext) -> None:
    """RAY_PORT and friends are env-file keys once the Ray work (issue 12) lands; until then
    Ray's defaults are checked. The value is injected into the resolved settings here."""
    ctx = make_context()
    assert "port 6379 (Ray GCS)" in by_name(check_ports(ctx))["rollout.port.ray-gcs"].found
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ctx.config.values["RAY_PORT"] = port
        gcs = by_name(check_ports(ctx))["rollout.port.ray-gcs"]
    assert gcs.status is Status.WARN and f"port {port} (Ray GCS) is in use" in gcs.found
    assert "choose another RAY_PORT" in gcs.fix


def test_a_missing_package_is_named_with_its_install_not_an_env_fix(
    make_context: MakeContext, toy_model: Path, bin_dir: Path
) -> None:
    """The job's python runs the real probe with the renderers package made unimportable (as on
    a python where it was never installed): the fix installs it, it does not edit the env file."""
    blocker = (
        "import sys, runpy\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'renderers':\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, Missing())\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    (bin_dir / "blocker.py").write_text(blocker)
    python = stub(bin_dir, "python-without-renderers", f'exec {sys.executable} {bin_dir / "blocker.py"} "$@"')
    ctx = make_context(MODEL_DIR=str(toy_model), environ={"TOOLKIT_JOB_PYTHON": str(python)})
    result = check_renderer(ctx)
    assert result.status is Status.FAIL, result.line()
    assert "No module named 'renderers'" in result.found
    assert result.fix.startswith("the job's python lacks renderers: install")
    assert "RENDERER_FAMILY" not in result.fix


def test_a_gateway_on_every_interface_is_a_warning_that_says_what_reaches_it(
    make_context: MakeContext,
) -> None:
    """Issue 43: the gateway serves every interface by default, in plain HTTP; bin/doctor says so
    (WARN, not FAIL: whether the node's network is private is the operator's call)."""
    for host in (None, "0.0.0.0", "::"):
        settings = {"GATEWAY_PORT": "9090", "GATEWAY_PROCESSES": "2"}
        if host:
            settings["GATEWAY_HOST"] = host
        result = check_gateway_exposure(make_context(**settings))
        assert result.status is Status.WARN, host
        assert "serves every interface of this node" in result.found and "ports 9090-9091" in result.found
        assert "security group or firewall rule" in result.fix and "GATEWAY_TLS_CERT" in result.fix
        assert "in plain HTTP" in result.found
    tls = check_gateway_exposure(make_context(GATEWAY_TLS_CERT="/c.pem", GATEWAY_TLS_KEY="/k.pem"))
    assert tls.status is Status.WARN and "in HTTPS" in tls.found
    assert "session id in every URL" not in tls.found
    named = check_gateway_exposure(make_context(GATEWAY_HOST="10.0.0.5", GATEWAY_PORT="9090"))
    assert named.status is Status.PASS and "GATEWAY_HOST=10.0.0.5" in named.found
