"""``python -m agentcore_slime.gateway``: the gateway as a child process of the rollout.

Started by :class:`~.process.GatewayProcess`, never by hand::

    python -m agentcore_slime.gateway --engine-url http://10.0.0.5:3000 --config '{"model_dir": ...}' \
        --admin-socket /tmp/agentcore-gateway-XXXXXXXX/admin-1.sock

Its first stdin line is the run's admin secret (the parent makes it; it is never on the command
line, where other users read it in /proc, nor in the environment). It starts a
:class:`~.server.Gateway` from the JSON ``GatewayConfig`` and that secret, serves the admin
routes on the Unix socket ``--admin-socket`` only (in the parent's private directory: another
user can neither connect to it nor bind it first), and writes one line to stdout:
``agentcore-gateway {"ready": url, "admin": socket path, "pid": pid}`` once it serves,
or ``agentcore-gateway {"error": kind, "message": ...}`` when ``Gateway.start`` fails (kind:
``ConfigError``, ``ValueError``, ``RuntimeError`` or ``OSError``; exit status 1). Log lines go
to the inherited stderr. It serves until its stdin reaches end of file (the parent closed it,
or died: even a SIGKILLed parent leaves no gateway behind) or it gets SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

from agentcore_slime.errors import ConfigError

from .child import READY_PREFIX

ERROR_KINDS = (ConfigError, ValueError, RuntimeError, OSError)  # most specific first


SWITCH_INTERVAL = 0.001  # seconds a thread may hold the GIL while another waits


def _report(stream: Any, message: dict[str, Any]) -> None:
    stream.write(READY_PREFIX + json.dumps(message) + "\n")
    stream.flush()


def _error_kind(err: BaseException) -> str:
    return next((kind.__name__ for kind in ERROR_KINDS if isinstance(err, kind)), "RuntimeError")


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    _exit_quietly_on_sigterm()
    raise SystemExit(0)


def _exit_quietly_on_sigterm() -> None:
    """From here on a SIGTERM just ends the process: raised as SystemExit inside an atexit
    callback (the parent stops a child that reported an error at once) it prints a traceback."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _read_secret() -> str:
    """The admin secret: stdin's first line (read byte by byte: the rest of stdin is the
    parent-death watch)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(sys.stdin.fileno(), 1)
        if not byte:
            raise RuntimeError("stdin closed before the admin secret line (started by GatewayProcess only)")
        line += byte
    secret = line.decode().strip()
    if len(secret) < 32:
        raise RuntimeError("the admin secret line is shorter than 32 characters")
    return secret


def _wait_for_parent() -> None:
    """Block until stdin reaches end of file: the parent closed its end or died."""
    while os.read(sys.stdin.fileno(), 4096):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentcore_slime.gateway")
    parser.add_argument("--engine-url", required=True)
    parser.add_argument("--config", required=True, help="GatewayConfig fields as a JSON object")
    parser.add_argument("--admin-socket", required=True, help="the admin routes' Unix socket (a new path)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s gateway[{os.getpid()}] %(name)s: %(message)s",
    )
    ready = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not fill a pipe nobody reads after the ready line
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # The event loop shares the GIL with the render threads: a thread that holds it keeps the
    # loop waiting up to the switch interval (5 ms by default). The process is the gateway's
    # alone, so a shorter interval costs nothing else.
    sys.setswitchinterval(SWITCH_INTERVAL)
    from .config import GatewayConfig
    from .memory import defer_full_collections
    from .server import Gateway

    defer_full_collections()

    gateway: Gateway | None = None
    try:
        secret = _read_secret()
        config = GatewayConfig(**json.loads(args.config))
        gateway = Gateway(config, admin_secret=secret, admin_socket=args.admin_socket)
        gateway.start(args.engine_url)
    except Exception as err:  # noqa: BLE001 - every start-up failure is reported to the parent
        _exit_quietly_on_sigterm()
        _report(ready, {"error": _error_kind(err), "message": str(err) or type(err).__name__})
        return 1
    try:
        _report(ready, {"ready": gateway.url, "admin": args.admin_socket, "pid": os.getpid()})
        ready.close()
        _wait_for_parent()
    finally:
        gateway.shutdown()
        # a SIGTERM while Python joins its threads at exit (the parent stops the child as it
        # ends) must just end it: raised there, SystemExit prints a traceback into the rehearsal
        _exit_quietly_on_sigterm()
    return 0


if __name__ == "__main__":
    sys.exit(main())
