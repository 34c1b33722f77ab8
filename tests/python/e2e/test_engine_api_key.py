"""Finding 9 of issue 23 where the toolkit starts SGLang itself (bin/eval): the server requires
a per-run API key, which is on no command line, and a second local user's ``POST /generate``
is refused.

The server is started the way eval.sh starts it: the library functions of templates/lib/sglang.sh
(``make_engine_api_key``, ``start_sglang_server`` with ``--config <private YAML>``,
``wait_for_sglang``, ``remove_engine_key_file``) running ``python3 -m sglang.launch_server``,
here the stand-in of tests/python/fakes/sglang_shim, which applies SGLang 0.5.13's key rule
(``--api-key`` read from the ``--config`` YAML; every route but /health* and /metrics* needs
``Authorization: Bearer <key>``). The owner's side is the gateway's real engine client, which
takes the key from ``TOOLKIT_ENGINE_API_KEY``.

Training's engines (started by slime) cannot require a key: docs/launcher.md, "Ray security:
tokens and TLS", says why; bin/doctor's ``ray.engines`` warns.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentcore_slime.gateway.engine import ENGINE_KEY_ENV, EngineClient
from fakes.ports import LIB
from fakes.shim_env import shim_env
from other_user import OtherUser

#: eval.sh's steps, from the library; the test reads the key from a 0600 file the driver
#: writes for it (eval.sh passes it only to its own evaluation, through the environment)
DRIVER = f"""
set -euo pipefail
source {LIB}/common.sh
source {LIB}/sglang.sh
install_eval_cleanup_trap
port=$(free_port)
make_engine_api_key
echo "${{TOOLKIT_ENGINE_KEY_FILES[0]}}" >"$OUT/key-file-path"
(umask 077 && printf '%s' "$TOOLKIT_ENGINE_API_KEY" >"$OUT/key-for-test")
start_sglang_server "$OUT/sglang.log" \\
  python3 -m sglang.launch_server --model-path "$OUT/model" --host 127.0.0.1 \\
  --config "${{TOOLKIT_ENGINE_KEY_FILES[0]}}" --port "$port"
wait_for_sglang "http://127.0.0.1:$port" 60
remove_engine_key_file
echo "$port $TOOLKIT_SERVER_PID" >"$OUT/ready"
sleep 600 &
wait $!
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[str, int, str, Path]]:
    """The server: (url, its pid, its key, the key file's path)."""
    env = shim_env(tmp_path)
    errors = tmp_path / "driver.err"
    with errors.open("w") as stderr:
        driver = subprocess.Popen(["bash", "-c", DRIVER], env=env, stderr=stderr)
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "ready").exists():
            assert driver.poll() is None, f"the driver exited: {errors.read_text()}"
            assert time.monotonic() < deadline, "the server did not become healthy"
            time.sleep(0.2)
        port, pid = (tmp_path / "ready").read_text().split()
        key = (tmp_path / "key-for-test").read_text()
        yield (
            f"http://127.0.0.1:{port}",
            int(pid),
            key,
            Path((tmp_path / "key-file-path").read_text().strip()),
        )
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(60)


GENERATE = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}})

#: what the other user runs: the system python, stdlib only; prints the HTTP status
PROBE = """
import sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode() or None, method=sys.argv[3],
                                 headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=10) as reply:
        print(reply.status)
except urllib.error.HTTPError as err:
    print(err.code)
"""


def _status(url: str, body: str = "", method: str = "POST", headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data=body.encode() or None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return err.code


def _cmdlines(pid: int) -> list[bytes]:
    """The command lines of ``pid`` and its descendants (the server and its "scheduler")."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            found.append(Path(f"/proc/{current}/cmdline").read_bytes())
            todo += [
                int(child) for child in Path(f"/proc/{current}/task/{current}/children").read_text().split()
            ]
        except OSError:
            continue
    return found


def test_a_second_local_user_cannot_generate_and_the_owner_can(
    engine: tuple[str, int, str, Path], other_user: OtherUser
) -> None:
    url, pid, key, key_file = engine
    # the other user reaches the server (health is open, as in SGLang) but is refused /generate
    theirs = other_user.run(["/usr/bin/python3", "-c", PROBE, f"{url}/health", "", "GET"])
    assert theirs.stdout.strip() == "200", theirs.stderr
    theirs = other_user.run(["/usr/bin/python3", "-c", PROBE, f"{url}/generate", GENERATE, "POST"])
    assert theirs.stdout.strip() == "401", theirs.stderr
    # so is anyone without the key, and with a wrong one
    assert _status(f"{url}/generate", GENERATE) == 401
    assert _status(f"{url}/generate", GENERATE, headers={"Authorization": "Bearer " + "0" * 64}) == 401
    assert _status(f"{url}/generate", GENERATE, headers={"Authorization": f"Bearer {key}"}) == 200

    async def owner() -> list[int]:  # the gateway's engine client, key from the environment
        client = EngineClient(url)
        await client.open()
        try:
            return (await client.generate([1, 2, 3], {"max_new_tokens": 3, "temperature": 0})).output_ids
        finally:
            await client.close()

    os.environ[ENGINE_KEY_ENV] = key
    try:
        assert asyncio.run(owner()) == [11, 12, 13]
    finally:
        del os.environ[ENGINE_KEY_ENV]
    assert "api_key" not in repr(EngineClient(url, api_key=key)) and key not in repr(
        EngineClient(url, api_key=key)
    )


def test_the_key_is_on_no_command_line_and_its_file_is_gone(engine: tuple[str, int, str, Path]) -> None:
    url, pid, key, key_file = engine
    lines = _cmdlines(pid)
    assert len(lines) >= 2  # the server and its child
    assert all(key.encode() not in line for line in lines)
    assert any(b"--config\0" + str(key_file).encode() in line for line in lines)  # only the path
    assert not key_file.exists()  # read by the server at start, then deleted
    assert len(key) == 64


def test_a_second_local_user_can_join_no_router_and_remove_no_engine(
    engine: tuple[str, int, str, Path], other_user: OtherUser
) -> None:
    """Issue 34: with sglang-router 0.3.2 in front of bin/eval's engines, a second user's
    ``POST /workers`` registered her worker (it then received the engine key and session ids)
    and ``DELETE /workers/{id}`` removed a real engine. bin/eval starts no router now (e2e
    test_bin_eval: no router.log, no sglang_router in its commands); what listens is the
    engines, and there every worker route is refused to her as /generate is."""
    url, _, _, _ = engine
    worker = json.dumps({"url": "http://127.0.0.1:1"})
    tries = (("/workers", worker, "POST"), ("/workers/w0", "", "DELETE"), ("/workers", "", "GET"))
    for path, body, method in tries:
        theirs = other_user.run(["/usr/bin/python3", "-c", PROBE, f"{url}{path}", body, method])
        assert theirs.stdout.strip() == "401", (path, theirs.stdout, theirs.stderr)
