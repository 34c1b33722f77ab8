"""bin/doctor's Ray security checks: RAY_AUTH, the RAY_TLS files (made here with openssl) and
the engines' unauthenticated HTTP; plus bin/train's refusal of RAY_TLS without its files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from agentcore_slime.doctor import ray_security
from agentcore_slime.preflight.report import Status
from agentcore_slime.settings.envfile import EnvEntry
from agentcore_slime.settings.errors import ConfigError
from agentcore_slime.settings.validate import resolve
from fakes.doctor_helpers import REPO, MakeContext, by_name


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, Path]:
    """A CA; a node key; certificates naming this node (good), another address, and expired."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl not on PATH (apt-get install openssl)")
    folder = tmp_path / "tls"
    folder.mkdir()
    ca, ca_key, key, csr = folder / "ca.crt", folder / "ca.key", folder / "node.key", folder / "node.csr"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=ca",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=node", "-keyout", str(key), "-out", str(csr)
    )
    files = {"ca": ca, "ca.key": ca_key, "key": key}
    here = ray_security.own_address()
    for name, days, san in (
        ("good", "1", f"IP:127.0.0.1,IP:{here}"),
        ("elsewhere", "1", "IP:10.255.255.1"),
        ("expired", "-1", f"IP:{here}"),
    ):
        ext = folder / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        out = folder / f"{name}.crt"
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
                 "-days", days, "-extfile", str(ext), "-out", str(out))  # fmt: skip
        files[name] = out
    key.chmod(0o600)
    ca_key.chmod(0o600)
    return files


def _tls(
    make_context: MakeContext, certs: dict[str, Path], cert: str = "good", key: str = "key", ca: str = "ca"
) -> str:
    ctx = make_context(
        RAY_TLS="true",
        RAY_TLS_CA_CERT=str(certs[ca]),
        RAY_TLS_SERVER_CERT=str(certs[cert]),
        RAY_TLS_SERVER_KEY=str(certs[key]),
    )
    result = ray_security.check_ray_tls(ctx)
    return f"{result.status.value} {result.found}"


def test_tls_files_that_work_pass(make_context: MakeContext, certs: dict[str, Path]) -> None:
    found = _tls(make_context, certs)
    assert found.startswith("PASS on:") and f"names this node ({ray_security.own_address()})" in found


@pytest.mark.parametrize(
    ("cert", "key", "ca", "expected"),
    [
        ("expired", "key", "ca", "certificate has expired"),
        ("elsewhere", "key", "ca", "IP address mismatch"),
        ("good", "ca.key", "ca", "is not the key of"),
        ("good", "key", "good", "unable to get local issuer certificate"),  # not signed by this "CA"
    ],
    ids=["expired", "other-address", "wrong-key", "other-ca"],
)
def test_tls_files_that_do_not_work_fail_naming_why(
    make_context: MakeContext, certs: dict[str, Path], cert: str, key: str, ca: str, expected: str
) -> None:
    found = _tls(make_context, certs, cert=cert, key=key, ca=ca)
    assert found.startswith("FAIL") and expected in found, found


def test_tls_key_readable_by_others_or_missing_file_fails(
    make_context: MakeContext, certs: dict[str, Path]
) -> None:
    certs["key"].chmod(0o644)
    assert "the private key" in _tls(make_context, certs) and "(mode 644)" in _tls(make_context, certs)
    certs["key"].chmod(0o600)
    certs["good"].unlink()
    assert _tls(make_context, certs).startswith("FAIL RAY_TLS_SERVER_CERT")


def test_tls_off_warns_on_more_than_one_node_only(make_context: MakeContext) -> None:
    assert ray_security.check_ray_tls(make_context()).status is Status.PASS
    result = ray_security.check_ray_tls(make_context(NUM_NODES="2"))
    assert result.status is Status.WARN and "crosses the network in cleartext" in result.found


def test_auth_none_and_the_engines_warn(make_context: MakeContext) -> None:
    results = by_name(ray_security.check_ray_security(make_context(RAY_AUTH="none")))
    assert results["ray.auth"].status is Status.WARN
    assert results["ray.engines"].status is Status.WARN and "on 127.0.0.1" in results["ray.engines"].found
    assert results["ray.router"].status is Status.WARN  # a shared-node exposure: the operator's call
    assert results["ray.router"].found.startswith("another local user can register a worker")
    assert "never the id itself" in results["ray.router"].found
    results = by_name(ray_security.check_ray_security(make_context(NUM_NODES="2")))
    assert results["ray.auth"].status is Status.PASS
    assert "anyone on the nodes' network" in results["ray.engines"].found
    assert results["ray.router"].found.startswith("anyone on the nodes' network can register")


def test_bin_train_refuses_ray_tls_without_its_files(tmp_path: Path) -> None:
    entries = {
        "EXP_ID": EnvEntry("e", 1),
        "S3_BUCKET": EnvEntry("my-bucket", 2),
        "AGENT_URL": EnvEntry("http://127.0.0.1:9", 3),
        "MODEL_DIR": EnvEntry("/m", 4),
        "DATA_PATH": EnvEntry("/d", 5),
        "MODEL_TYPE": EnvEntry("qwen2.5-3B", 6),
        "RAY_TLS": EnvEntry("true", 7),
        "RAY_TLS_CA_CERT": EnvEntry("/ca.crt", 8),
    }
    with pytest.raises(ConfigError, match="RAY_TLS=true needs RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY"):
        resolve(entries, {}, tmp_path / "exp.env", tmp_path / "runs")
    with pytest.raises(ConfigError, match="RAY_AUTH"):
        resolve(
            {**entries, "RAY_TLS": EnvEntry("false", 7), "RAY_AUTH": EnvEntry("off", 9)},
            {},
            tmp_path / "e",
            tmp_path / "r",
        )


def test_without_a_route_doctor_and_train_sh_fall_back_to_the_same_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No default route (an air-gapped node): the address bin/doctor names in its fix and the one
    train.sh's TLS check verifies (templates/lib/ray_helper.py) are both the host name's, as Ray's."""
    import importlib.util
    import socket

    from agentcore_slime import addresses

    spec = importlib.util.spec_from_file_location("ray_helper", REPO / "templates" / "lib" / "ray_helper.py")
    assert spec is not None and spec.loader is not None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)

    def unreachable(self: socket.socket, address: object) -> None:
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket.socket, "connect", unreachable)
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "10.9.8.7")
    assert helper.node_address("8.8.8.8") == addresses.own_address() == "10.9.8.7"
