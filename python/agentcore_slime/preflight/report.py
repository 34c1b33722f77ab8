"""What a doctor check found: one :class:`Result` per line, printed as text or JSON.

A result is PASS, WARN or FAIL, says what was found, and for WARN/FAIL how to fix it.
``bin/doctor`` exits 0 when nothing failed and 1 otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import Enum


class Status(Enum):
    """The verdict of one check."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Result:
    """One line of the report.

    :param check: dotted name, ``<group>.<what>`` (e.g. ``model.norm-epsilon``).
    :param status: PASS, WARN or FAIL.
    :param found: what the check found (values, counts, paths).
    :param fix: how to fix a WARN or FAIL ("" for PASS).
    """

    check: str
    status: Status
    found: str
    fix: str = ""

    def line(self) -> str:
        """The result as one line of text: ``STATUS check: found (fix: how)``."""
        text = f"{self.status.value} {self.check}: {self.found}"
        if self.fix and self.status is not Status.PASS:
            text += f" (fix: {self.fix})"
        return " ".join(text.split("\n"))


def passed(check: str, found: str) -> Result:
    """A PASS result.

    :param check: the check's name.
    :param found: what was found.
    """
    return Result(check, Status.PASS, found)


def warned(check: str, found: str, fix: str) -> Result:
    """A WARN result: the run may work, but likely not as intended.

    :param check: the check's name.
    :param found: what was found.
    :param fix: how to fix it.
    """
    return Result(check, Status.WARN, found, fix)


def failed(check: str, found: str, fix: str) -> Result:
    """A FAIL result: the run would fail or train the wrong thing.

    :param check: the check's name.
    :param found: what was found.
    :param fix: how to fix it.
    """
    return Result(check, Status.FAIL, found, fix)


def count(results: Iterable[Result], status: Status) -> int:
    """How many results have ``status``.

    :param results: the results.
    :param status: the status to count.
    """
    return sum(1 for result in results if result.status is status)


def summary(results: list[Result]) -> str:
    """``N passed, N warnings, N failed``.

    :param results: every result of the run.
    """
    return (
        f"{count(results, Status.PASS)} passed, {count(results, Status.WARN)} warnings, "
        f"{count(results, Status.FAIL)} failed"
    )


def as_json(results: list[Result]) -> str:
    """The report as one JSON document (the same content as the text lines).

    :param results: every result of the run.
    """
    checks = [{**asdict(result), "status": result.status.value} for result in results]
    document = {
        "checks": checks,
        "passed": count(results, Status.PASS),
        "warnings": count(results, Status.WARN),
        "failed": count(results, Status.FAIL),
    }
    return json.dumps(document, indent=1)


def exit_status(results: list[Result]) -> int:
    """0 when no result failed, 1 otherwise.

    :param results: every result of the run.
    """
    return 1 if count(results, Status.FAIL) else 0
