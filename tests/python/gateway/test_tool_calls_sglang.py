"""The gateway's tool-call parsing against SGLang 0.5.13's own, on each family's native texts.

``sglang_tool_probe.py`` runs in ``.venv-sglang`` (made by ``tests/run`` from
tests/requirements-sglang.txt, as for test_sglang_flags.py) and reads each text with SGLang's
``FunctionCallParser`` and the detector of the same name, as its chat server does. The gateway's
:func:`parse_tool_calls` must give the same content and the same calls (names and argument
JSON, string for string) on every text, valid or malformed; and it must report every malformed
one, which SGLang only logs. In CI a missing venv fails the test; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.gateway.tool_calls import FORMATS, parse_tool_calls
from agentcore_slime.settings.schema import TOOL_CALL_PARSERS
from tool_call_texts import MALFORMED, TOOLS, VALID

PROBE = Path(__file__).with_name("sglang_tool_probe.py")
REPO = Path(__file__).resolve().parents[3]
CASES = [
    (parser, kind, name, text)
    for kind, table in (("valid", VALID), ("malformed", MALFORMED))
    for parser, texts in table.items()
    for name, text in texts.items()
]


def _sglang_python() -> Path:
    venv = Path(os.environ.get("TOOLKIT_SGLANG_VENV") or REPO / ".venv-sglang")
    python = venv / "bin" / "python"
    if not python.is_file():
        message = f"{venv} is missing: tests/run makes it (SGLang 0.5.13, tests/requirements-sglang.txt)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture(scope="module")
def sglang() -> dict[str, Any]:
    cases = [{"parser": parser, "text": text, "tools": TOOLS} for parser, _, _, text in CASES]
    cases += [{"parser": "qwen25", "text": VALID["qwen25"]["string"], "tools": []}]
    done = subprocess.run(
        [str(_sglang_python()), str(PROBE)],
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


def test_every_parser_name_is_one_sglang_knows(sglang: dict[str, Any]) -> None:
    assert set(FORMATS) <= set(sglang["parsers"])
    assert set(TOOL_CALL_PARSERS) == set(FORMATS)  # bin/train accepts exactly what the gateway parses
    assert set(VALID) == set(MALFORMED) == set(FORMATS)


def test_the_gateway_reads_every_text_as_sglang_does(sglang: dict[str, Any]) -> None:
    mismatches = []
    for (parser, kind, name, text), theirs in zip(CASES, sglang["results"], strict=False):
        ours = parse_tool_calls(parser, text, TOOLS)
        got = {"content": ours.content, "calls": [list(call) for call in ours.calls]}
        if got != theirs:
            mismatches.append(f"{parser} {kind} {name!r}:\n  ours   {got}\n  SGLang {theirs}")
    assert not mismatches, "\n".join(mismatches)
    valid = [r for (_, kind, _, _), r in zip(CASES, sglang["results"], strict=False) if kind == "valid"]
    assert all(r["calls"] for r in valid)  # SGLang found calls in every valid text (the data is right)


def test_no_tools_no_parse_as_sglang(sglang: dict[str, Any]) -> None:
    text = VALID["qwen25"]["string"]
    assert sglang["results"][-1] == {"content": text, "calls": []}
    ours = parse_tool_calls("qwen25", text, [])
    assert (ours.content, ours.calls) == (text, [])
    assert ours.errors == ["a tool call while no tools were offered"]


@pytest.mark.parametrize(
    ("parser", "kind", "name", "text"), CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES]
)
def test_malformed_calls_are_reported_and_valid_ones_are_not(
    parser: str, kind: str, name: str, text: str
) -> None:
    errors = parse_tool_calls(parser, text, TOOLS).errors
    assert bool(errors) == (kind == "malformed"), errors
