"""What templates/lib/ray.sh asks python3 (standard library only), one subcommand each.

``token FILE``
    write a new random Ray token into FILE: a new file (O_EXCL, no link followed, mode 0600),
    then renamed over FILE; never printed, never on argv.
``tls-check CA CERT KEY PEER``
    exit non-zero with a reason unless a TLS handshake in memory, both ways as Ray's mutual TLS
    does, succeeds: KEY matches CERT, CERT is valid now and signed by CA, and CERT names this
    node's address (see :func:`node_address`).
``ports KEY=PORT...``
    print ``PORT (KEY)`` for every port that cannot be bound (another process listens on it).
``nodes``
    `ray list nodes --format=json` on stdin -> one line per node: ``STATE IP GPUS head|worker ID``.
``runtime-env``
    the job's Ray runtime env as JSON: PYTHONPATH (TOOLKIT_JOB_PYTHONPATH),
    CUDA_DEVICE_MAX_CONNECTIONS=1 and, when TOOLKIT_CUDA_PINNED is set, CUDA_HOME and
    LD_LIBRARY_PATH.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import sys


def write_token(path: str) -> None:
    """A new random token in ``path`` (mode 0600), written to a new file and renamed over it."""
    new = f"{path}.new.{os.getpid()}"
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))
    os.replace(new, path)


def node_address(peer: str) -> str:
    """The address this node's traffic to ``peer`` leaves from, as Ray picks its node address.

    connect() of a UDP socket sends no packet: the kernel only chooses the route (and so the
    source address) that a packet to ``peer`` would take. No route: the host name's address, as
    Ray falls back then (and bin/doctor's address, agentcore_slime.addresses), else 127.0.0.1.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((peer, 80))
            return str(probe.getsockname()[0])
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.getfqdn(socket.gethostname()))
    except OSError:
        return "127.0.0.1"


def _context(side: ssl._SSLMethod, ca: str, cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(cert, key)
    return ctx


def check_tls(ca: str, cert: str, key: str, peer: str) -> None:
    """Exit with a reason unless both ends of a mutual TLS handshake in memory succeed."""
    address = node_address(peer)
    try:
        client = _context(ssl.PROTOCOL_TLS_CLIENT, ca, cert, key)
        server = _context(ssl.PROTOCOL_TLS_SERVER, ca, cert, key)
    except ssl.SSLError as err:
        sys.exit(f"RAY_TLS: {key} is not the key of {cert}, or a file is not PEM ({err.reason})")
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    ends = [
        client.wrap_bio(pipes[0], pipes[1], server_hostname=address),
        server.wrap_bio(pipes[2], pipes[3], server_side=True),
    ]
    done = [False, False]
    try:
        for _ in range(10):
            for i, end in enumerate(ends):
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
            pipes[2].write(pipes[1].read())
            pipes[0].write(pipes[3].read())
            if all(done):
                break
    except ssl.SSLCertVerificationError as err:
        sys.exit(
            f"RAY_TLS: {cert} does not verify for this node's address {address} with the CA {ca}: "
            f"{err.verify_message}"
        )
    except ssl.SSLError as err:
        sys.exit(f"RAY_TLS: a TLS handshake with {cert} and the CA {ca} fails: {err.reason}")
    if not all(done):
        sys.exit("RAY_TLS: the TLS handshake check did not finish")


def busy_ports(items: list[str]) -> str:
    """``PORT (KEY) `` for each ``KEY=PORT`` of ``items`` that cannot be bound."""
    busy = ""
    for item in items:
        key, port = item.split("=")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("", int(port)))
            except OSError:
                busy += f"{port} ({key}) "
    return busy


def node_lines(nodes: list[dict[str, object]]) -> list[str]:
    """``STATE IP GPUS head|worker NODE_ID`` for each node of `ray list nodes --format=json`."""
    lines = []
    for node in nodes:
        resources = node.get("resources_total")
        gpus = int(float(str(resources.get("GPU", 0)))) if isinstance(resources, dict) else 0
        role = "head" if node["is_head_node"] else "worker"
        lines.append(f"{node['state']} {node['node_ip']} {gpus} {role} {node['node_id']}")
    return lines


def runtime_env() -> str:
    """The job's Ray runtime env as compact JSON (see the module's docstring)."""
    env = {"PYTHONPATH": os.environ["TOOLKIT_JOB_PYTHONPATH"], "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    if os.environ.get("TOOLKIT_CUDA_PINNED"):
        env.update(CUDA_HOME=os.environ["CUDA_HOME"], LD_LIBRARY_PATH=os.environ.get("LD_LIBRARY_PATH", ""))
    return json.dumps({"env_vars": env}, separators=(",", ":"))


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "token":
        write_token(args[0])
    elif command == "tls-check":
        check_tls(*args[:4])
    elif command == "ports":
        print(busy_ports(args), end="")
    elif command == "nodes":
        for line in node_lines(json.load(sys.stdin)):
            print(line)
    elif command == "runtime-env":
        print(runtime_env())
    else:
        sys.exit(f"ray_helper.py: unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
