"""SGLang 0.5.13 itself, in the virtualenv of its own that tests/run makes (``.venv-sglang``, or
``TOOLKIT_SGLANG_VENV``; tests/requirements-sglang.txt): its python, and a probe script run there
that answers one JSON line. In CI a missing venv fails the test; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakes.renders import REPO


def sglang_python() -> Path:
    """The python of ``.venv-sglang`` (the test fails in CI, else skips, when it is missing)."""
    venv = Path(os.environ.get("TOOLKIT_SGLANG_VENV") or REPO / ".venv-sglang")
    python = venv / "bin" / "python"
    if not python.is_file():
        message = f"{venv} is missing: tests/run makes it (SGLang 0.5.13, tests/requirements-sglang.txt)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def ask_sglang(probe: Path, cases: Any) -> dict[str, Any]:
    """The probe's answer to ``cases`` (JSON on its stdin): its last stdout line, read as JSON,
    from SGLang 0.5.13."""
    done = subprocess.run(
        [str(sglang_python()), str(probe)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reply = json.loads(done.stdout.splitlines()[-1])
    assert reply["version"] == "0.5.13"
    return dict(reply)
