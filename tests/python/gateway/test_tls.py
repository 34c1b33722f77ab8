"""Issue 43: the gateway serves HTTPS from a certificate and key named in the env file
(GATEWAY_TLS_CERT, GATEWAY_TLS_KEY), and agents trust a private certificate the way the docs
say (``SSL_CERT_FILE`` for the Python SDKs). The certificate is made here with openssl; the
gateway is the real one, the engine the scripted SGLang stand-in (fakes.sglang_server).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agentcore_slime.errors import ConfigError
from agentcore_slime.gateway import Gateway, GatewayConfig


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "gateway.pem", tmp_path / "gateway.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gateway",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    key.chmod(0o600)
    return cert, key


def test_the_gateway_serves_https_and_an_sdk_trusts_it_through_ssl_cert_file(
    make_stand: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _certificate(tmp_path)
    stand = make_stand(tls_cert=str(cert), tls_key=str(key))
    stand.script.replies += ["over TLS", "again"]
    assert stand.gateway.url.startswith("https://127.0.0.1:")
    base = stand.gateway.create_session("s")
    assert base.startswith("https://")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(f"{base}/chat/completions", json=body, verify=str(cert), timeout=30, trust_env=False)
    assert reply.json()["choices"][0]["message"]["content"] == "over TLS"
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what docs/launcher.md tells Python agents
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    client.close()
    assert answer.choices[0].message.content == "again"
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the port: no answer
        httpx.post(base.replace("https", "http") + "/chat/completions", json=body, timeout=5, trust_env=False)
    assert len(stand.gateway.traces("s")) == 2


def test_a_key_others_can_read_or_half_a_pair_is_refused(model_dir: Path, tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    key.chmod(0o644)
    with pytest.raises(ConfigError, match="is not a private file of yours .mode 0644") as refused:
        Gateway(GatewayConfig(str(model_dir), tls_cert=str(cert), tls_key=str(key))).start("http://127.0.0.1:1")
    assert f"chmod 600 {key}" in str(refused.value)
    with pytest.raises(ConfigError, match="go together"):
        Gateway(GatewayConfig(str(model_dir), tls_cert=str(cert))).start("http://127.0.0.1:1")
    key.chmod(0o600)
    with pytest.raises(ConfigError, match="cannot load GATEWAY_TLS_CERT"):
        Gateway(GatewayConfig(str(model_dir), tls_cert=str(key), tls_key=str(key))).start("http://127.0.0.1:1")
