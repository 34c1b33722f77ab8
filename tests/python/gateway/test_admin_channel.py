"""Issue 43, finding 1: the parent talks to its gateway children over a channel no other user can
hold. A second local user (a real uid) who binds 127.0.0.1:PORT and PORT+1 before the run and
records every byte that reaches her gets nothing: no admin secret, no session id.

Before: with ``GATEWAY_HOST`` set to an address of the host, a child also listened on
127.0.0.1:PORT for its admin routes, went on with a WARNING when that bind failed, and the
parent sent every admin call (``X-Gateway-Admin-Secret``, ``{"op": "create", "session_id"}``)
to 127.0.0.1:PORT: to her. Now the admin routes answer only on a Unix socket in a 0700
directory of the parent's, and a child that cannot bind an address it must serve refuses to
start, saying which port is held.

The engine is the scripted SGLang stand-in (fakes.sglang_server); the gateway processes, their
admin channel and the relay's sockets are real.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentcore_slime.addresses import is_loopback, own_address
from agentcore_slime.gateway import GatewayConfig
from agentcore_slime.gateway.pool import GatewayPool
from fakes.other_user_relay import Relay
from fakes.sglang_server import FakeSGLang, text_policy
from other_user import OtherUser


def _free_pair() -> int:
    """A port P with P and P+1 free on every address (the relay takes them on 127.0.0.1)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", 0))
            port = int(probe.getsockname()[1])
        if port >= 65535:
            continue
        try:
            with socket.socket() as second:
                second.bind(("0.0.0.0", port + 1))
            return port
        except OSError:
            continue
    raise AssertionError("no two free consecutive ports")


def _host_address() -> str:
    """An address of this host other than 127.0.0.1 (the docs' GATEWAY_HOST advice): the one
    others reach it at, else another loopback address (both are served on 127.0.0.1 too)."""
    address = own_address()
    return address if address and not is_loopback(address) and ":" not in address else "127.0.0.2"


@pytest.fixture
def engine(tokenizer: Any) -> Iterator[FakeSGLang]:
    with FakeSGLang(text_policy(tokenizer, lambda text: "ok"), tokenizer=tokenizer) as fake:
        yield fake


def _start(model_dir: Path, engine: FakeSGLang, processes: int, **config: Any) -> GatewayPool:
    pool = GatewayPool(GatewayConfig(str(model_dir), **config), processes, ready_timeout=60)
    pool.start(engine.url)
    return pool


def test_a_relay_on_the_only_gateways_port_gets_nothing_and_the_run_refuses_to_start(
    other_user: OtherUser, model_dir: Path, engine: FakeSGLang
) -> None:
    """One gateway process, 127.0.0.1:PORT held by her."""
    port = _free_pair()
    relay = Relay(other_user, [port])
    try:
        # GATEWAY_HOST set to the host's address: refused, naming the port she holds
        with pytest.raises(RuntimeError) as refused:
            _start(model_dir, engine, 1, host=_host_address(), port=port)
        assert f"cannot also listen on 127.0.0.1:{port}" in str(refused.value)
        assert "another user's" in str(refused.value) and "GATEWAY_PORT" in str(refused.value)
        # GATEWAY_HOST unset (every interface): her socket holds the port on 127.0.0.1
        with pytest.raises(RuntimeError, match=f"cannot listen on 0.0.0.0:{port}"):
            _start(model_dir, engine, 1, port=port)
        seen = relay.seen()
    finally:
        relay.stop()
    assert seen == "", [json.loads(line)[:200] for line in seen.splitlines()]  # nothing at all


def test_a_relay_on_the_second_childs_port_gets_nothing_and_the_run_works_on_other_ports(
    other_user: OtherUser, model_dir: Path, engine: FakeSGLang
) -> None:
    """Two gateway processes, 127.0.0.1:PORT+1 held by her: child 0 starts, child 1 refuses and
    child 0 is stopped; on other ports the run works, its admin sockets out of her reach."""
    import stat

    port = _free_pair()
    relay = Relay(other_user, [port + 1])
    host = _host_address()
    try:
        with pytest.raises(RuntimeError, match=f"cannot also listen on 127.0.0.1:{port + 1}"):
            _start(model_dir, engine, 2, host=host, port=port)
        pool = _start(model_dir, engine, 2, host=host, port=0)
        try:
            sids = [str(uuid.uuid4()) for _ in range(4)]
            for sid in sids:
                base = pool.create_session(sid)
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                reply = httpx.post(f"{base}/chat/completions", json=body, timeout=30, trust_env=False)
                assert reply.status_code == 200
                assert len(pool.finish_session(sid)) == 1
            assert pool.stats()["sessions"] == 0
            secrets = [member.admin_headers["X-Gateway-Admin-Secret"] for member in pool.members]
            sockets = [member.admin_socket for member in pool.members]
            assert len(set(sockets)) == 2
            for path in sockets:  # each a socket of ours in a 0700 directory of ours
                assert stat.S_ISSOCK(Path(path).lstat().st_mode)
                directory = Path(path).parent.lstat()
                assert stat.S_IMODE(directory.st_mode) == 0o700
                assert directory.st_uid == Path("/proc/self").stat().st_uid
                listed = other_user.run(["ls", str(Path(path).parent)])
                assert listed.returncode != 0 and "Permission denied" in listed.stderr
        finally:
            pool.shutdown()
        assert not any(Path(path).parent.exists() for path in sockets)  # gone with the gateway
        seen = relay.seen()
    finally:
        relay.stop()
    assert all(secret not in seen for secret in secrets)
    assert all(sid not in seen for sid in sids)
    assert seen == "", [json.loads(line)[:200] for line in seen.splitlines()]  # nothing at all
