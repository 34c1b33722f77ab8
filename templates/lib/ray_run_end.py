"""The head's word to its workers that its run ended (not a crash), for templates/lib/ray.sh.

A key in Ray's internal key-value store, which the workers' join.sh polls. ray._raylet.GcsClient
talks to the GCS directly (no driver), authenticated like every ray command (RAY_AUTH_MODE, the
token file). It runs on the python3 that has Ray (slime's environment).

``put ADDRESS STATUS``
    the head: put the key (its value: the run's exit status).
``watch ADDRESS POLL PARENT``
    a worker: exit 0 once the key is there (looked for every POLL seconds); an unreachable GCS
    is no answer. Dies with PARENT (join.sh), never outliving it.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
import time

#: Ray's client of its GCS (a Cython class that Ray's type stubs do not name)
GcsClient = importlib.import_module("ray._raylet").GcsClient
KEY, NAMESPACE = b"run-ended", b"agentcore-slime"


def watch(address: str, poll: float, parent: int) -> None:
    """Return once the key is there; exit 1 when ``parent`` is already gone."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive join.sh
    if os.getppid() != parent:
        sys.exit(1)
    client = None
    while True:
        try:
            client = client or GcsClient(address=address)
            if client.internal_kv_get(KEY, NAMESPACE, timeout=5) is not None:
                return
        except Exception:
            client = None
        time.sleep(poll)


def main(argv: list[str]) -> None:
    mode, address = argv[0], argv[1]
    if mode == "put":
        GcsClient(address=address).internal_kv_put(KEY, argv[2].encode(), True, NAMESPACE)
    else:
        watch(address, float(argv[2]), int(argv[3]))


if __name__ == "__main__":
    main(sys.argv[1:])
