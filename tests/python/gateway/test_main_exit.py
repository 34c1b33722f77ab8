"""The gateway's child process ends quietly when it is stopped right after a failed start.

A child that cannot start (its port taken) reports the error and returns; its parent stops it
at once with SIGTERM, which can land while the interpreter runs its atexit callbacks. The
SIGTERM handler then raised SystemExit inside a callback, and Python printed ``Exception
ignored in atexit callback ... SystemExit: 0`` above the rehearsal's own message. The SIGTERM
is sent here from an atexit callback of the child itself, so it always lands at that moment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[3] / "python"

_CHILD = """
import atexit, inspect, os, signal, sys, time
from agentcore_slime.gateway import __main__ as child, server

class Unstartable:
    def __init__(self, config, **secrets):
        pass
    def start(self, engine_url):
        raise OSError("cannot listen on 127.0.0.1:9090: [Errno 98] Address already in use")

server.Gateway = Unstartable
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(2)))
words = ["--engine-url", "http://127.0.0.1:9", "--config", sys.argv[1]]
if "--admin-socket" in inspect.getsource(child):  # the admin routes on a Unix socket (issue 43)
    words += ["--admin-socket", "/nonexistent/admin-1.sock"]
sys.exit(child.main(words))
"""


def test_a_sigterm_after_a_failed_start_prints_no_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(PYTHON_DIR)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps({"model_dir": "/nonexistent"})],
        input="s" * 40 + "\n", capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert '"error": "OSError"' in done.stdout  # the failure reached the parent's pipe
    assert "Exception ignored" not in done.stderr and "SystemExit" not in done.stderr, done.stderr
    assert done.returncode in (1, -15)  # exited with its status, or ended by the TERM
