"""The tool-call formats of Kimi-K2, MiniMax-M2, DeepSeek-V3.1, Llama 3, MiMo and Gemma 4, read as
SGLang 0.5.13's detectors of the same names (``kimi_k2``, ``minimax-m2``, ``deepseekv31``,
``llama3``, ``mimo``, ``gemma4``) read them.

Each parser is written here from the format its model writes and from what SGLang's server then
returns for it; tests/python/gateway/test_tool_calls_sglang.py compares them with SGLang's own
detectors, valid and malformed texts alike. Where SGLang passes a call on as it is (Kimi-K2 keeps
a call's arguments as the model wrote them, to any tool name), the call is passed on too and the
turn flagged (:attr:`Found.errors`).
"""

from __future__ import annotations

import ast
import html
import json
import re
from typing import Any

from .tool_call_parts import Found, Tools, Unparseable, json_calls, json_kind, schemas, unclosed

# --------------------------------------------------------------------------- Kimi-K2
_KIMI_SECTION = "<|tool_calls_section_begin|>"
_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*([^\s<|]+)\s*<\|tool_call_argument_begin\|>\s*(\{.*?\})\s*<\|tool_call_end\|>",
    re.DOTALL,
)
_KIMI_ID = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")


def _kimi_guess(arguments: str, tools: Tools) -> str | None:
    """The tool of a call that names only its counter: the one tool offered, else the one whose
    parameters best cover the argument keys (each key it lacks counts against it)."""
    offered = schemas(tools)
    if len(tools) == 1:
        function = tools[0].get("function") if isinstance(tools[0], dict) else None
        return str(function["name"]) if isinstance(function, dict) and "name" in function else None
    try:
        keys = set(json.loads(arguments))
    except (ValueError, TypeError):
        return None
    best, best_score = None, -1
    for name, params in offered.items():
        properties = set(params.get("properties") or {})
        if properties:
            score = len(keys & properties) - len(keys - properties)
            if score > best_score:
                best, best_score = name, score
    return best


def kimi_k2(text: str, tools: Tools) -> Found:
    """``<|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>{json}<|tool_call_end|>``.

    As SGLang: the arguments are passed on as written (not checked, not re-encoded), to any
    tool name; a call naming only its counter (``3``) gets the tool its arguments fit best.
    """
    found = Found(text[: text.find(_KIMI_SECTION)])
    offered = schemas(tools)
    matches = _KIMI_CALL.findall(text)
    for call_id, arguments in matches:
        named = _KIMI_ID.fullmatch(call_id)
        name = named.group(1) if named else _kimi_guess(arguments, tools) if call_id.isdecimal() else None
        if name is None:
            found.errors.append(f"a tool call whose id {call_id!r} names no tool")
            continue
        if name not in offered:
            found.errors.append(f"unknown tool {name!r}")
        try:
            json.loads(arguments)
        except ValueError:
            found.errors.append(f"arguments of {name!r} are not valid JSON")
        found.calls.append((name, arguments))
    found.errors += unclosed(text, "<|tool_call_begin|>", len(matches))
    return found


# --------------------------------------------------------------------------- MiniMax-M2
_MINIMAX_START, _MINIMAX_END = "<minimax:tool_call>", "</minimax:tool_call>"
_MINIMAX_INVOKE = re.compile(r'<invoke name="(.*?)</invoke>|<invoke name="(.*)$', re.DOTALL)
_MINIMAX_PARAMETER = re.compile(r'<parameter name="(.*?)</parameter>|<parameter name="(.*?)$', re.DOTALL)
#: the types a value is tried as, in this order (the first it can be read as wins)
_KIND_ORDER: tuple[str, ...] = ("integer", "int", "number", "float", "boolean", "bool", "object", "array")
_KIND_ORDER += ("string", "str", "text")


def _kinds(schema: Any) -> set[str]:
    """Every JSON type a parameter schema allows (``type``, ``enum`` values, ``anyOf``,
    ``oneOf``, ``allOf``)."""
    if not isinstance(schema, dict):
        return set()
    kinds: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        kinds.add(kind)
    elif isinstance(kind, list):
        kinds.update(k for k in kind if isinstance(k, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        kinds.update(json_kind(value) for value in enum)
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            for option in schema[key]:
                kinds |= _kinds(option) or {"string"}
    return kinds


def _minimax_as(value: str, kind: str) -> tuple[bool, Any]:
    """``value`` read as one JSON type: (whether it is one, the value)."""
    if kind in ("string", "str", "text"):
        return True, value
    try:
        if kind in ("integer", "int"):
            return True, int(value)
        if kind in ("number", "float"):
            number = float(value)
            try:
                return True, number if number != int(number) else int(number)
            except OverflowError:  # SGLang's conversion fails on an infinity: the whole text stays
                raise Unparseable(f"a parameter value {value!r} is not a finite number") from None
        if kind in ("object", "array"):
            return True, json.loads(value)
    except ValueError:
        return False, None
    word = value.lower().strip()
    if word in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return True, word in ("true", "1", "yes", "on")
    return False, None


def _minimax_value(value: str, schema: Any) -> Any:
    """A ``<parameter>`` value typed by its schema: the first of the allowed types (integer,
    number, boolean, object, array, string, in that order) it can be read as; null words are
    None; else JSON, else the text."""
    kinds = {k.lower() for k in (_kinds(schema) or {"string"})}
    if "null" in kinds or value.lower() in ("null", "none", "nil"):
        return None
    for kind in _KIND_ORDER:
        if kind in kinds:
            ok, typed = _minimax_as(value, "boolean" if kind == "bool" else kind)
            if ok:
                return typed
    try:
        return json.loads(value)
    except ValueError:
        return value


def _minimax_properties(name: str, tools: Tools) -> dict[str, Any]:
    """The properties of the first tool called ``name`` whose parameters have them."""
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        params = function.get("parameters") if isinstance(function, dict) else None
        if isinstance(function, dict) and function.get("name") == name and isinstance(params, dict):
            if "properties" in params:
                properties = params["properties"]
                return properties if isinstance(properties, dict) else {}
    return {}


def _minimax_block(block: str, tools: Tools, found: Found) -> None:
    for closed, rest in _MINIMAX_INVOKE.findall(block):
        body = closed or rest
        if '">' not in body:
            found.errors.append("a tool call without its name's closing '\">'")
            continue
        name, params = body[: body.index('">')].strip(), body[body.index('">') + 2 :]
        properties = _minimax_properties(name, tools)
        arguments: dict[str, Any] = {}
        for p_closed, p_rest in _MINIMAX_PARAMETER.findall(params):
            text = p_closed or p_rest
            if '">' in text:
                key = text[: text.index('">')].strip()
                raw = text[text.index('">') + 2 :].lstrip("\n").rstrip("\n")
                arguments[key] = _minimax_value(raw, properties.get(key))
        json_calls({"name": name, "arguments": arguments}, tools, found)


def minimax_m2(text: str, tools: Tools) -> Found:
    """``<minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter></invoke>
    </minimax:tool_call>``: values typed by the tool's schema; the text around the blocks is kept
    (an unclosed block stays text)."""
    kept: list[str] = []
    blocks: list[str] = []
    cursor = 0
    while (start := text.find(_MINIMAX_START, cursor)) >= 0:
        kept.append(text[cursor:start])
        end = text.find(_MINIMAX_END, start)
        if end < 0:
            break
        cursor = end + len(_MINIMAX_END)
        blocks.append(text[start:cursor])
    kept.append(text[start:] if start >= 0 else text[cursor:])
    found = Found("".join(kept))
    found.errors += unclosed(text, _MINIMAX_START, len(blocks))
    for block in blocks:
        _minimax_block(block, tools, found)
    return found


# --------------------------------------------------------------------------- DeepSeek-V3.1
_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>", re.DOTALL)
_DEEPSEEK31_DETAIL = re.compile(
    r"<｜tool▁call▁begin｜>(?P<name>.*)<｜tool▁sep｜>(?P<arguments>.*)<｜tool▁call▁end｜>", re.DOTALL
)


def deepseek_calls(text: str, tools: Tools, detail: re.Pattern[str], form: str) -> Found:
    """The ``<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>`` blocks of DeepSeek-V3 and V3.1, each read by
    ``detail`` (its ``name`` and ``arguments`` groups); a block not in that ``form``, or arguments
    that are not JSON, fail the whole text."""
    found = Found(text[: text.find("<｜tool▁calls▁begin｜>")].strip())
    blocks = _DEEPSEEK_CALL.findall(text)
    for block in blocks:
        match = detail.search(block)
        if match is None:
            raise Unparseable(f"a tool call is not in the {form} form")
        try:
            arguments = json.loads(match["arguments"])
        except ValueError:
            raise Unparseable("a tool call's arguments are not valid JSON") from None
        json_calls({"name": match["name"], "parameters": arguments}, tools, found)
    found.errors += unclosed(text, "<｜tool▁call▁begin｜>", len(blocks))
    return found


def deepseekv31(text: str, tools: Tools) -> Found:
    """``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``; any bad call fails the
    whole text."""
    return deepseek_calls(text, tools, _DEEPSEEK31_DETAIL, "NAME<｜tool▁sep｜>ARGS")


# --------------------------------------------------------------------------- Llama 3
_PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


def llama3_detects(text: str) -> bool:
    """SGLang reads a Llama 3 text for calls when it has the tag or starts with a JSON object."""
    return _PYTHON_TAG in text or text.startswith("{")


def _python_dict(text: str) -> str | None:
    """A Python dict literal as JSON (Llama writes ``{'name': ...}`` now and then), else None."""
    try:
        value = ast.literal_eval(text.strip())
        return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None
    except Exception:  # noqa: BLE001 - literal_eval raises many kinds on odd text, dumps on sets
        return None


def _balanced(text: str, start: int) -> int:
    """The end of the first brace-balanced span from ``start`` (braces in strings count too), or
    ``start`` when there is none."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if text[i] == "}" and depth == 0:
            return i + 1
    return start


def _llama3_objects(actions: str) -> tuple[list[Any], int, bool]:
    """The JSON values written one after another (one separator character between them), a
    Python dict literal where JSON fails; the end of the last one read; whether an object was
    skipped (unreadable)."""
    values: list[Any] = []
    position = kept_end = 0
    skipped = False
    while position < len(actions):
        try:
            value, length = _DECODER.raw_decode(actions[position:])
        except ValueError:
            end = _balanced(actions, position)
            converted = _python_dict(actions[position:end]) if end > position else None
            if converted is not None and converted != actions[position:end]:
                values.append(json.loads(converted))
                position = kept_end = end + 1
                continue
            skipped = skipped or "{" in actions[position:]  # prose after the calls is no bad call
            position = actions.find('{"name":', position + 1)
            if position < 0:
                break
            continue
        values.append(value)
        position = kept_end = position + length + 1
    return values, kept_end, skipped


def llama3(text: str, tools: Tools) -> Found:
    """``<|python_tag|>{"name": .., "parameters": ..}`` (``;`` between calls), or a text that is
    such an object; what follows the last object read is kept as text."""
    head, tag, actions = text.partition(_PYTHON_TAG)
    if not tag:
        head, actions = "", text
    values, end, skipped = _llama3_objects(actions)
    if any(not isinstance(value, dict) for value in values):
        raise Unparseable("a tool call is not a JSON object")
    found = Found(head + (actions[end:].strip() if end < len(actions) else ""))
    if skipped:
        found.errors.append("a tool call is not valid JSON")
    if values:
        json_calls(values, tools, found)
    return found


# --------------------------------------------------------------------------- MiMo
_MIMO_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_MIMO_FUNCTION = re.compile(r"<function=([^>]+)>(.*?)</function>", re.DOTALL)
_MIMO_PARAMETER = re.compile(r"<parameter=([^>]+)>(.*?)</parameter>", re.DOTALL)
_MIMO_TEXT = ("string", "str", "text", "varchar", "char", "enum")
_MIMO_INT = ("int", "integer", "uint", "long", "short", "unsigned")


def _mimo_kind(name: str, key: str, tools: Tools) -> Any:
    """The ``type`` of a parameter in the first tool called ``name`` that has it ("string" else)."""
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            params = function.get("parameters")
            properties = params.get("properties", {}) if isinstance(params, dict) else None
            if not isinstance(properties, dict):
                raise Unparseable(f"the parameters of {name!r} cannot be read")  # SGLang fails there
            if key in properties:
                spec = properties[key]
                return spec.get("type", "string") if isinstance(spec, dict) else None
    return "string"


def _mimo_value(raw: str, name: str, key: str, tools: Tools) -> Any:
    """A ``<parameter>`` value, HTML entities decoded, typed by its schema type."""
    value = html.unescape(raw)
    if value.lower() == "null":
        return None
    kind = _mimo_kind(name, key, tools)
    if not isinstance(kind, str):
        raise Unparseable("a parameter's schema type is not a string")  # SGLang's lookup fails
    if kind in _MIMO_TEXT:
        return value
    if kind.startswith(_MIMO_INT):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
            return number if number - int(number) != 0 else int(number)
        except OverflowError:
            raise Unparseable(f"a parameter value {value!r} is not a finite number") from None
        except ValueError:
            return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError):
        return value


def mimo(text: str, tools: Tools) -> Found:
    """``<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>``: values
    kept as written (newlines too), HTML entities decoded, typed by the schema; a call to a tool
    not offered stays in the text."""
    start = text.find("<tool_call>")
    kept, last = [text[:start]], start
    offered = schemas(tools)
    found = Found("")
    blocks = list(_MIMO_BLOCK.finditer(text))
    for block in blocks:
        function = _MIMO_FUNCTION.search(block.group(1))
        if function is None:
            found.errors.append("a tool call without <function=NAME>...</function>")
        else:
            name = function.group(1).strip()
            if name not in offered:
                found.errors.append(f"unknown tool {name!r}")
                kept.append(text[last : block.end()])
            else:
                arguments = {
                    key.strip(): _mimo_value(raw, name, key.strip(), tools)
                    for key, raw in _MIMO_PARAMETER.findall(function.group(2))
                }
                json_calls({"name": name, "parameters": arguments}, tools, found)
        last = block.end()
    found.normal = "".join(kept)
    found.errors += unclosed(text, "<tool_call>", len(blocks))
    return found


# --------------------------------------------------------------------------- Gemma 4
_GEMMA_START, _GEMMA_END, _QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
_GEMMA_SPACE = (" ", "\n", "\t")


def _after_quote(text: str, i: int) -> int:
    """The index after the quoted string opening at ``i`` (the text's end when never closed)."""
    close = text.find(_QUOTE, i + len(_QUOTE))
    return close + len(_QUOTE) if close >= 0 else len(text)


def _scan_nested(text: str, i: int, opener: str, closer: str, quotes: bool) -> int:
    """From just after an ``opener`` at ``i - 1``: the index just past its ``closer`` (nesting
    counted, quoted strings skipped when ``quotes``), or the text's end."""
    depth = 1
    while i < len(text) and depth > 0:
        if quotes and text.startswith(_QUOTE, i):
            i = _after_quote(text, i)
            continue
        depth += {opener: 1, closer: -1}.get(text[i], 0)
        i += 1
    return i


def _gemma_scalar(raw: str) -> Any:
    """``true``/``false``, a number (a float when it has a dot), else the text itself."""
    word = raw.strip()
    if word in ("true", "false"):
        return word == "true"
    try:
        return float(word) if "." in word else int(word)
    except ValueError:
        return word


def _gemma_item(text: str, i: int, ends: str, array: bool) -> tuple[Any, int, bool]:
    """The value at ``i`` (a quoted string, an object, an array or a scalar up to one of ``ends``):
    (value, the index after it, whether the text ended inside a quoted string)."""
    if text.startswith(_QUOTE, i):
        start = i + len(_QUOTE)
        close = text.find(_QUOTE, start)
        if close < 0:
            return text[start:], len(text), True
        return text[start:close], close + len(_QUOTE), False
    if text[i] in "{[":
        closer = "}" if text[i] == "{" else "]"
        end = _scan_nested(text, i + 1, text[i], closer, quotes=not (array and closer == "]"))
        inner = text[i + 1 : end - 1]
        return (_gemma_object(inner) if closer == "}" else _gemma_array(inner)), end, False
    end = i
    while end < len(text) and text[end] not in ends:
        end += 1
    return _gemma_scalar(text[i:end]), end, False


def _gemma_array(text: str) -> list[Any]:
    items: list[Any] = []
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in (",", *_GEMMA_SPACE):
            i += 1
        if i >= len(text):
            break
        value, i, unterminated = _gemma_item(text, i, ",]", array=True)
        items.append(value)
        if unterminated:
            break
    return items


def _gemma_object(text: str) -> dict[str, Any]:
    """Gemma 4's ``key:value,key:value`` arguments (strings quoted by ``<|"|>``)."""
    result: dict[str, Any] = {}
    i = 0 if text.strip() else len(text)
    while i < len(text):
        while i < len(text) and text[i] in (",", *_GEMMA_SPACE):
            i += 1
        colon = text.find(":", i)
        if i >= len(text) or colon < 0:
            break
        key, i = text[i:colon].strip(), colon + 1
        while i < len(text) and text[i] in _GEMMA_SPACE:
            i += 1
        if i >= len(text):
            result[key] = ""
            break
        result[key], i, unterminated = _gemma_item(text, i, ",}]", array=False)
        if unterminated:
            break
    return result


def _gemma_arguments(inner: str) -> str:
    """The arguments of ``{...}`` (from just after ``{``): up to the matching ``}``, or all."""
    depth, i = 1, 0
    while i < len(inner) and depth > 0:
        if inner.startswith(_QUOTE, i):
            close = inner.find(_QUOTE, i + len(_QUOTE))
            if close < 0:
                return inner
            i = close + len(_QUOTE)
            continue
        depth += {"{": 1, "}": -1}.get(inner[i], 0)
        i += 1
    return inner[: i - 1] if depth == 0 else inner


def gemma4(text: str, tools: Tools) -> Found:
    """``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>``: arguments in Gemma 4's own
    syntax; as SGLang, any tool name is passed on (flagged when not offered)."""
    found = Found(text[: text.find(_GEMMA_START)])
    offered = schemas(tools)
    cursor = 0
    while (start := text.find(_GEMMA_START, cursor)) >= 0:
        end = text.find(_GEMMA_END, start)
        if end < 0:
            found.errors.append("a tool call without its closing tag")
            break
        inner, cursor = text[start + len(_GEMMA_START) : end], end + len(_GEMMA_END)
        brace = inner.find("{")
        if not inner.startswith("call:") or brace < 0:
            found.errors.append("a tool call not in the call:NAME{...} form")
            continue
        name = inner[len("call:") : brace]
        if name not in offered:
            found.errors.append(f"unknown tool {name!r}")
        if inner.count(_QUOTE) % 2:
            found.errors.append(f"a string of {name!r} never closed by {_QUOTE}")
        arguments = _gemma_object(_gemma_arguments(inner[brace + 1 :]))
        found.calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    return found
