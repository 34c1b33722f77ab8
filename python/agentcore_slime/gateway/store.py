"""Compact per-session trace storage: each call stores only what it adds.

A session's calls share most of their prompt: call N's prompt usually starts with call
N-1's prompt + completion (always in cumulative mode), and its request messages start with
call N-1's. Keeping every :class:`~.trace.CallTrace` whole costs turns x context (quadratic
in an episode's turns) and, as Python lists of ints and dicts, millions of objects for the
garbage collector to walk. Here a call keeps:

- the length of the prefix it shares with the previous call's prompt + completion, and only
  the ids after it, in ``array('i')`` (4 bytes an id, not an object);
- its completion ids (``array('i')``) and logprobs (``array('d')``: the engine's floats exactly);
- everything else (the request messages it adds, the reply message, sampling params, finish,
  latency...) as one JSON ``bytes`` blob.

A stored call is therefore a handful of objects, none of which the collector walks into.
:meth:`SessionTraces.calls` rebuilds the exact :class:`CallTrace` records.
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass, fields
from typing import Any

import orjson

from .trace import CallTrace

_ID_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs")
_META_FIELDS = tuple(f.name for f in fields(CallTrace) if f.name not in _ID_FIELDS)
_STANDARD_JSON = b"\x00"  # marks a blob orjson could not write (orjson's output never starts with it)


def pack(value: Any) -> bytes:
    """JSON bytes that :func:`unpack` reads back equal: integers beyond 64 bits, lone
    surrogates and non-finite floats (which orjson would write as null) included."""
    if not _finite_numbers(value):
        return _STANDARD_JSON + json.dumps(value).encode()
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, a lone surrogate
        return _STANDARD_JSON + json.dumps(value).encode()


def _finite_numbers(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (a call's new messages and metadata: a short walk)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float:
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def unpack(blob: bytes) -> Any:
    if blob.startswith(_STANDARD_JSON):
        return json.loads(blob[1:])
    return orjson.loads(blob)


def common_prefix(a: array[int], b: array[int]) -> int:
    """Length of the longest common prefix of two id arrays (C-speed slice compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n - 1  # prefix equality is monotone in the length: binary search
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _shared_messages(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> int:
    n = min(len(new), len(old))
    if new[:n] == old[:n]:
        return n
    return next(i for i in range(n) if new[i] != old[i])


@dataclass(frozen=True, slots=True)
class _Stored:
    """One call as stored: what it adds to the previous call.

    ``blob`` holds the trace's other fields, with ``messages`` replaced by the messages
    after the ``shared_messages`` it shares with the previous call.
    """

    shared_ids: int  # leading prompt ids equal to the previous call's prompt + completion
    new_prompt_ids: array[int]
    completion_ids: array[int]
    logprobs: array[float]
    shared_messages: int  # leading request messages equal to the previous call's
    blob: bytes

    @property
    def held_tokens(self) -> int:
        return len(self.new_prompt_ids) + len(self.completion_ids)

    @property
    def nbytes(self) -> int:
        """Bytes of its ids, logprobs and blob."""
        arrays = (self.new_prompt_ids, self.completion_ids, self.logprobs)
        return sum(a.itemsize * len(a) for a in arrays) + len(self.blob)


class SessionTraces:
    """A session's calls in call order. Not thread-safe: the gateway guards it."""

    def __init__(self) -> None:
        self._calls: list[_Stored] = []
        self._last_ids: array[int] = array("i")  # the last call's prompt + completion
        self._last_messages: list[dict[str, Any]] = []  # the last call's request messages
        self._undo: tuple[array[int], list[dict[str, Any]]] | None = None

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def last_ids(self) -> array[int]:
        """The last call's prompt + completion (shared, never modified in place)."""
        return self._last_ids

    @property
    def held_tokens(self) -> int:
        """Ids stored (prompt ids each call added + completion ids): memory is linear in it."""
        return sum(call.held_tokens for call in self._calls)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored ids, logprobs and blobs (object headers not counted)."""
        return sum(call.nbytes for call in self._calls)

    def append(self, trace: CallTrace, prompt_ids: array[int] | None = None) -> None:
        """Store a call (undo it with :meth:`pop_last` until the next append).

        :param prompt_ids: the call's prompt ids as ``array('i')``, when the caller has them;
            then ``trace.prompt_token_ids`` is not read (the gateway leaves it empty).
        """
        prompt = prompt_ids if prompt_ids is not None else array("i", trace.prompt_token_ids)
        shared = common_prefix(prompt, self._last_ids)
        messages = trace.messages
        shared_msgs = _shared_messages(messages, self._last_messages)
        meta = {name: getattr(trace, name) for name in _META_FIELDS}
        meta["messages"] = messages[shared_msgs:]
        stored = _Stored(
            shared,
            prompt[shared:],
            array("i", trace.completion_token_ids),
            array("d", trace.logprobs),
            shared_msgs,
            pack(meta),
        )
        self._undo = (self._last_ids, self._last_messages)
        self._calls.append(stored)
        self._last_ids = prompt + stored.completion_ids
        self._last_messages = [*self._last_messages[:shared_msgs], *messages[shared_msgs:]]

    def pop_last(self) -> None:
        """Undo the last :meth:`append` (its reply never reached the client)."""
        if self._undo is None:
            raise RuntimeError("nothing to undo")
        self._calls.pop()
        self._last_ids, self._last_messages = self._undo
        self._undo = None

    def snapshot(self) -> list[_Stored]:
        """The stored calls as of now (cheap; rebuild them with :func:`rebuild` outside any lock)."""
        return list(self._calls)

    def calls(self) -> list[CallTrace]:
        """The exact traces, rebuilt in call order."""
        return rebuild(self._calls)


def rebuild(stored: list[_Stored]) -> list[CallTrace]:
    """The exact :class:`CallTrace` records of stored calls, in call order."""
    out: list[CallTrace] = []
    ids: array[int] = array("i")
    messages: list[dict[str, Any]] = []
    for call in stored:
        prompt = ids[: call.shared_ids] + call.new_prompt_ids
        meta = unpack(call.blob)
        messages = [*messages[: call.shared_messages], *meta.pop("messages")]
        out.append(
            CallTrace(
                prompt_token_ids=prompt.tolist(),
                completion_token_ids=call.completion_ids.tolist(),
                logprobs=call.logprobs.tolist(),
                messages=messages,
                **meta,
            )
        )
        ids = prompt + call.completion_ids
    return out
