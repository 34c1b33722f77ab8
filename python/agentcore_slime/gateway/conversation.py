"""A conversation in chat form: request messages normalized for the renderer, the previous call
a session remembers (:class:`ChainState`), a call's prompt ids (:class:`Prompt`), and why a call's
prompt does not extend the previous call's (the fork reasons of :mod:`.trace`).
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from typing import Any

from . import trace as fork


class RenderError(ValueError):
    """The messages cannot be rendered (bad roles, template error): a 400 for the agent."""


@dataclass
class Prompt:
    """Prompt ids for one call and how they were built.

    The ids are an ``array('i')``, never a list, while the call waits for the engine: a list
    of 10k ints per call in flight is millions of slots for every full garbage collection to
    visit (tens of ms at a few hundred calls in flight).

    :param ids: the ids sent to the engine.
    :param token_mode: ``bridged`` (extends the previous prompt + completion) or ``rendered``.
    :param chain_break: why a cumulative-mode call was rendered in full ("" if bridged or
        the session has no previous call).
    """

    ids: array[int]
    token_mode: str
    chain_break: str = ""

    @property
    def token_ids(self) -> list[int]:
        """The ids as a new list."""
        return self.ids.tolist()


@dataclass
class ChainState:
    """What cumulative mode remembers about a session's previous call.

    The call's prompt + completion are ``ids[:end]`` (``end`` = ``len(ids)`` by default): the
    state before the last call shares the newer call's array when that call extended it,
    and the array is the trace store's own, so a session holds its ids once, as
    ``array('i')`` (4 bytes an id, no objects for the garbage collector to walk).
    """

    ids: array[int]
    prompt_len: int
    messages: list[dict[str, Any]]
    response: dict[str, Any]
    tools_key: str
    end: int = -1

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = len(self.ids)

    @property
    def sequence(self) -> array[int]:
        """The call's prompt + completion ids."""
        return self.ids if self.end == len(self.ids) else self.ids[: self.end]

    @property
    def prompt_ids(self) -> array[int]:
        return self.ids[: self.prompt_len]

    @property
    def completion_ids(self) -> array[int]:
        return self.ids[self.prompt_len : self.end]


def _text_of(content: Any) -> str | None:
    """OpenAI content (str, None or a list of parts) -> text (parts joined, non-text dropped)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                raise RenderError(f"unsupported content part {part!r}: only text parts are supported")
        return "".join(texts)
    raise RenderError(
        f"message content must be a string, null or a list of parts, not {type(content).__name__}"
    )


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def normalize_messages(messages: list[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """OpenAI request messages -> the plain form renderers and chat templates take.

    Content part lists become text (no content: ``""``), ``developer`` becomes ``system``,
    tool-call ``arguments`` become dicts, wire ids (tool call ids, ``tool_call_id``) are dropped.
    Each message is normalized on its own.

    :param start: the index of ``messages[0]`` in the request (for error messages).
    :raises RenderError: on an unknown role or unsupported content.
    """
    out = []
    for i, msg in enumerate(messages, start):
        role = msg.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise RenderError(
                f"messages[{i}].role {role!r} is not one of system, developer, user, assistant, tool"
            )
        # no content is "", as SGLang's own chat route gives it to the template (0.5.13
        # serving_chat.py:734): published templates test it as a string ('</think>' in content)
        text = _text_of(msg.get("content"))
        norm: dict[str, Any] = {"role": role, "content": "" if text is None else text}
        if role == "assistant":
            if msg.get("reasoning_content"):
                norm["reasoning_content"] = str(msg["reasoning_content"])
            calls = []
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                calls.append(
                    {
                        "type": "function",
                        "function": {"name": fn.get("name"), "arguments": _arguments(fn.get("arguments"))},
                    }
                )
            if calls:
                norm["tool_calls"] = calls
        if role == "tool" and msg.get("name"):
            norm["name"] = msg["name"]
        out.append(norm)
    return out


def tools_key(tools: list[dict[str, Any]] | None) -> str:
    """A stable fingerprint of the tools list (order kept, keys sorted)."""
    return json.dumps(tools or [], sort_keys=True)


def same_reply(echoed: dict[str, Any], returned: dict[str, Any]) -> bool:
    """Whether the assistant message an agent echoes is the reply the gateway returned.

    Loose on purpose: clients re-serialize tool arguments and drop reasoning. Same tool
    names with equal parsed arguments, and the same text ignoring whitespace.
    """

    def calls(msg: dict[str, Any]) -> list[tuple[Any, Any]]:
        return [
            (c["function"]["name"], _arguments(c["function"]["arguments"]))
            for c in msg.get("tool_calls") or []
        ]

    def words(msg: dict[str, Any]) -> list[str]:
        return (msg.get("content") or "").split()

    return calls(echoed) == calls(returned) and words(echoed) == words(returned)


def last_assistant(messages: list[dict[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)


def _without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "reasoning_content"}


def fork_reason(messages: list[dict[str, Any]], key: str, chain: ChainState, *, repeat: bool) -> str:
    """Name why a call's prompt does not start with the previous call's prompt + completion.

    :param messages: the call's normalized messages.
    :param key: :func:`tools_key` of its tools.
    :param chain: the previous call.
    :param repeat: the call sends the previous call's messages and tools again.
    :returns: one of :data:`.trace.FORK_REASONS`.
    """
    if repeat:
        return fork.REPEAT
    if key != chain.tools_key:
        return fork.TOOLS_CHANGED
    old = chain.messages
    k = last_assistant(messages)
    replied = k >= 0 and same_reply(messages[k], chain.response)
    if k < 0 or (old and messages[0] != old[0] and not replied):
        return fork.SUB_AGENT  # not this conversation's continuation: another one on the session
    head = messages[:k]
    if not replied:
        if head == old:
            return fork.REPLY_REWRITTEN
        return fork.CONTEXT_COMPACTED if len(head) < len(old) else fork.HISTORY_REWRITTEN
    if head == old:
        # the messages extend the previous call's, its tokens came out otherwise: a reply with
        # reasoning lost it (the agent or the template dropped it), else the text re-tokenized
        return fork.REASONING_DROPPED if chain.response.get("reasoning_content") else fork.RETOKENIZED
    if len(head) < len(old):
        return fork.CONTEXT_COMPACTED
    if len(head) > len(old):
        return fork.HISTORY_REWRITTEN
    first = next(i for i, (a, b) in enumerate(zip(head, old, strict=True)) if a != b)
    if old[first]["role"] == "tool":
        return fork.TOOL_RESULT_CHANGED
    if _without_reasoning(head[first]) == _without_reasoning(old[first]):
        return fork.REASONING_DROPPED
    return fork.HISTORY_REWRITTEN


def extends(ids: array[int], chain: ChainState) -> bool:
    """Whether prompt ``ids`` start with the previous call's prompt + completion (C-level compare)."""
    return len(ids) >= chain.end and ids[: chain.end] == chain.sequence
