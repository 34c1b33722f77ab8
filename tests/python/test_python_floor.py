"""One python floor everywhere: the package's ``requires-python`` (python/pyproject.toml).

Every place that states or checks a minimum python (bin/ help, the shared finder
libexec/python.bash, tests/run, the doctor's job-python check, the README and docs/) must
name the same version. The places are found by their wording in the files git tracks, so a
new mention with another version fails here. The finder's probe itself is exercised on a
python reporting 3.10 and 3.11 in tests/bats/python_finder.bats.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: how a floor is written: ``>= 3.11`` standing alone (``python3 >= 3.11``, ``(>= 3.11``, ``is
#: >= 3.11``; not a requirement string's ``orjson>=3.10``), ``older than Python 3.11``,
#: ``TOOLKIT_PYTHON_FLOOR=3.11``, ``version_info < (3, 11)``, ``PYTHON_FLOOR = (3, 11)``
FLOOR_PATTERNS = (
    re.compile(r"(?<![\w.=])>=\s*(3\.\d+)"),
    re.compile(r"older than Python (3\.\d+)"),
    re.compile(r"PYTHON_FLOOR=(3\.\d+)"),
    re.compile(r"version_info < \((3), (\d+)\)"),
    re.compile(r"PYTHON_FLOOR = \((3), (\d+)\)"),
)
#: where a floor is stated (tests state versions to play with, the installer the slime stack's range)
SCANNED = ("bin/", "libexec/", "python/agentcore_slime/", "docs/", "README.md", "tests/run", "examples/")


def package_floor() -> str:
    text = (REPO / "python" / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^requires-python = ">=(3\.\d+)"$', text, re.MULTILINE)
    assert match, "python/pyproject.toml has no requires-python >=3.x"
    return match.group(1)


def stated_floors() -> list[tuple[str, int, str]]:
    """(file, line, version) of every floor the scanned tracked files state."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", *SCANNED],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in listed:
        try:
            lines = (REPO / name).read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(lines, 1):
            for pattern in FLOOR_PATTERNS:
                for match in pattern.finditer(line):
                    found.append((name, number, ".".join(match.groups())))
    return found


def test_every_stated_python_floor_is_the_packages() -> None:
    floor = package_floor()
    found = stated_floors()
    places = {name for name, _, _ in found}
    # the places issue 27 named: each must state the floor (a rewording that escapes the
    # patterns would otherwise pass unnoticed)
    required_places = (
        "bin/train",
        "bin/report",
        "libexec/python.bash",
        "tests/run",
        "README.md",
        "docs/launcher.md",
        "python/agentcore_slime/doctor/environment.py",
    )
    for required in required_places:
        assert required in places, f"{required} states no python floor the patterns recognise"
    wrong = [f"{name}:{number}: {version}" for name, number, version in found if version != floor]
    assert not wrong, f"python floors other than the package's {floor}:\n" + "\n".join(wrong)
