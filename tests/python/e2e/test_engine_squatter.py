"""Issue 43, finding 2: bin/eval trusts an engine only when the socket on its port is held by
the process group it started, and each engine has its own key.

Before: eval.sh counted any 200 from ``/health`` on the engine's port. A second local user who
bound engine 1's port first was reported healthy, then got the run's one key (which also opened
engine 0) and the prompts of the sessions routed to her. Now: her socket's inode is in no
descriptor table of the engine's process group, so eval.sh stops, naming her uid, before it
sends anything there; and every engine has its own key.

The engines are started the way eval.sh starts them (templates/lib/sglang.sh's
``make_engine_api_key COUNT``, ``start_server``, ``wait_for_server``) running
``python3 -m sglang.launch_server``, here tests/python/fakes/sglang_shim (SGLang's key rule, the
scripted protocol on ``--port``). The squatter is a real second uid (other_user.py) running
fakes/other_user_relay.py.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from agentcore_slime.gateway.engine import EngineClient
from fakes.other_user_relay import Relay
from fakes.ports import LIB, free_ports
from fakes.shim_env import shim_env
from other_user import OtherUser

#: eval.sh's engine steps for two engines on PORT0 and PORT1; the keys go to a 0600 file of
#: the test's (eval.sh passes them only to its own evaluation, through the environment)
DRIVER = f"""
set -euo pipefail
source {LIB}/common.sh
source {LIB}/sglang.sh
TOOLKIT_HELPER_DIR={LIB}
TOOLKIT_PROG=eval.sh
install_eval_cleanup_trap
make_engine_api_key 2
(umask 077 && printf '%s' "$TOOLKIT_ENGINE_API_KEY" >"$OUT/keys")
for i in 0 1; do
  port_var=PORT$i
  start_server "SGLang engine $i" engine "$OUT/sglang-$i.log" \\
    python3 -m sglang.launch_server --model-path "$OUT/model" --host 127.0.0.1 \\
    --config "${{TOOLKIT_ENGINE_KEY_FILES[i]}}" --port "${{!port_var}}"
done
for i in 0 1; do
  port_var=PORT$i
  wait_for_server "$i" "http://127.0.0.1:${{!port_var}}" $((SECONDS + 60)) 60
done
remove_engine_key_file
touch "$OUT/ready"
sleep 600 &
wait $!
"""

def _driver(tmp_path: Path, ports: tuple[int, int]) -> subprocess.Popen[bytes]:
    env = shim_env(tmp_path, PORT0=str(ports[0]), PORT1=str(ports[1]), TOOLKIT_SERVER_GRACE="2")
    return subprocess.Popen(
        ["bash", "-c", DRIVER], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _status(url: str, key: str) -> int:
    request = urllib.request.Request(
        url, data=b'{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}', method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_an_engine_port_another_user_took_stops_the_evaluation_and_she_gets_nothing(
    tmp_path: Path, other_user: OtherUser
) -> None:
    ports = tuple(free_ports(2))
    squatter = Relay(other_user, [ports[1]])
    try:
        driver = _driver(tmp_path, ports)
        _, err = driver.communicate(timeout=120)
        stderr = err.decode()
        assert driver.returncode == 1, stderr
        assert not (tmp_path / "ready").exists()
        assert (
            f"port {ports[1]} of SGLang engine 1 is held by another process, uid {other_user.uid} "
            f"({other_user.name}), not by the server this script started: nothing was sent to it"
        ) in stderr
        assert "SGLang engine 0 is healthy" in stderr  # engine 0 was checked, and is ours
        assert "SGLang engine 1 is healthy" not in stderr
        received = squatter.seen()
    finally:
        squatter.stop()
    keys = (tmp_path / "keys").read_text().split(",")
    assert received == ""  # not even a health check: no connection at all
    assert all(key not in received for key in keys)
    # the engines were stopped on exit: nothing listens on engine 0's port any more
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", ports[0])) != 0


def test_each_engine_has_its_own_key(tmp_path: Path) -> None:
    ports = tuple(free_ports(2))
    driver = _driver(tmp_path, ports)
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "ready").exists():
            assert driver.poll() is None, driver.stderr.read().decode() if driver.stderr else ""
            assert time.monotonic() < deadline, "the engines did not become healthy"
            time.sleep(0.2)
        keys = (tmp_path / "keys").read_text().split(",")
        assert len(keys) == 2 and keys[0] != keys[1] and all(len(key) == 64 for key in keys)
        urls = [f"http://127.0.0.1:{port}/generate" for port in ports]
        assert [_status(urls[0], keys[0]), _status(urls[1], keys[1])] == [200, 200]
        # a key one engine's port leaked opens no other engine
        assert [_status(urls[0], keys[1]), _status(urls[1], keys[0])] == [401, 401]
        assert not list(tmp_path.glob("agentcore-sglang-key.*"))  # read at start, then deleted
        # the gateway's engine client sends each engine its own key (TOOLKIT_ENGINE_API_KEY
        # holds them in engine order, as eval.sh exports it)
        both = ",".join(f"http://127.0.0.1:{port}" for port in ports)

        async def generate_on_each() -> list[list[int]]:
            client = EngineClient(both, api_key=",".join(keys), retries=0)
            await client.open()
            try:
                await client.health(attempts=1)
                return [
                    (await client.generate([1, 2, 3], {"max_new_tokens": 3}, routing_key=f"{n:08x}"))
                    .output_ids
                    for n in (0, 1)  # the routing key's first digits pick engine n
                ]
            finally:
                await client.close()

        assert all(ids for ids in asyncio.run(generate_on_each()))
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(60)
        if driver.stderr is not None:
            driver.stderr.close()
