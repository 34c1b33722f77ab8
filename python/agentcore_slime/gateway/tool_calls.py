"""Tool calls in a completion's answer text, read as SGLang's detector of the same name reads them.

The gateway hands the agent what SGLang's own server would return for the same text with
``--tool-call-parser <name>`` (SGLang 0.5.13, ``FunctionCallParser.parse_non_stream``): the
calls its detector finds, with the text its detector keeps beside them, or the whole text as
content when no call is found. Argument values of the XML-like formats (``qwen3_coder``,
``glm45``, ``glm47``) are typed by the tool's JSON schema as SGLang types them; the JSON formats
keep the values the model wrote. Each family's format is written here from its documented
shape; the tests compare the results with SGLang's detectors on the same texts.

What SGLang only logs, this module also reports: every call the parser could not turn into a
valid one (invalid JSON, not an object, no function name, an unknown tool, arguments that are
not an object, a block never closed) is one entry in :attr:`ToolCallText.errors`, and the
gateway flags the turn on its trace. Nothing is dropped without a trace of it.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import tool_call_formats as formats
from .tool_call_parts import (
    Format,
    Found,
    Tools,
    Unparseable,
    dump,
    json_calls,
    json_kind,
    literal,
    schemas,
    unclosed,
)


@dataclass
class ToolCallText:
    """One answer text, parsed.

    :param content: what the agent gets as text: the text the detector keeps beside the calls
        when it found some, else the whole text.
    :param calls: ``(name, arguments as a JSON string)`` of each call, in order.
    :param errors: one short reason per call the parser could not turn into a valid one
        (some of those calls still reach the agent, as SGLang passes them on).
    """

    content: str
    calls: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- JSON formats
def _hermes(text: str, tools: Tools) -> Found:
    """``<tool_call>{json}</tool_call>`` (a last block may be unclosed); any bad block fails all."""
    found = Found(text[: text.find("<tool_call>")].strip())
    for match in re.finditer(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.DOTALL):
        raw = match.group(1) if match.group(1) is not None else match.group(2)
        if match.group(2) is not None:
            found.errors.append("a tool call without its closing tag")
        if not raw:
            found.errors.append("an empty tool call")
            continue
        try:
            action = json.loads(raw.strip())
        except ValueError:
            raise Unparseable("a tool call is not valid JSON") from None
        json_calls(action, tools, found)
    return found


def _qwen25(text: str, tools: Tools) -> Found:
    """``<tool_call>\\n{json}\\n</tool_call>`` blocks; a block that is not JSON is skipped."""
    found = Found(text[: text.find("<tool_call>\n")].strip())
    blocks = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL)
    for block in blocks:
        try:
            action = json.loads(block.strip())
        except ValueError:
            found.errors.append("a tool call is not valid JSON")
            continue
        json_calls(action, tools, found)
    found.errors += unclosed(text, "<tool_call>", len(blocks))
    return found


_DEEPSEEK_DETAIL = re.compile(
    r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(?P<name>.*)\n```json\n(?P<arguments>.*)\n```<｜tool▁call▁end｜>",
    re.DOTALL,
)


def _deepseekv3(text: str, tools: Tools) -> Found:
    """``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>``."""
    return formats.deepseek_calls(text, tools, _DEEPSEEK_DETAIL, "function<｜tool▁sep｜>NAME ```json```")


# --------------------------------------------------------------------------- qwen3_coder
_CODER_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CODER_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_CODER_PARAMETER = re.compile(
    r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
)
_INT_TYPES = ("int", "uint", "long", "short", "unsigned")


def _coder_value(value: str, name: str, properties: dict[str, Any]) -> Any:
    """A ``<parameter>`` value typed by its schema (unknown parameters stay text)."""
    if value.lower() == "null":
        return None
    if name not in properties:
        return value
    spec = properties[name]
    kind = str(spec["type"]).strip().lower() if isinstance(spec, dict) and "type" in spec else "string"
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    if kind.startswith(_INT_TYPES):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return value
        integral = "." not in value and "e" not in value.lower() and number.is_integer()
        return int(number) if integral else number
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return literal(value)
    except ValueError:
        return value


def _coder_properties(name: str, offered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = offered.get(name, {})
    properties = params.get("properties", params) if isinstance(params, dict) else {}
    return properties if isinstance(properties, dict) else {}


def _qwen3_coder(text: str, tools: Tools) -> Found:
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``.

    As SGLang: a text with no closed block but a ``<function=`` is read whole (a call cut off
    by the length limit comes back with the parameters written so far); calls to tools that
    were not offered are passed on, their values as text.
    """
    start = text.find("<tool_call>")
    if start < 0:
        start = text.find("<function=")
    found = Found(text[:start] if start > 0 else "")
    offered = schemas(tools)
    blocks = _CODER_BLOCK.findall(text)
    found.errors += unclosed(text, "<tool_call>", len(blocks))
    if not blocks and "<function=" in text:
        blocks = [text]
    for block in blocks:
        functions = _CODER_FUNCTION.findall(block)
        if not functions:
            found.errors.append("a tool call without <function=NAME>")
        for closed, rest in functions:
            body = closed or rest
            if ">" not in body:
                found.errors.append("a tool call without <function=NAME>")
                continue
            name, params = body[: body.index(">")], body[body.index(">") + 1 :]
            if name not in offered:
                found.errors.append(f"unknown tool {name!r}")
            properties = _coder_properties(name, offered)
            arguments: dict[str, Any] = {}
            for match in _CODER_PARAMETER.findall(params):
                if ">" not in match:
                    continue
                key, value = match[: match.index(">")], match[match.index(">") + 1 :]
                value = value.removeprefix("\n").removesuffix("\n")
                arguments[key] = _coder_value(value, key, properties)
            found.calls.append((name, dump(arguments)))
    return found


# --------------------------------------------------------------------------- GLM
_GLM_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_GLM45_DETAIL = re.compile(r"<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>", re.DOTALL)
_GLM47_DETAIL = re.compile(r"<tool_call>(.*?)(<arg_key>.*?)?</tool_call>", re.DOTALL)
_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)


def schema_type(schema: Any) -> str | None:
    """The main JSON type of a parameter schema, as SGLang infers it (``type``, then
    ``anyOf``/``oneOf``, ``enum`` values, ``allOf``, ``properties``, ``items``); None if none."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and kind:
        return next((t for t in kind if t != "null"), "string")
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        kinds = [k for k in map(schema_type, options) if k]
        if kinds:
            return kinds[0] if len(set(kinds)) == 1 or "string" not in kinds else "string"
    if isinstance(schema.get("enum"), list):
        enum_kinds = {json_kind(v) for v in schema["enum"]}
        return enum_kinds.pop() if len(enum_kinds) == 1 else "string"
    if isinstance(schema.get("allOf"), list):
        return next((k for k in map(schema_type, schema["allOf"]) if k and k != "string"), "string")
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _number(value: str) -> Any:
    try:
        return float(value) if "." in value or "e" in value.lower() else int(value)
    except ValueError:
        return value


def _glm_value(raw: str, kind: str | None) -> Any:
    """An ``<arg_value>``: JSON, then JSON inside quotes, then a Python literal, then the text."""
    for text in (raw, None):
        try:  # the second try reads the value as the inside of a JSON string first
            value = json.loads(raw if text is not None else json.loads('{"tmp": "' + raw + '"}')["tmp"])
        except (ValueError, KeyError, TypeError):
            continue
        return _number(value) if kind == "number" and isinstance(value, str) else value
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
    except Exception as err:  # noqa: BLE001 - SGLang gives up on the whole text here
        raise Unparseable(f"an argument value cannot be read ({err})") from None


def _glm_arguments(pairs: list[tuple[str, str]], properties: dict[str, Any]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for raw_key, raw in pairs:
        key = raw_key.strip()
        kind = schema_type(properties.get(key)) if key in properties else None
        value = _glm_value(raw, kind)
        if kind == "string" and not isinstance(value, str):
            value = dump(value) if isinstance(value, dict | list) else str(value)
        arguments[key] = value
    return arguments


def _glm(text: str, tools: Tools, detail: re.Pattern[str], between: bool) -> Found:
    """``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>``: GLM-4.5/4.6
    write a newline after the name (a call without one is skipped), GLM-4.7/5 need none and
    keep the text between and after the calls (``between``)."""
    blocks = list(_GLM_BLOCK.finditer(text))
    if between:
        kept, last = [], 0
        for block in blocks:
            kept.append(text[last : block.start()])
            last = block.end()
        normal = "".join([*kept, text[last:]]).strip()
    else:
        normal = text[: text.find("<tool_call>")].strip()
    found = Found(normal)
    offered = schemas(tools)
    for block in blocks:
        match = detail.search(block.group(0))
        if match is None:
            found.errors.append("a tool call without a newline after its name")
            continue
        name, args = match.group(1) or "", match.group(2) or ""
        pairs = _GLM_PAIR.findall(args)
        if args.count("<arg_key>") > len(pairs):
            found.errors.append("an <arg_key> without its <arg_value>")
        params = offered.get(name, {})
        properties = params.get("properties") if isinstance(params, dict) else None
        arguments = _glm_arguments(pairs, properties if isinstance(properties, dict) else {})
        json_calls({"name": name, "parameters": arguments}, tools, found)
    found.errors += unclosed(text, "<tool_call>", len(blocks))
    return found


def _glm45(text: str, tools: Tools) -> Found:
    return _glm(text, tools, _GLM45_DETAIL, between=False)


def _glm47(text: str, tools: Tools) -> Found:
    return _glm(text, tools, _GLM47_DETAIL, between=True)


# --------------------------------------------------------------------------- entry point
#: SGLang ``--tool-call-parser`` name -> the format its detector reads
FORMATS: dict[str, Format] = {
    "qwen": Format("<tool_call>\n", "<tool_call>", _qwen25),
    "qwen25": Format("<tool_call>\n", "<tool_call>", _qwen25),
    "hermes": Format("<tool_call>", "<tool_call>", _hermes),
    "qwen3_coder": Format("<tool_call>", "<tool_call>", _qwen3_coder),
    "glm45": Format("<tool_call>", "<tool_call>", _glm45),
    "glm": Format("<tool_call>", "<tool_call>", _glm45),
    "glm47": Format("<tool_call>", "<tool_call>", _glm47),
    "deepseekv3": Format("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", _deepseekv3),
    "deepseekv31": Format("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", formats.deepseekv31),
    "kimi_k2": Format("<|tool_calls_section_begin|>", "<|tool_call_begin|>", formats.kimi_k2),
    "minimax-m2": Format("<minimax:tool_call>", "<invoke name=", formats.minimax_m2),
    "llama3": Format("<|python_tag|>", "<|python_tag|>", formats.llama3, formats.llama3_detects),
    "mimo": Format("<tool_call>", "<function=", formats.mimo),
    "gemma4": Format("<|tool_call>", "<|tool_call>", formats.gemma4),
}


def parse_tool_calls(parser: str, text: str, tools: Tools | None) -> ToolCallText:
    """The calls in an answer text (reasoning already split off), as SGLang's server reads them.

    No tools offered (or ``tool_choice`` none): nothing is parsed, as SGLang does; a call the
    model wrote anyway is reported. A text whose calls all fail comes back whole as content.

    :param parser: an SGLang tool-call parser name (a key of :data:`FORMATS`).
    :param text: the completion's text after its reasoning, special tokens kept.
    :param tools: the request's tools in OpenAI form.
    :raises KeyError: for a parser name not in :data:`FORMATS`.
    """
    form = FORMATS[parser]
    if not form.has_call(text):
        hinted = form.hint in text and bool(tools)
        return ToolCallText(text, errors=[f"a tool call not in the {form.marker!r} form"] if hinted else [])
    if not tools:
        return ToolCallText(text, errors=["a tool call while no tools were offered"])
    try:
        found = form.parse(text, tools)
    except Unparseable as err:
        return ToolCallText(text, errors=[str(err)])
    if not found.calls:
        return ToolCallText(text, errors=found.errors or ["no tool call could be read"])
    return ToolCallText(found.normal, found.calls, found.errors)
