"""What every tool-call format of :mod:`.tool_calls` is made of: a format (its marker and its
parser), what a parser found, the give-up of a whole text, and the helpers the formats share
(tool schemas, SGLang's rules for JSON call objects, unclosed blocks).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Tools = list[dict[str, Any]]


class Unparseable(Exception):
    """The detector gives up on the whole text (SGLang: an exception inside its parse)."""


@dataclass
class Found:
    """What a format's parser found: the text it keeps, the calls, one error per unreadable call."""

    normal: str
    calls: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Format:
    """One SGLang detector's format.

    :param marker: what SGLang's ``has_tool_call`` looks for.
    :param hint: the start of a call in this family (flags a call the marker does not match).
    :param parse: the parser of a text that has a call.
    :param detects: SGLang's ``has_tool_call`` where it is more than the marker in the text.
    """

    marker: str
    hint: str
    parse: Callable[[str, Tools], Found]
    detects: Callable[[str], bool] | None = None

    def has_call(self, text: str) -> bool:
        """Whether SGLang's server would parse ``text`` for calls."""
        return self.detects(text) if self.detects is not None else self.marker in text

    def seen_in(self, text: str) -> bool:
        """Whether ``text`` holds the start of a call of this format."""
        return self.has_call(text) or self.hint in text


# --------------------------------------------------------------------------- shared
def schemas(tools: Tools) -> dict[str, dict[str, Any]]:
    """Tool name -> its parameters schema (``{}`` when it has none)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str) and function["name"]:
            params = function.get("parameters")
            out.setdefault(function["name"], params if isinstance(params, dict) else {})
    return out


def dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as err:  # a set or bytes from a Python literal
        raise Unparseable(f"arguments are not JSON ({err})") from None


def json_calls(actions: Any, tools: Tools, found: Found) -> None:
    """JSON call objects (``name`` + ``arguments`` or ``parameters``) -> calls.

    As SGLang: a call to a tool that was not offered (or without a name) is left out; the
    arguments are ``parameters`` when truthy, else ``arguments`` (``{}`` when absent), passed
    on whatever they are. Anything but an object ends the whole parse.
    """
    names = schemas(tools)
    for action in actions if isinstance(actions, list) else [actions]:
        if not isinstance(action, dict):
            raise Unparseable("a tool call is not a JSON object")
        name = action.get("name")
        if isinstance(name, list | dict) and name:  # SGLang's lookup of the name fails on the text
            raise Unparseable("a tool call's name is not a string")
        if not (isinstance(name, str) and name in names):
            found.errors.append(f"unknown tool {name!r}" if name else "a tool call without a name")
            continue
        arguments = action.get("parameters") or action.get("arguments", {})
        if not isinstance(arguments, dict):
            found.errors.append(f"arguments of {name!r} are not an object")
        found.calls.append((name, dump(arguments)))


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value (``bool`` before ``int``: True is an int in Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "string"


def unclosed(text: str, start: str, closed: int) -> list[str]:
    """One error per ``start`` marker beyond the ``closed`` blocks that were matched."""
    return ["a tool call without its closing tag"] * max(0, text.count(start) - closed)


def literal(value: str) -> Any:
    """A Python literal's value (SGLang's last resort for a value), or raise ValueError."""
    try:
        return ast.literal_eval(value)
    except Exception as err:  # noqa: BLE001 - literal_eval raises many kinds on odd text
        raise ValueError(str(err)) from None
