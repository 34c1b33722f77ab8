"""What templates/lib/sglang.sh asks python3 (standard library only), one subcommand each.

``health URL``
    exit 0 when GET URL/health answers 200 within 5 seconds.
``ready URL PGID``
    whether the engine this script started in process group PGID serves URL (``http://127.0.0.1:PORT``):
    exit 0 when the socket listening on PORT is held by a process of that group (its inode among
    their ``/proc/PID/fd``; where those cannot be read, the socket's owner uid in /proc/net/tcp is
    this user's) and then ``/health`` answers 200; 3 while nothing listens there or it is not
    healthy yet; 4 when another process holds the port (printed: its owner), and then nothing
    has been sent to it.
``free-port [TAKEN...]``
    a port on 127.0.0.1 that nothing holds, chosen outside the kernel's ephemeral range and
    Ray's worker ports and not among TAKEN (ports this script already chose), printed.
``api-key FILE``
    a random API key for the SGLang servers: written into FILE (a private YAML that mktemp made,
    given to SGLang with --config) as ``api-key: KEY`` and printed once (never on argv).
"""

from __future__ import annotations

import os
import pwd
import random
import secrets
import socket
import sys
import urllib.parse
import urllib.request

LISTEN = "0A"  # the LISTEN state in /proc/net/tcp
#: local addresses in /proc/net/tcp{,6} (kernel hex) at which a connection to 127.0.0.1 arrives
_REACHES_127_0_0_1 = {"0100007F", "00000000", "0" * 32, "0000000000000000FFFF00000100007F"}


#: the kernel's ephemeral ports: what a bind to port 0 and an outgoing connection are given
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: ports below this are left to services (Ray's 6379 and 8265, the gateway's 9090, ...) and to
#: Ray's worker ports, 10002-19999 (ray start's defaults; RAY_WORKER_PORTS in settings/validate.py)
LOWEST_PICKED_PORT = 20000
PICK_TRIES = 64


def ephemeral_ports(path: str = EPHEMERAL_RANGE_FILE) -> range:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        with open(path, encoding="ascii") as text:
            low, high = (int(word) for word in text.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def bindable(port: int) -> bool:
    """Whether a socket can bind 127.0.0.1:``port`` now."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(taken: frozenset[int] = frozenset(), ephemeral: range | None = None) -> int:
    """A port on 127.0.0.1 that nothing holds now, outside the ephemeral range and Ray's worker
    ports. SGLang binds its port only after loading the weights, minutes after the port is
    picked and released: an ephemeral port can meanwhile be handed to any process that binds
    port 0 or connects out (ready then finds it held, and the evaluation stops); a port outside
    that range is taken only by a process that asks for it by number. Where the ephemeral
    range leaves nothing (an administrator widened it to every port), the kernel's pick.

    :param taken: ports already chosen for this script's other engines (not bound yet either).
    """
    ephemeral = ephemeral if ephemeral is not None else ephemeral_ports()
    candidates = [
        port
        for port in range(LOWEST_PICKED_PORT, 65536)
        if port not in ephemeral and port not in taken
    ]
    for port in random.sample(candidates, min(PICK_TRIES, len(candidates))):
        if bindable(port):
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(url: str) -> bool:
    """True when ``url``/health answers 200 within 5 seconds."""
    with urllib.request.urlopen(url + "/health", timeout=5) as reply:
        return bool(reply.status == 200)


def listeners(port: int) -> list[tuple[int, int]]:
    """(inode, owner uid) of each socket listening on ``port`` where 127.0.0.1 reaches it."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as lines:
                rows = [line.split() for line in lines.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            address, _, hex_port = row[1].partition(":")
            if row[3] == LISTEN and int(hex_port, 16) == port and address in _REACHES_127_0_0_1:
                found.append((int(row[9]), int(row[7])))
    return found


def group_sockets(pgid: int) -> tuple[set[int], bool]:
    """The socket inodes the processes of group ``pgid`` hold, and whether every one of their
    descriptor tables could be read."""
    inodes: set[int] = set()
    complete = True
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # the fields after the name: state, ppid, pgrp
                continue
            for fd in os.listdir(f"/proc/{name}/fd"):
                target = os.readlink(f"/proc/{name}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        except FileNotFoundError:
            continue  # it exited meanwhile
        except PermissionError:
            complete = False
    return inodes, complete


def holder(port: int, pgid: int) -> str | None:
    """None when every listener on ``port`` is of group ``pgid`` (or there is none); else who
    holds it, in words."""
    ours, complete = group_sockets(pgid)
    me = os.geteuid()
    for inode, uid in listeners(port):
        if inode in ours or (not complete and uid == me):
            continue
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = "unknown"
        mine = " (a process of yours that this script did not start)" if uid == me else ""
        return f"uid {uid} ({name}){mine}"
    return None


def ready(url: str, pgid: int) -> int:
    """0: ours and healthy; 3: not yet; 4: another process holds the port (printed)."""
    port = urllib.parse.urlsplit(url).port or 80
    if not listeners(port):
        return 3
    other = holder(port, pgid)
    if other is not None:
        print(other)
        return 4
    try:
        return 0 if healthy(url) else 3
    except OSError:
        return 3


def make_key(path: str) -> str:
    """A new key, written into ``path`` (mktemp made it: ours, 0600) as SGLang's --config YAML."""
    key = secrets.token_hex(32)
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"api-key: {key}\n")
    return key


def main(argv: list[str]) -> None:
    if argv[0] == "health":
        sys.exit(0 if healthy(argv[1]) else 1)
    elif argv[0] == "ready":
        sys.exit(ready(argv[1], int(argv[2])))
    elif argv[0] == "free-port":
        print(free_port(frozenset(int(port) for port in argv[1:])))
    elif argv[0] == "api-key":
        print(make_key(argv[1]))
    else:
        sys.exit(f"sglang_helper.py: unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
