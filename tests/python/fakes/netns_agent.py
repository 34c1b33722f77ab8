"""An agent in a network of its own: it reaches S3, the trainer reaches it, nothing else.

The usual ACR-to-node problem is that the agent's network has no route to the address the
gateway gives it. On one machine every local address is reachable, so this stand-in puts the
agent (the example math agent's ``AgentCoreRLApp`` under uvicorn) in a new network namespace
(``unshare --net``, which needs root, as CI has) with only its loopback up. Two doors, both Unix
sockets (files are shared across network namespaces), stand for what ACR does connect:

- invocations: the trainer's ``http://127.0.0.1:<port>`` is relayed to the agent's socket;
- S3: the agent's ``http://127.0.0.1:<port>`` inside the namespace is relayed to moto's server.

Any other address the agent dials, the gateway's included, refuses the connection, exactly as
an unrouted node refuses it (or drops it: the agent then times out instead).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

HERE = Path(__file__).resolve().parent
MATH_AGENT = HERE.parents[2] / "examples" / "math_agent"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def relay(open_target: Any) -> Any:
    """A connection handler that opens ``open_target()`` and copies bytes both ways."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await open_target()
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, target_writer), _pipe(target_reader, writer))
        except asyncio.CancelledError:  # the relay stops: both pipes closed their writers
            pass  # ended, not cancelled (3.11's stream callback raises on a cancelled handler)

    return handle


class NetnsAgent:
    """The math agent in its own network namespace; :attr:`url` is where the trainer invokes it.

    :param workdir: a directory for the two sockets.
    :param s3_url: moto's server (``http://127.0.0.1:<port>``).
    :param env: the agent's environment (AWS credentials; its S3 endpoint is set here).
    """

    def __init__(self, workdir: Path, s3_url: str, env: dict[str, str]) -> None:
        self.agent_socket = workdir / "agent.sock"
        self.s3_socket = workdir / "s3.sock"
        self.s3_port = int(s3_url.rsplit(":", 1)[1])
        self.env = env
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netns-relay", daemon=True)
        self._servers: list[asyncio.AbstractServer] = []
        self._process: subprocess.Popen[bytes] | None = None

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def start(self, timeout: float = 30.0) -> str:
        self._thread.start()
        to_s3 = relay(lambda: asyncio.open_connection("127.0.0.1", self.s3_port))
        self._servers.append(self._call(asyncio.start_unix_server(to_s3, path=str(self.s3_socket))))
        to_agent = relay(lambda: asyncio.open_unix_connection(str(self.agent_socket)))
        server = self._call(asyncio.start_server(to_agent, "127.0.0.1", 0))
        self._servers.append(server)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        inside_port = 18080  # any port: the namespace has nothing else
        env = {
            **self.env,
            "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{inside_port}",
            "PYTHONPATH": os.pathsep.join(
                [str(MATH_AGENT), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
            ),
        }
        self._process = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--fork",
                "--kill-child",
                sys.executable,
                "-m",
                "fakes.netns_agent",
                str(self.agent_socket),
                str(self.s3_socket),
                str(inside_port),
            ],
            env=env,
        )
        deadline = time.monotonic() + timeout
        while not self.agent_socket.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent in its namespace did not start (exit {self._process.poll()})")
            time.sleep(0.1)
        return self.url

    def stop(self) -> None:
        if self._process is not None:
            # unshare --fork ignores TERM while it waits; killed, it takes the agent with it
            # (--kill-child): both are this fixture's own processes, signalled by pid
            self._process.kill()
            self._process.wait(timeout=10)
        if self._thread.is_alive():
            self._call(self._close_relays())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _close_relays(self) -> None:
        """Stop listening and end every relayed connection, each socket closed on the loop.
        (Closing the servers alone left the connections' tasks to a stopped loop: their sockets
        and writers were collected later, in whichever test ran next, as ResourceWarnings.)"""
        for server in self._servers:
            server.close()
        current = asyncio.current_task()
        relays = [task for task in asyncio.all_tasks() if task is not current]
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        for _ in range(3):  # a closed transport lets go of its socket on the loop's next turn
            await asyncio.sleep(0)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _serve_inside(agent_socket: str, s3_socket: str, inside_port: int) -> None:
    """In the namespace: S3's door on loopback, the agent on its socket."""
    import agent as math_agent
    import uvicorn

    to_s3 = relay(lambda: asyncio.open_unix_connection(s3_socket))
    await asyncio.start_server(to_s3, "127.0.0.1", inside_port)
    config = uvicorn.Config(math_agent.create_app(), uds=agent_socket, log_level="warning")
    await uvicorn.Server(config).serve()


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2: set IFF_UP on ``lo`` (SIOCGIFFLAGS/SIOCSIFFLAGS)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(probe, siocgifflags, request))[1]
        fcntl.ioctl(probe, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


if __name__ == "__main__":  # the process unshare starts
    loopback_up()
    asyncio.run(_serve_inside(sys.argv[1], sys.argv[2], int(sys.argv[3])))
