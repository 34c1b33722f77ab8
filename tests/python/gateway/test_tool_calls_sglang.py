"""The gateway's tool-call parsing against SGLang 0.5.13's own, on each family's native texts.

``sglang_tool_probe.py`` runs in ``.venv-sglang`` (made by ``tests/run`` from
tests/requirements-sglang.txt, as for test_sglang_flags.py) and reads each text with SGLang's
``FunctionCallParser`` and the detector of the same name, as its chat server does. The gateway's
:func:`parse_tool_calls` must give the same content and the same calls (names and argument
JSON, string for string) on every text, valid or malformed; and it must report every malformed
one, which SGLang only logs. In CI a missing venv fails the test; elsewhere it skips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.gateway.tool_calls import FORMATS, parse_tool_calls
from agentcore_slime.settings.schema import TOOL_CALL_PARSERS
from fakes.sglang_venv import ask_sglang
from tool_call_texts import MALFORMED, TOOLS, VALID

PROBE = Path(__file__).with_name("sglang_tool_probe.py")
CASES = [
    (parser, kind, name, text)
    for kind, table in (("valid", VALID), ("malformed", MALFORMED))
    for parser, texts in table.items()
    for name, text in texts.items()
]


@pytest.fixture(scope="module")
def sglang() -> dict[str, Any]:
    cases = [{"parser": parser, "text": text, "tools": TOOLS} for parser, _, _, text in CASES]
    cases += [{"parser": "qwen25", "text": VALID["qwen25"]["string"], "tools": []}]
    return ask_sglang(PROBE, cases)


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


# ------------------------------------------------------------------ through the gateway
#: the families added for issue 46, each with a text of calls, one of text then a call, a malformed one
THROUGH = [
    (parser, kind, name)
    for parser in ("kimi_k2", "minimax-m2", "deepseekv31", "llama3", "mimo", "gemma4")
    for kind, name in (
        ("valid", "two calls" if parser != "minimax-m2" else "two calls in a block"),
        ("valid", "text then call" if parser != "minimax-m2" else "text between blocks"),
        ("valid", "mixed"),
        ("malformed", "unknown tool"),
    )
]


def _agent_sees(base: str, stream: bool) -> tuple[str, list[list[str]]]:
    """What an openai-SDK agent gets: the content and the (name, arguments) of each call."""
    import openai

    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    kwargs: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS}
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        calls = [[c.function.name, c.function.arguments] for c in message.tool_calls or []]  # type: ignore[union-attr]
        return message.content or "", calls
    content, calls = "", []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        delta = chunk.choices[0].delta if chunk.choices else None
        content += (delta.content or "") if delta else ""
        for call in (delta.tool_calls or []) if delta else []:
            if call.function and call.function.name:
                calls.append([call.function.name, ""])
            if call.function and call.function.arguments:
                calls[-1][1] += call.function.arguments
    return content, calls


@pytest.mark.parametrize(("parser", "kind", "name"), THROUGH, ids=[f"{p}-{k}-{n}" for p, k, n in THROUGH])
def test_the_agent_gets_what_sglang_returns_streamed_or_not(
    sglang: dict[str, Any], make_stand: Any, parser: str, kind: str, name: str
) -> None:
    """The real gateway (scripted engine, toy tokenizer: the family's markers are plain text to
    it, decoded back exactly) hands an openai-SDK agent SGLang's calls, streamed or not."""
    theirs = sglang["results"][
        CASES.index((parser, kind, name, (VALID if kind == "valid" else MALFORMED)[parser][name]))
    ]
    stand = make_stand(tool_call_parser=parser)
    for stream in (False, True):
        stand.script.replies.append((VALID if kind == "valid" else MALFORMED)[parser][name])
        base = stand.gateway.create_session(f"s-{stream}", {"max_new_tokens": 400})
        content, calls = _agent_sees(base, stream)
        assert calls == theirs["calls"], stream
        assert content.strip() == theirs["content"].strip(), stream
        (trace,) = stand.gateway.traces(f"s-{stream}")
        assert bool(trace.tool_call_errors) == (kind == "malformed")
