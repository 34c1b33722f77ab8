"""Test data: what models of each tool-call family write, valid and malformed.

Each family's native format as its model card / chat template documents it (facts written as
texts, not anyone's code): Qwen2.5 and Hermes ``<tool_call>`` JSON, Qwen3-Coder's XML-like
``<function=..><parameter=..>``, GLM-4.5/4.6 ``<arg_key>/<arg_value>`` with a newline after the
name, GLM-4.7/5 without it, DeepSeek-V3's tool-call tokens with a fenced JSON block.
:data:`VALID` cases are turns where the model wrote valid calls; :data:`MALFORMED` ones hold a
call no parser can turn into a valid one (or one cut off by the length limit).
"""

from __future__ import annotations

from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {
                    "q": {"type": "string"},
                    "limit": {"type": "integer"},
                    "exact": {"type": "boolean"},
                    "filters": {"type": "object"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "score": {"type": "number"},
                },
                "required": ["q"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    },
]


# ------------------------------------------------------------------ per-family call writers
def _json_call(name: str, args: dict[str, Any], newlines: bool = True) -> str:
    import json

    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>" if newlines else f"<tool_call>{body}</tool_call>"


def _coder_call(name: str, args: dict[str, str]) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _glm45_call(name: str, args: dict[str, str]) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items())
    return f"<tool_call>{name}\n{pairs}</tool_call>"


def _glm47_call(name: str, args: dict[str, str]) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def _deepseek_calls(*calls: tuple[str, str]) -> str:
    inner = "\n".join(
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
        for name, args in calls
    )
    return f"<｜tool▁calls▁begin｜>{inner}<｜tool▁calls▁end｜>"


MIXED_JSON = {
    "q": "007",
    "limit": 5,
    "exact": True,
    "filters": {"lang": "en"},
    "tags": ["a", "b"],
    "score": 0.5,
}
# the XML-like formats write every value as text; the schema types them
MIXED_TEXT = {
    "q": "007",
    "limit": "5",
    "exact": "true",
    "filters": '{"lang": "en"}',
    "tags": '["a", "b"]',
    "score": "0.5",
}

VALID: dict[str, dict[str, str]] = {
    "qwen25": {
        "string": _json_call("search", {"q": "cats"}),
        "mixed": _json_call("search", MIXED_JSON),
        "two calls": _json_call("search", {"q": "cats"})
        + "\n"
        + _json_call("calculator", {"expression": "2+2"}),
        "text then call": "Let me look that up.\n" + _json_call("search", {"q": "cats"}),
    },
    "hermes": {
        "string": _json_call("search", {"q": "cats"}, newlines=False),
        "mixed": _json_call("search", MIXED_JSON),
        "two calls": _json_call("search", {"q": "a"}, False)
        + _json_call("calculator", {"expression": "1"}, False),
        "text then call": "Let me look that up. " + _json_call("search", {"q": "cats"}, newlines=False),
    },
    "qwen3_coder": {
        "string": _coder_call("search", {"q": "cats"}),
        "mixed": _coder_call("search", MIXED_TEXT),
        "multi-line string": _coder_call("calculator", {"expression": "line one\nline two"}),
        "two calls": _coder_call("search", {"q": "cats"})
        + "\n"
        + _coder_call("calculator", {"expression": "2+2"}),
        "text then call": "Let me look that up.\n\n" + _coder_call("search", {"q": "cats", "limit": "3"}),
        "null": _coder_call("search", {"q": "cats", "filters": "null"}),
    },
    "glm45": {
        "string": _glm45_call("search", {"q": "cats"}),
        "mixed": _glm45_call("search", MIXED_TEXT),
        "digits of a string": _glm45_call("search", {"q": "12345"}),
        "two calls": _glm45_call("search", {"q": "cats"})
        + _glm45_call("calculator", {"expression": "2+2"}),
        "text then call": "Let me look that up.\n" + _glm45_call("search", {"q": "cats"}),
    },
    "glm47": {
        "string": _glm47_call("search", {"q": "cats"}),
        "mixed": _glm47_call("search", MIXED_TEXT),
        "two calls": _glm47_call("search", {"q": "cats"})
        + _glm47_call("calculator", {"expression": "2+2"}),
        "text around calls": "Looking.\n" + _glm47_call("search", {"q": "cats"}) + "\nDone.",
    },
    "deepseekv3": {
        "string": _deepseek_calls(("search", '{"q": "cats"}')),
        "mixed": _deepseek_calls(("search", '{"q": "007", "limit": 5, "exact": true, "tags": ["a"]}')),
        "two calls": _deepseek_calls(("search", '{"q": "cats"}'), ("calculator", '{"expression": "2+2"}')),
        "text then call": "Let me look that up." + _deepseek_calls(("search", '{"q": "cats"}')),
    },
}
VALID["qwen"] = VALID["qwen25"]
VALID["glm"] = VALID["glm45"]

MALFORMED: dict[str, dict[str, str]] = {
    "qwen25": {
        "invalid JSON": '<tool_call>\n{"name": "calculator", "arguments": {oops}\n</tool_call>',
        "a mention": "I would use <tool_call> syntax normally.",
        "not an object": '<tool_call>\n"calculator"\n</tool_call>',
        "unknown tool": _json_call("browse", {"url": "x"}),
        "cut off": '<tool_call>\n{"name": "search", "argu',
        "double-encoded arguments": (
            '<tool_call>\n{"name": "search", "arguments": "{\\"q\\": \\"cats\\"}"}\n</tool_call>'
        ),
    },
    "hermes": {
        "invalid JSON": '<tool_call>{"name": "calculator", "arguments": {oops}</tool_call>',
        "a mention": "I would use <tool_call> syntax normally.",
        "not an object": '<tool_call>["calculator"]</tool_call>',
        "unknown tool": _json_call("browse", {"url": "x"}, newlines=False),
        "cut off": 'Sure. <tool_call>{"name": "search", "argu',
    },
    "qwen3_coder": {
        "no function": "<tool_call>\n<parameter=q>\ncats\n</parameter>\n</tool_call>",
        "a mention": "I would use <tool_call> syntax normally.",
        "unknown tool": _coder_call("browse", {"url": "x"}),
        "cut off": "<tool_call>\n<function=search>\n<parameter=q>\nca",
        "no name end": "<tool_call>\n<function=search</tool_call>",
    },
    "glm45": {
        "no newline after the name": (
            "<tool_call>search<arg_key>q</arg_key><arg_value>cats</arg_value></tool_call>"
        ),
        "a mention": "I would use <tool_call> syntax normally.",
        "unknown tool": _glm45_call("browse", {"url": "x"}),
        "cut off": "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>ca",
    },
    "glm47": {
        "a mention": "I would use <tool_call> syntax normally.",
        "unknown tool": _glm47_call("browse", {"url": "x"}),
        "cut off": "<tool_call>search<arg_key>q</arg_key><arg_value>ca",
    },
    "deepseekv3": {
        "invalid JSON": _deepseek_calls(("search", "{oops}")),
        "no fence": (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search {}<｜tool▁call▁end｜>"
        ),
        "unknown tool": _deepseek_calls(("browse", '{"url": "x"}')),
        "cut off": (
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{"q": "ca'
        ),
    },
}
MALFORMED["qwen"] = MALFORMED["qwen25"]
MALFORMED["glm"] = MALFORMED["glm45"]
