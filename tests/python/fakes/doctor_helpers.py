"""Shared helpers of bin/doctor's tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agentcore_slime.doctor import Context, Result

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "doctor"
JOB_SITE = FIXTURES / "job_site"

MakeContext = Callable[..., Context]


def by_name(results: list[Result]) -> dict[str, Result]:
    """Results keyed by check name.

    :param results: a check's results.
    """
    return {result.check: result for result in results}


def stub(bin_dir: Path, name: str, body: str, shell: str = "/bin/bash") -> Path:
    """An executable ``name`` in ``bin_dir`` running ``body``.

    :param bin_dir: the stub directory.
    :param name: the command's name.
    :param body: shell code.
    :param shell: the interpreter (by absolute path, so a stub of bash does not run itself).
    """
    path = bin_dir / name
    path.write_text(f"#!{shell}\n{body}\n")
    path.chmod(0o755)
    return path
