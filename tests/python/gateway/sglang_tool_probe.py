"""Read tool calls with SGLang 0.5.13's own server code; run by the .venv-sglang python.

Reads a JSON list of cases ``{"parser", "text", "tools"}`` (or ``{"reasoning", "text"}``: what
SGLang's reasoning parser of that name splits off) on stdin and prints
``{"version", "parsers", "results"}``: per case what SGLang's chat server puts in the reply for that text,
``{"content", "calls": [[name, arguments], ...]}``, from SGLang's own ``FunctionCallParser``
and its detector of that name.

``torchvision`` is the one module stood in (as in tests/python/evaluate/sglang_parser_probe.py,
whose stand-in this reuses): SGLang imports it at start and no build of it loads beside a CPU
torch; nothing here decodes images.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "evaluate"))
from sglang_parser_probe import _TorchvisionStandIn  # noqa: E402


def _serve(case: dict[str, Any]) -> dict[str, Any]:
    """What ``OpenAIServingChat._process_tool_calls`` (serving_chat.py:1396-1440 in 0.5.13) does
    with a text for ``tool_choice`` auto: ask the parser whether the text holds a call; if so,
    its ``parse_non_stream`` gives the content and calls, and an exception leaves the text
    whole. (The module itself imports fastapi and the server stack, which this venv lacks.)"""
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    tools = [Tool.model_validate(tool) for tool in case["tools"]]
    text, calls = case["text"], []
    if tools:  # the server parses only when the request has tools
        parser = FunctionCallParser(tools, case["parser"])
        if parser.has_tool_call(text):
            try:
                text, calls = parser.parse_non_stream(text)
            except Exception:  # noqa: BLE001 - as the server: the text stays whole
                calls = []
    return {"content": text, "calls": [[c.name, c.parameters] for c in calls]}


def _reason(case: dict[str, Any]) -> dict[str, Any]:
    """What SGLang's ``ReasoningParser`` of that name splits off a whole text (``parse_non_stream``)."""
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    reasoning, normal = ReasoningParser(case["reasoning"]).parse_non_stream(case["text"])
    return {"reasoning": reasoning, "content": normal}


def main() -> int:
    sys.meta_path.insert(0, _TorchvisionStandIn())
    import logging

    import sglang

    logging.disable(logging.CRITICAL)  # the detectors log every malformed call
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    results = [_reason(case) if "reasoning" in case else _serve(case) for case in json.load(sys.stdin)]
    names = sorted(FunctionCallParser.ToolCallParserEnum)
    print(
        json.dumps(
            {"version": sglang.__version__, "parsers": names, "results": results}, ensure_ascii=False
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
