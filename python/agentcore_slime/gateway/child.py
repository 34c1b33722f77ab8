"""One gateway child process: started with its settings on its command line and its admin
secret on its stdin, its ready line read, its admin client, and its end (EOF on stdin, SIGTERM,
SIGKILL; its process group with it).

The admin client talks to the child over a Unix socket in a directory only this user can reach
(:func:`private_socket_dir`), never over TCP: a loopback port is anyone's to bind first, and
whoever held it would receive the admin secret and every session id.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import TYPE_CHECKING, Any

import httpx

from agentcore_slime.errors import ConfigError

from .config import ADMIN_SECRET_HEADER, GatewayConfig

if TYPE_CHECKING:
    from .channel import Channel

logger = logging.getLogger(__name__)

READY_PREFIX = "agentcore-gateway "  # the child's one stdout line starts with it (see __main__)
ADMIN_ORIGIN = "http://agentcore-gateway-admin"  # the admin client's base URL (its socket is a file)
SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path, with its NUL)
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL at shutdown
_START_ERRORS: dict[str, type[Exception]] = {
    "ConfigError": ConfigError,
    "ValueError": ValueError,
    "RuntimeError": RuntimeError,
    "OSError": OSError,
}


class _QuietAdminCalls(logging.Filter):
    """Drops httpx's INFO line per request for the admin calls (thousands a step in train.log)."""

    origins: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        url = str(args[1]) if len(args) > 1 else ""
        return not any(url.startswith(origin) for origin in self.origins)


_QUIET = _QuietAdminCalls()
logging.getLogger("httpx").addFilter(_QUIET)


def start_timeout(config: GatewayConfig) -> float:
    """How long the child may take to serve: the tokenizer and renderer load, then the engine's
    ``/health`` is tried ``engine_health_attempts`` times (each up to 30 s, 1 s apart)."""
    return 120.0 + 31.0 * config.engine_health_attempts


def how_it_died(returncode: int) -> str:
    """A child's exit status in words (``killed by SIGKILL (possibly out of memory)``)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        oom = " (possibly out of memory: see the kernel log, dmesg)" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{oom}"
    if returncode == 1:
        return "exited with status 1 (a Python error: see its traceback in the log)"
    return f"exited with status {returncode}"


_QUIET.origins.add(ADMIN_ORIGIN + "/")


def private_socket_dir() -> str:
    """A new directory for admin sockets that only this user can reach: ``mkdtemp`` makes it
    with a random name and mode 0700 (in ``TMPDIR``, or ``/tmp`` when a socket path there would
    be too long or others could rename entries of ``TMPDIR``: it is neither sticky nor closed
    to them). The caller removes it (:func:`remove_socket_dir`)."""
    parent = tempfile.gettempdir()
    if len(os.path.join(parent, "agentcore-gateway-XXXXXXXX", "admin-999.sock")) >= SOCKET_PATH_MAX:
        parent = "/tmp"
    mode = os.stat(parent).st_mode
    if mode & 0o022 and not mode & stat.S_ISVTX:  # others could rename the directory away
        parent = "/tmp"
    return tempfile.mkdtemp(prefix="agentcore-gateway-", dir=parent)


def remove_socket_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def check_socket_is_ours(path: str) -> None:
    """Refuse an admin socket that is not a socket of this user in a 0700 directory of this user.

    :raises RuntimeError: it is not (nothing is sent to it).
    """
    uid = os.geteuid()
    parent = os.lstat(os.path.dirname(path))
    sock = os.lstat(path)
    if not (
        stat.S_ISDIR(parent.st_mode)
        and parent.st_uid == uid
        and stat.S_IMODE(parent.st_mode) & 0o077 == 0
        and stat.S_ISSOCK(sock.st_mode)
        and sock.st_uid == uid
    ):
        raise RuntimeError(
            f"the gateway's admin socket {path} is not a socket of this user in a private directory "
            "(nothing was sent to it; set TMPDIR to a directory of yours)"
        )


class Child:
    """One started child: its process, admin client (over its Unix socket ``admin``) and URL."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        generation: int,
        url: str,
        admin: str,
        timeout: float,
        secret: str,
    ) -> None:
        self.proc = proc
        self.generation = generation  # children started before it, plus one
        self.url = url
        self.admin = admin  # the admin socket's path
        self.died = ""  # how it died, once it did
        self.client = httpx.Client(
            base_url=ADMIN_ORIGIN,
            transport=httpx.HTTPTransport(
                uds=admin, limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)
            ),
            timeout=httpx.Timeout(timeout, connect=5.0),
            trust_env=False,  # a proxy from the environment must not carry the admin calls
            headers={ADMIN_SECRET_HEADER: secret},
        )
        self.channel: Channel | None = None


def read_ready(proc: subprocess.Popen[bytes], timeout: float, what: str) -> dict[str, Any]:
    """The child's ready line, or its start-up error raised as the type ``Gateway.start`` raises.

    :param timeout: seconds it may take.
    :param what: what to check when it did not start in time (its model dir, its engine).
    """
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buffered = b""
    while True:
        lines = buffered.split(b"\n")
        for line in lines[:-1]:
            text = line.decode("utf-8", "replace")
            if text.startswith(READY_PREFIX):
                proc.stdout.close()
                return ready_or_raise(json.loads(text[len(READY_PREFIX) :]))
            sys.stderr.write(text + "\n")  # something printed to stdout before the line
        buffered = lines[-1]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(
                f"the gateway process (pid {proc.pid}) did not start serving within "
                f"{timeout:g} s: check its log lines above, {what}"
            )
        readable, _, _ = select.select([proc.stdout], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            try:
                how = how_it_died(proc.wait(STOP_TIMEOUT))
            except subprocess.TimeoutExpired:
                how = "closed its stdout"
            raise RuntimeError(
                f"the gateway process (pid {proc.pid}) {how} before it served (see its log lines above)"
            )
        buffered += chunk


def ready_or_raise(report: dict[str, Any]) -> dict[str, Any]:
    if "ready" in report:
        return report
    kind = _START_ERRORS.get(str(report.get("error")), RuntimeError)
    raise kind(str(report.get("message")))


def child_env() -> dict[str, str]:
    """The parent's environment; the child imports this very package.

    An installed package is found by the child as by the parent; a source tree the parent got
    on ``sys.path`` some other way (tests, a rollout run by hand) goes on ``PYTHONPATH``
    (never site-packages itself: ahead of the standard library it could shadow modules).
    """
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    installed = {os.path.abspath(p) for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))}
    if package_root not in installed:
        paths = [package_root, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a child: EOF on stdin and SIGTERM, SIGKILL after STOP_TIMEOUT; its group goes too."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            logger.warning("gateway process %d did not stop within %g s; killing it", proc.pid, STOP_TIMEOUT)
            proc.kill()
            proc.wait()
    kill_group(proc.pid)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
