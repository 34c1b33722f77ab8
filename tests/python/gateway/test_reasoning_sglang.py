"""The gateway's reasoning split against SGLang 0.5.13's reasoning parsers of the same names.

``sglang_tool_probe.py`` (in ``.venv-sglang``) splits each text with SGLang's ``ReasoningParser``
of that name (``parse_non_stream``, what its chat server does with a whole completion); the real
gateway (scripted engine, toy Qwen2.5-like tokenizer, the chat template: every name maps to
renderers' ``think`` parser) returns its ``reasoning_content`` and ``content`` for the same sampled
text. Equal on every case but those in :data:`DIFFERENT`, which the test holds to what each side
does (docs/gateway.md says why). In CI a missing venv fails the test; elsewhere it skips.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agentcore_slime.settings.schema import REASONING_PARSERS
from fakes.sglang_venv import ask_sglang
from test_tool_calls_sglang import PROBE

TEXTS = {
    "closed": "<think>let me add</think>It is 5.",
    "none": "It is 5.",
    "cut off": "<think>still thinking",
    "no opening": "add them</think>It is 5.",
    "blank lines": "<think>\nadd\n</think>\n\nIt is 5.",
}
CASES = [(name, label) for name in REASONING_PARSERS for label in TEXTS]


@pytest.fixture(scope="module")
def sglang() -> list[dict[str, Any]]:
    cases = [{"reasoning": name, "text": TEXTS[label]} for name, label in CASES]
    reply = ask_sglang(PROBE, cases)
    return [{"reasoning": r["reasoning"] or None, "content": r["content"]} for r in reply["results"]]


def _gateway_split(stand: Any, text: str, sid: str) -> dict[str, Any]:
    stand.script.replies.append(text)
    base = stand.gateway.create_session(sid, {"max_new_tokens": 200})
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    message = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    body = message.choices[0].message.model_dump()
    return {"reasoning": body.get("reasoning_content") or None, "content": body["content"] or ""}


#: SGLang's forced parsers (qwen3-thinking, deepseek-r1, minimax) read a text without <think> as
#: reasoning up to </think> (all of it without one), whatever the prompt; the gateway (renderers)
#: reads reasoning the generation prompt opened, as those models' templates open it ("<think>\n"),
#: and a text that opens <think> itself. Here the toy template opens none, so they differ.
FORCED = ("qwen3-thinking", "deepseek-r1", "minimax")
DIFFERENT = {(name, label) for name in FORCED for label in ("none", "no opening")}


@pytest.mark.parametrize("name", sorted(REASONING_PARSERS))
def test_the_gateway_splits_reasoning_as_sglang_does(
    sglang: list[dict[str, Any]], make_stand: Any, name: str
) -> None:
    stand = make_stand(reasoning_parser=name, tool_call_parser="none")
    for i, (case_name, label) in enumerate(CASES):
        if case_name != name:
            continue
        ours = _gateway_split(stand, TEXTS[label], f"s{i}")
        if (name, label) not in DIFFERENT:
            assert ours == sglang[i], (name, label)
        else:  # what each side does, held here so that a change on either side is seen
            assert ours == {"reasoning": None, "content": TEXTS[label]}, (name, label)
            before, _, after = TEXTS[label].partition("</think>")
            assert sglang[i] == {"reasoning": before, "content": after}, (name, label)
