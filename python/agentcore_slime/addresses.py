"""This host's network addresses: which one other hosts reach it at, and whether one is loopback.

One answer for every layer that asks: the gateway (the address it advertises to agents, and the
loopback test of its admin routes), bin/train's gate and bin/doctor (the address the gateway will
take when GATEWAY_HOST is unset, and whether agents on ACR can reach it), and bin/doctor's Ray TLS
check (the address a node's certificate must name). Stdlib only: the launchers import it.
"""

from __future__ import annotations

import ipaddress
import socket

#: the peer whose route the probe asks for: slime's ``get_host_info`` and Ray's node address ask
#: for the same one, so the gateway, slime's router and Ray agree on this node's address
ROUTE_PEER_V4 = "8.8.8.8"
ROUTE_PEER_V6 = "2001:4860:4860::8888"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address, possibly with an IPv6 zone, or a name it resolves to) is
    this machine's loopback; False for None and for what is neither.

    :param host: an address or a host name.
    """
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError, UnicodeError):
        return False


def own_address(family: socket.AddressFamily = socket.AF_INET) -> str:
    """The address this node's traffic to the outside leaves from (no packet is sent: a UDP
    connect only picks a route).

    IPv4 falls back to the host name's address (as Ray does), then 127.0.0.1; IPv6 returns ""
    when this host has no IPv6 route.

    :param family: ``AF_INET`` or ``AF_INET6``.
    """
    peer = ROUTE_PEER_V4 if family == socket.AF_INET else ROUTE_PEER_V6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((peer, 80))
            address = str(probe.getsockname()[0]).split("%")[0]
    except OSError:
        address = ""
    if family == socket.AF_INET6:
        return "" if address in ("", "::") else address
    if address and not address.startswith("0."):
        return address
    try:
        return socket.gethostbyname(socket.getfqdn(socket.gethostname()))
    except OSError:
        return "127.0.0.1"


def url_host(address: str) -> str:
    """An address as the host part of a URL: IPv6 literals go in brackets.

    :param address: an address or a host name.
    """
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
