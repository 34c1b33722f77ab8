"""Finding 4 of issue 23, against the real Ray: a worker's traffic to the head's GCS carries
the Ray token; with ``RAY_TLS=true`` nobody on the path can read it.

A two-node run on one machine (bin/train's head, the rendered join.sh as the worker, as in
test_real_ray.py), with self-signed certificates made here with openssl (a CA, and one key and
certificate per node naming 127.0.0.1 and this machine's address). The worker joins the head
through a TCP proxy that records every byte both ways: the network between the nodes. The
proxy listens on this machine's address, not on 127.0.0.1: `ray start --address` replaces a
loopback head address with the node's own address before it connects. With TLS the token
occurs zero times in what the proxy saw; the control run without TLS (same proxy, same run)
shows the token crossing in cleartext, which proves the proxy sees it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import HANG_S, REPO, VENV_BIN, Cluster, Run, kill_leftovers, make_cluster

pytestmark = pytest.mark.timeout(600)

TRAIN = str(REPO / "bin" / "train")


class RecordingProxy:
    """A TCP proxy on ``host`` (its own thread and event loop) to ``target``, recording the
    bytes of every connection in both directions."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.host = host
        self.target = target
        self.seen = bytearray()
        self.connections = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(HANG_S), "proxy did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, self.host, 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                with self._lock:
                    self.seen += data
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    def captured(self) -> bytes:
        with self._lock:
            return bytes(self.seen)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(folder: Path, addresses: list[str]) -> dict[str, Path]:
    """A CA and, per node (head, worker), its own key and CA-signed certificate naming ``addresses``."""
    folder.mkdir(mode=0o700)
    files = {"ca": folder / "ca.crt"}
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test ray CA",
             "-keyout", str(folder / "ca.key"), "-out", str(files["ca"]))  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=" + ",".join(f"IP:{a}" for a in addresses) + "\n")
    for node in ("head", "worker"):
        key, csr, cert = folder / f"{node}.key", folder / f"{node}.csr", folder / f"{node}.crt"
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={node}",
            "-keyout",
            str(key),
            "-out",
            str(csr),
        )
        ca_args = ["-CA", str(files["ca"]), "-CAkey", str(folder / "ca.key"), "-CAcreateserial"]
        ext_args = ["-days", "1", "-extfile", str(folder / "san.ext")]
        _openssl("x509", "-req", "-in", str(csr), *ca_args, *ext_args, "-out", str(cert))
        key.chmod(0o600)
        files[f"{node}.key"], files[f"{node}.crt"] = key, cert
    return files


def machine_address() -> str:
    """The address Ray gives the head on this machine (its route to the outside, else loopback)."""
    out = subprocess.run(
        [str(VENV_BIN / "python"), "-c",
         "from ray._common.network_utils import node_ip_address_from_perspective as f; print(f())"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if shutil.which("ray", path=str(VENV_BIN)) is None:
        pytest.fail("ray not installed in this venv (pip install -r tests/requirements.txt)")
    if shutil.which("openssl") is None:
        pytest.fail("openssl not on PATH (apt-get install openssl)")
    made = make_cluster(tmp_path)
    yield made
    kill_leftovers(made)


def _two_node_run_through_proxy(
    cluster: Cluster, tls: bool
) -> tuple[bytes, RecordingProxy, dict[str, object]]:
    """bin/train's head and join.sh's worker, the worker joining through a recording proxy.

    :returns: the bytes the proxy saw, the proxy, and what the job saw (probe marker).
    """
    lines = [
        "NUM_NODES=2",
        "ROLLOUT_BATCH_SIZE=2",
        f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep 5",
    ]
    worker_env = dict(
        cluster.env,
        TOOLKIT_RAY_TEMP_DIR=str(cluster.worker_temp_dir),
        TOOLKIT_RAY_AGENT_PORT=str(cluster.worker_agent_port),
    )
    if tls:
        certs = make_certificates(cluster.root / "tls", sorted({"127.0.0.1", machine_address()}))
        lines += [
            "RAY_TLS=true",
            f"RAY_TLS_CA_CERT={certs['ca']}",
            f"RAY_TLS_SERVER_CERT={certs['head.crt']}",
            f"RAY_TLS_SERVER_KEY={certs['head.key']}",
        ]
        worker_env.update(
            TOOLKIT_RAY_TLS_SERVER_CERT=str(certs["worker.crt"]),
            TOOLKIT_RAY_TLS_SERVER_KEY=str(certs["worker.key"]),
        )
    env_file = cluster.write_env("exp.env", *lines)
    head = Run([TRAIN, "--skip-doctor", str(env_file)], cluster.env)
    worker: Run | None = None
    proxy: RecordingProxy | None = None
    try:
        command = head.worker_command()
        host, port = command[2].rsplit(":", 1)
        proxy = RecordingProxy(machine_address(), (host, int(port)))
        worker = Run([*command[:2], f"{proxy.host}:{proxy.port}"], worker_env)
        assert head.finish() == 0, head.output + "\n--- worker:\n" + worker.output
    finally:
        for run in (head, worker):  # a failed run stops here, not in another test's Ray
            if run is None:
                continue
            if run.proc.poll() is None:
                run.proc.send_signal(signal.SIGTERM)
            run.finish()  # also closes the output pipe of a run that ended by itself
        if proxy is not None:
            proxy.stop()
    assert worker is not None and proxy is not None
    if tls:
        assert "Ray TLS: on" in head.output and "Ray TLS: on" in worker.output, worker.output
    else:
        assert "warning: RAY_TLS is off on a 2-node run" in head.output
    return proxy.captured(), proxy, json.loads(cluster.marker.read_text())


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "cleartext-control"])

def test_token_never_crosses_the_proxy_in_cleartext_with_tls(cluster: Cluster, tls: bool) -> None:
    captured, proxy, seen = _two_node_run_through_proxy(cluster, tls)
    token = cluster.token_file.read_bytes()
    assert len(token) >= 32
    assert seen["alive_nodes"] == 2 and seen["gpus"] == 2.0, seen  # the worker really joined
    assert proxy.connections >= 1 and len(captured) > 4096, (proxy.connections, len(captured))
    occurrences = captured.count(token)
    print(f"tls={tls}: {len(captured)} bytes over {proxy.connections} connections, token x{occurrences}")
    if tls:
        assert occurrences == 0
        assert captured[:1] == b"\x16"  # the first byte on the wire: a TLS handshake record
    else:
        assert occurrences > 0  # the control: without TLS the proxy reads the token
    assert os.stat(cluster.token_file).st_mode & 0o077 == 0
