"""Ports a test chooses for a server that another process binds later (an engine, moto, Ray,
a gateway pool), or for a URL where nothing must listen.

The kernel's pick for a bind to port 0, released at once, lies in its ephemeral range: any
test running beside it that binds port 0 or connects out can be handed that port before the
server binds it (the server then fails to start, or something else answers there). These are
picked as bin/eval picks its engines' ports (templates/lib/sglang_helper.py's ``free_port``):
outside that range, where only a process asking for the port by number gets it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType

#: templates/lib (the rendered scripts' helpers)
LIB = Path(__file__).resolve().parents[3] / "templates" / "lib"


@cache
def sglang_helper() -> ModuleType:
    """templates/lib/sglang_helper.py, imported from its file (as eval.sh runs it, not a package)."""
    spec = importlib.util.spec_from_file_location("sglang_helper", LIB / "sglang_helper.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port(taken: Iterable[int] = ()) -> int:
    """A port on 127.0.0.1 that nothing holds now, outside the ephemeral range, not in ``taken``."""
    return int(sglang_helper().free_port(frozenset(taken)))


def free_ports(count: int) -> list[int]:
    """``count`` distinct such ports."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port(ports))
    return ports


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive such ports (a gateway pool listens on PORT + i)."""
    ephemeral = sglang_helper().ephemeral_ports()
    taken: list[int] = []
    for _ in range(64):
        first = free_port(taken)
        rest = range(first + 1, first + count)
        if all(p < 65536 and p not in ephemeral and bindable(p) for p in rest):
            return first
        taken.append(first)
    raise AssertionError(f"no {count} consecutive free ports outside the ephemeral range {ephemeral}")


def bindable(port: int) -> bool:
    """Whether a socket can bind 127.0.0.1:``port`` now (the helper's own probe)."""
    return bool(sglang_helper().bindable(port))
