"""templates/lib/sglang_helper.py's port pick (eval.sh's ``free_port`` with SGLANG_PORT=0).

Before: the port was the kernel's pick for a bind to port 0, released at once; SGLang binds it
only after loading the weights. In a CI run eval.bats' engine port was meanwhile handed to
another process of the suite binding port 0, and eval.sh, which trusts only a listener of its
own process group (issue 43), stopped: "port 34303 of the SGLang server is held by another
process". Now the pick lies outside the kernel's ephemeral range, where no bind to port 0 and
no outgoing connection is ever given a port.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from fakes.ports import LIB, bindable, sglang_helper


def test_the_pick_is_outside_the_ephemeral_range_and_rays_worker_ports() -> None:
    """As eval.sh runs it: 20 picks, each free, none where the kernel hands out ports (which is
    where its own pick for port 0 always lies)."""
    helper = sglang_helper()
    ephemeral = helper.ephemeral_ports()
    with socket.socket() as kernels:
        kernels.bind(("127.0.0.1", 0))
        assert kernels.getsockname()[1] in ephemeral  # the old pick's range
    for _ in range(20):
        out = subprocess.run(
            [sys.executable, str(LIB / "sglang_helper.py"), "free-port"],
            capture_output=True, text=True, check=True, timeout=60,
        )
        port = int(out.stdout)
        assert port >= 20000 and port not in ephemeral and port not in range(10002, 20000)
        assert bindable(port)


def test_a_held_port_and_the_ports_already_chosen_are_passed_over() -> None:
    """Only two ports left to choose from, one held by a listener: the other is picked; with it
    among the ports already chosen for another engine, the kernel's pick."""
    helper = sglang_helper()
    free = [port for port in range(65535, 60000, -1) if bindable(port)][:2]
    held_port, left = free
    others = frozenset(range(60000, 65536)) - {held_port, left}
    with socket.socket() as held:
        held.bind(("127.0.0.1", held_port))
        held.listen()
        ephemeral = range(20000, 60000)
        assert helper.free_port(others, ephemeral) == left
        fallback = helper.free_port(others | {left}, ephemeral)
        assert fallback not in (held_port, left) and fallback in helper.ephemeral_ports()


def test_an_ephemeral_range_of_every_port_leaves_the_kernels_pick(tmp_path: Path) -> None:
    """An administrator who widened the ephemeral range to every port: nothing is outside it,
    so the kernel picks (as before); a range file that cannot be read reads as Linux's default."""
    helper = sglang_helper()
    wide = tmp_path / "ip_local_port_range"
    wide.write_text("1024\t65535\n")
    assert helper.ephemeral_ports(str(wide)) == range(1024, 65536)
    assert 1024 <= helper.free_port(ephemeral=helper.ephemeral_ports(str(wide))) <= 65535
    assert helper.ephemeral_ports(str(tmp_path / "missing")) == range(32768, 61000)
