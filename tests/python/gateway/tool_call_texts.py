"""Test data: what models of each tool-call family write, valid and malformed.

Each family's native format as its model card / chat template documents it (facts written as
texts, not anyone's code): Qwen2.5 and Hermes ``<tool_call>`` JSON, Qwen3-Coder's XML-like
``<function=..><parameter=..>``, GLM-4.5/4.6 ``<arg_key>/<arg_value>`` with a newline after the
name, GLM-4.7/5 without it, DeepSeek-V3's tool-call tokens with a fenced JSON block.
:data:`VALID` cases are turns where the model wrote valid calls; :data:`MALFORMED` ones hold a
call no parser can turn into a valid one (or one cut off by the length limit).
"""

from __future__ import annotations

import json
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


def _kimi_calls(*calls: tuple[str, str]) -> str:
    inner = "".join(
        f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
        for call_id, args in calls
    )
    return f"<|tool_calls_section_begin|>{inner}<|tool_calls_section_end|>"


def _minimax_invoke(name: str, args: dict[str, str]) -> str:
    params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in args.items())
    return f'<invoke name="{name}">\n{params}</invoke>\n'


def _minimax_block(*invokes: str) -> str:
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


def _deepseek31_calls(*calls: tuple[str, str]) -> str:
    inner = "".join(
        f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>" for name, args in calls
    )
    return f"<｜tool▁calls▁begin｜>{inner}<｜tool▁calls▁end｜>"


def _mimo_call(name: str, args: dict[str, str]) -> str:
    params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _gemma_call(name: str, args: str) -> str:
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


Q = '<|"|>'  # Gemma 4's string quote


def _llama_call(name: str, args: dict[str, Any], key: str = "parameters") -> str:
    return json.dumps({"name": name, key: args}, ensure_ascii=False)


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
        "two calls": _glm45_call("search", {"q": "cats"}) + _glm45_call("calculator", {"expression": "2+2"}),
        "text then call": "Let me look that up.\n" + _glm45_call("search", {"q": "cats"}),
    },
    "glm47": {
        "string": _glm47_call("search", {"q": "cats"}),
        "mixed": _glm47_call("search", MIXED_TEXT),
        "two calls": _glm47_call("search", {"q": "cats"}) + _glm47_call("calculator", {"expression": "2+2"}),
        "text around calls": "Looking.\n" + _glm47_call("search", {"q": "cats"}) + "\nDone.",
    },
    "deepseekv3": {
        "string": _deepseek_calls(("search", '{"q": "cats"}')),
        "mixed": _deepseek_calls(("search", '{"q": "007", "limit": 5, "exact": true, "tags": ["a"]}')),
        "two calls": _deepseek_calls(("search", '{"q": "cats"}'), ("calculator", '{"expression": "2+2"}')),
        "text then call": "Let me look that up." + _deepseek_calls(("search", '{"q": "cats"}')),
    },
    "kimi_k2": {
        "string": _kimi_calls(("functions.search:0", '{"q": "cats"}')),
        "mixed": _kimi_calls(("functions.search:0", json.dumps(MIXED_JSON))),
        "two calls": "\n".join(
            [
                _kimi_calls(
                    ("functions.search:0", '{"q": "a"}'), ("functions.calculator:1", '{"expression": "1"}')
                )
            ]
        ),
        "text then call": "Let me look that up." + _kimi_calls(("functions.search:0", '{"q": "cats"}')),
        "spaces and a name without functions.": _kimi_calls(("  search:2 ", ' {"q": "cats"} ')),
        "a counter for an id": _kimi_calls(("3", '{"expression": "2+2"}')),
    },
    "minimax-m2": {
        "string": _minimax_block(_minimax_invoke("search", {"q": "cats"})),
        "mixed": _minimax_block(_minimax_invoke("search", MIXED_TEXT)),
        "two calls in a block": _minimax_block(
            _minimax_invoke("search", {"q": "cats"}), _minimax_invoke("calculator", {"expression": "2+2"})
        ),
        "text between blocks": "First.\n"
        + _minimax_block(_minimax_invoke("search", {"q": "a"}))
        + "\nThen.\n"
        + _minimax_block(_minimax_invoke("calculator", {"expression": "1"}))
        + "\nDone.",
        "null and words": _minimax_block(
            _minimax_invoke("search", {"q": "None", "exact": "yes", "limit": "7.0"})
        ),
        "multi-line string": _minimax_block(
            _minimax_invoke("calculator", {"expression": "\nline one\nline two\n"})
        ),
    },
    "deepseekv31": {
        "string": _deepseek31_calls(("search", '{"q": "cats"}')),
        "mixed": _deepseek31_calls(("search", json.dumps(MIXED_JSON))),
        "two calls": _deepseek31_calls(("search", '{"q": "cats"}'), ("calculator", '{"expression": "2+2"}')),
        "text then call": "Let me look that up.\n\n" + _deepseek31_calls(("search", '{"q": "cats"}')),
    },
    "llama3": {
        "string": "<|python_tag|>" + _llama_call("search", {"q": "cats"}),
        "no tag, a JSON object": _llama_call("search", {"q": "cats"}),
        "mixed": "<|python_tag|>" + _llama_call("search", MIXED_JSON),
        "two calls": "<|python_tag|>"
        + _llama_call("search", {"q": "a"})
        + ";"
        + _llama_call("calculator", {"expression": "1"}),
        "text then call": "Let me look that up. <|python_tag|>" + _llama_call("search", {"q": "cats"}),
        "a Python dict": "<|python_tag|>{'name': 'search', 'parameters': {'q': 'cats', 'exact': True}}",
        "arguments, a space, text after": "<|python_tag|> "
        + _llama_call("search", {"q": "x"}, "arguments")
        + " Done.",
    },
    "mimo": {
        "string": _mimo_call("search", {"q": "cats"}),
        "mixed": _mimo_call("search", MIXED_TEXT),
        "two calls": _mimo_call("search", {"q": "a"}) + "\n" + _mimo_call("calculator", {"expression": "1"}),
        "text then call": "Let me look that up.\n" + _mimo_call("search", {"q": "cats", "limit": "3"}),
        "entities and newlines kept": _mimo_call("calculator", {"expression": "\n1 &lt; 2 &amp;&amp; 3\n"}),
        "a Python literal and nan": _mimo_call("search", {"filters": "{'lang': 'en'}", "score": "nan"}),
    },
    "gemma4": {
        "string": _gemma_call("search", f"q:{Q}cats{Q}"),
        "mixed": _gemma_call(
            "search",
            f"q:{Q}007{Q},limit:5,exact:true,filters:{{lang:{Q}en{Q}}},tags:[{Q}a{Q},{Q}b{Q}],score:0.5",
        ),
        "two calls": _gemma_call("search", f"q:{Q}a{Q}") + _gemma_call("calculator", f"expression:{Q}1{Q}"),
        "text then call": "Let me look that up." + _gemma_call("search", f"q:{Q}cats, dogs {{x}}{Q}"),
        "nested arrays and spaces": _gemma_call(
            "search", f" tags : [[1, 2.5], [{Q}x{Q}], {{a:[3]}}] , q: bare words "
        ),
        "no arguments": _gemma_call("calculator", ""),
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
    "kimi_k2": {
        "invalid JSON": _kimi_calls(("functions.search:0", '{"q": oops}')),
        "a mention": "I would open a <|tool_calls_section_begin|> here.",
        "unknown tool": _kimi_calls(("functions.browse:0", '{"url": "x"}')),
        "cut off": "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
        '<|tool_call_argument_begin|>{"q": "ca',
        "a counter that fits no tool": _kimi_calls(("4", '{"url": "x"}')),
        "no section": _kimi_calls(("functions.search:0", '{"q": "a"}')).split(">", 1)[1],
    },
    "minimax-m2": {
        "unknown tool": _minimax_block(_minimax_invoke("browse", {"url": "x"})),
        "a mention": "I would write <minimax:tool_call> here.",
        "cut off": '<minimax:tool_call>\n<invoke name="search">\n<parameter name="q">ca',
        "a name never closed": '<minimax:tool_call>\n<invoke name="search>\n</invoke>\n</minimax:tool_call>',
        "an infinite number": _minimax_block(_minimax_invoke("search", {"q": "a", "score": "inf"})),
    },
    "deepseekv31": {
        "invalid JSON": _deepseek31_calls(("search", "{oops}")),
        "no separator": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search {}<｜tool▁call▁end｜>",
        "unknown tool": _deepseek31_calls(("browse", '{"url": "x"}')),
        "cut off": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"q": "ca',
    },
    "llama3": {
        "invalid JSON": '<|python_tag|>{"name": "search", "parameters": {oops}}',
        "a mention": "I would use <|python_tag|> here.",
        "unknown tool": "<|python_tag|>" + _llama_call("browse", {"url": "x"}),
        "cut off": '<|python_tag|>{"name": "search", "param',
        "not an object": '<|python_tag|>["search"]',
        "one good, one bad": "<|python_tag|>"
        + _llama_call("search", {"q": "a"})
        + '; {"name": "calculator", oops}',
    },
    "mimo": {
        "unknown tool": "Sure.\n" + _mimo_call("browse", {"url": "x"}) + _mimo_call("search", {"q": "a"}),
        "a mention": "I would use <tool_call> syntax normally.",
        "no function": "<tool_call>\n<parameter=q>cats</parameter>\n</tool_call>",
        "cut off": "<tool_call>\n<function=search>\n<parameter=q>ca",
        "an infinite number": _mimo_call("search", {"q": "a", "score": "inf"}),
    },
    "gemma4": {
        "unknown tool": _gemma_call("browse", f"url:{Q}x{Q}"),
        "a mention": "I would use <|tool_call> here.",
        "not call:": f"<|tool_call>search{{q:{Q}a{Q}}}<tool_call|>",
        "cut off": f"<|tool_call>call:search{{q:{Q}ca",
        "an unclosed string": f"<|tool_call>call:search{{q:{Q}cats}}<tool_call|>",
    },
}
MALFORMED["qwen"] = MALFORMED["qwen25"]
MALFORMED["glm"] = MALFORMED["glm45"]
