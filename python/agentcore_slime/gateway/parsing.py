"""Sampled ids -> the assistant message (content, reasoning, tool calls) the agent gets.

The renderer splits off the reasoning; with an SGLang ``tool_call_parser`` name the answer is read
as SGLang's server reads it (:mod:`.tool_calls`), otherwise by the renderer's own parser. The
parser works over a tokenizer that remembers its repeated questions (:class:`MemoTokenizer`).
"""

from __future__ import annotations

import copy
import functools
import json
from array import array
from dataclasses import dataclass
from typing import Any

from .tool_calls import FORMATS as TOOL_CALL_FORMATS
from .tool_calls import parse_tool_calls
from .wire import new_id

PARSE_PROMPT_TAIL = 128  # prompt ids a completion parser sees: the generation prompt is in them
MEMO_TEXT_CHARS = 64  # parse-time encodes of texts up to this long are memoized (markers, headers)


class MemoTokenizer:
    """A tokenizer whose answers to the questions a completion parser asks on every call are
    remembered: ``encode`` of short texts (renderers encode the assistant header up to three
    times per parse), ``convert_tokens_to_ids`` of one token, and the special-token
    attributes, each a transformers Python round trip of 10-30 us. The answers are the
    tokenizer's own (it is never changed after loading); everything else goes to it as is.
    Made for the parsing renderer (:func:`parsing_view`); rendering uses the tokenizer itself.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._encode = functools.lru_cache(maxsize=256)(self._encode_short)
        self._token_id = functools.lru_cache(maxsize=256)(tokenizer.convert_tokens_to_ids)
        for name in ("all_special_tokens", "eos_token_id", "unk_token_id"):
            setattr(self, name, getattr(tokenizer, name, None))

    def _encode_short(self, text: str, add_special_tokens: bool) -> tuple[int, ...]:
        return tuple(self._tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def encode(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs or not isinstance(text, str) or len(text) > MEMO_TEXT_CHARS:
            return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens, **kwargs))
        return list(self._encode(text, add_special_tokens))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._token_id(tokens)
        return self._tokenizer.convert_tokens_to_ids(tokens)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def parsing_view(renderer: Any) -> Any:
    """``renderer`` for parsing completions: a shallow copy over a :class:`MemoTokenizer`
    (about half of renderers' ``parse_response`` time was those repeated questions), or
    ``renderer`` itself when it keeps its tokenizer elsewhere than ``_tokenizer``."""
    tokenizer = getattr(renderer, "_tokenizer", None)
    if tokenizer is None:
        return renderer
    view = copy.copy(renderer)
    view._tokenizer = MemoTokenizer(tokenizer)
    return view


@dataclass
class ParsedTurn:
    """One completion, parsed.

    :param message: the OpenAI assistant message the agent gets.
    :param tool_call_errors: one short reason per tool call in the text that could not be
        turned into a valid call (empty when there was none): the turn's flag on its trace.
    """

    message: dict[str, Any]
    tool_call_errors: list[str]


def _answer_text(renderer: Any, completion_ids: list[int], parsed: Any) -> str | None:
    """The completion's text after its reasoning, special tokens kept, cut at the first stop
    token as renderers cuts it; None when the reasoning never closed or ends in a form other
    than ``</think>`` (the renderer's own split then stands)."""
    if parsed.reasoning_complete is False:
        return None
    tokenizer = getattr(renderer, "_tokenizer", None)
    if tokenizer is None:
        return None
    stops = set(renderer.get_stop_token_ids())
    end = next((i for i, t in enumerate(completion_ids) if t in stops), len(completion_ids))
    text = str(tokenizer.decode(list(completion_ids[:end]), skip_special_tokens=False))
    head, close, tail = text.partition("</think>")
    if close and (parsed.reasoning_content is not None or head.strip() in ("", "<think>")):
        return tail
    return None if parsed.reasoning_content is not None else text


def _call(name: str | None, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    args = arguments if arguments is not None else {}
    return {
        "id": call_id or new_id("call_"),
        "type": "function",
        "function": {
            "name": name,
            "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
        },
    }


def parse_turn(
    renderer: Any,
    completion_ids: list[int],
    prompt_ids: list[int] | array[int],
    tools: list[dict[str, Any]] | None,
    tool_call_parser: str | None = None,
) -> ParsedTurn:
    """Sampled ids -> the assistant message (content, reasoning_content, tool_calls) and the
    tool calls that could not be read.

    The renderer splits off the reasoning. With an SGLang ``tool_call_parser`` name the answer
    text is read as SGLang's server reads it (:mod:`.tool_calls`); otherwise the renderer's own
    parser reads it (renderers families). Either way nothing is dropped in silence: when no call
    can be read the agent gets the whole text, and every unreadable call is reported.
    """
    from renderers import ToolCallParseStatus

    # the parser looks for the last turn's header (does the prompt open a reasoning block?):
    # its tail is enough, and scanning a 100k-token prompt per call is not free
    tail = prompt_ids[-PARSE_PROMPT_TAIL:]
    parsed = renderer.parse_response(completion_ids, tools=tools or None, prompt_ids=list(tail))
    content: str = parsed.content
    errors: list[str] = []
    if tool_call_parser in TOOL_CALL_FORMATS:
        text = _answer_text(renderer, completion_ids, parsed)
        found = parse_tool_calls(tool_call_parser, text, tools) if text is not None else None
        calls = [_call(name, args) for name, args in found.calls] if found else []
        seen = found is not None and TOOL_CALL_FORMATS[tool_call_parser].seen_in(found.content)
        if found and (found.calls or found.errors or seen):
            content, errors = found.content, found.errors  # else the renderer's text (no call in it)
    else:
        ok = ToolCallParseStatus.OK
        calls = [_call(c.name, c.arguments, c.id) for c in parsed.tool_calls if c.status == ok]
        errors = [str(c.status.value) for c in parsed.tool_calls if c.status != ToolCallParseStatus.OK]
        if errors and not calls:  # SGLang's rule: no call read, the whole text is the answer
            content = _answer_text(renderer, completion_ids, parsed) or content
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["content"] = content.strip() or None
        message["tool_calls"] = calls
    if parsed.reasoning_content:
        message["reasoning_content"] = parsed.reasoning_content
    return ParsedTurn(message, errors)


def parse_completion(
    renderer: Any,
    completion_ids: list[int],
    prompt_ids: list[int] | array[int],
    tools: list[dict[str, Any]] | None,
    tool_call_parser: str | None = None,
) -> dict[str, Any]:
    """Sampled ids -> OpenAI assistant message (content, reasoning_content, tool_calls);
    :func:`parse_turn` without the errors."""
    return parse_turn(renderer, completion_ids, prompt_ids, tools, tool_call_parser).message
