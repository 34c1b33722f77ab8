"""Compact per-session trace storage: each call stores only what it adds.

A session's calls share most of their prompt: call N's prompt usually starts with call
N-1's prompt + completion (always in cumulative mode), and its request messages start with
call N-1's. Keeping every :class:`~.trace.CallTrace` whole costs turns x context (quadratic
in an episode's turns) and, as Python lists of ints and dicts, millions of objects for the
garbage collector to walk. Here a call keeps:

- the length of the prefix it shares with the previous call's prompt + completion, and only
  the ids after it, in ``array('i')`` (4 bytes an id, not an object);
- its completion ids (``array('i')``) and logprobs (``array('d')``: the engine's floats exactly);
- the routed experts the engine returned for it (rollout routing replay), as the bytes the
  engine sent: only the rows the call added (``routed_experts_start`` on), so a session holds
  each position's row once;
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

_ID_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs", "routed_experts")
_META_FIELDS = tuple(f.name for f in fields(CallTrace) if f.name not in _ID_FIELDS)
_STANDARD_JSON = b"\x00"  # marks a blob orjson could not write (orjson's output never starts with it)


def pack(value: Any) -> bytes:
    """JSON bytes that :func:`unpack` reads back equal: integers beyond 64 bits, lone
    surrogates and non-finite floats (which orjson would write as null) included."""
    if _finite_numbers(value):
        try:
            return orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, a lone surrogate
            pass
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


def shared_messages(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> int:
    """How many leading messages of ``new`` equal those of ``old``."""
    n = min(len(new), len(old))
    if new[:n] == old[:n]:
        return n
    return next(i for i in range(n) if new[i] != old[i])


@dataclass(frozen=True, slots=True)
class _Stored:
    """One call as stored.

    Its prompt is ``ids[:prompt_end]`` and its completion ``ids[prompt_end:end]``. ``ids`` is
    the session's id sequence, shared by every call that extended the one before it: each
    such call appended its new prompt ids and its completion to the same array, so a
    cumulative episode holds its ids once. ``blob`` holds the trace's other fields, with
    ``messages`` replaced by the messages after the ``shared_messages`` it shares with the
    previous call.
    """

    ids: array[int]
    shared_ids: int  # leading prompt ids equal to the previous call's prompt + completion
    prompt_end: int
    end: int
    logprobs: array[float]
    shared_messages: int  # leading request messages equal to the previous call's
    blob: bytes
    routed: bytes | None = None  # the routed-expert rows the engine returned (trace.routed_experts)

    @property
    def new_prompt_ids(self) -> array[int]:
        return self.ids[self.shared_ids : self.prompt_end]

    @property
    def completion_ids(self) -> array[int]:
        return self.ids[self.prompt_end : self.end]

    @property
    def held_tokens(self) -> int:
        """Ids this call added: its new prompt ids and its completion."""
        return self.end - self.shared_ids

    @property
    def nbytes(self) -> int:
        """Bytes of the ids it added, its logprobs and its blob."""
        ids = self.ids.itemsize * self.held_tokens
        routed = len(self.routed) if self.routed is not None else 0
        return ids + self.logprobs.itemsize * len(self.logprobs) + len(self.blob) + routed


class _Sequence:
    """The session's current id sequence (the last call's prompt + completion) and how a call
    extends it: in place when the call's prompt starts with all of it, else in a new array
    (the old one stays with the calls that use it)."""

    def __init__(self) -> None:
        self.ids: array[int] = array("i")
        self.end = 0

    def add(self, prompt: array[int], completion: array[int], shared: int) -> tuple[array[int], int, int]:
        """Extend by a call whose prompt shares ``shared`` leading ids with the sequence.

        :returns: the array holding the call, its prompt end and its end.
        """
        if shared == self.end == len(self.ids):
            ids = self.ids
            ids.extend(prompt[shared:])
        else:
            ids = self.ids[:shared] + prompt[shared:]
        prompt_end = len(ids)
        ids.extend(completion)
        self.ids, self.end = ids, len(ids)
        return ids, prompt_end, self.end


class SessionTraces:
    """A session's calls in call order. Not thread-safe: the gateway guards it."""

    def __init__(self) -> None:
        self._calls: list[_Stored] = []
        self._sequence = _Sequence()
        self._last_messages: list[dict[str, Any]] = []  # the last call's request messages
        #: leading positions of the sequence whose routed experts the stored calls hold
        self._routed_rows = 0
        self._undo: tuple[array[int], int, int, list[dict[str, Any]], int] | None = None

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def last_ids(self) -> array[int]:
        """The array holding the last call's prompt + completion, as its first ids (the
        sequence's end). Later calls may append to it in place; nothing else changes it."""
        return self._sequence.ids

    def routed_experts_start(self, prompt: array[int]) -> int:
        """Where a call of this prompt starts asking for routed experts (SGLang's
        ``routed_experts_start_len``): the leading positions it shares with the sequence whose
        rows the stored calls already hold. Bytes on the wire then grow with what a call adds."""
        sequence = self._sequence
        return min(common_prefix(prompt, sequence.ids[: sequence.end]), self._routed_rows)

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
        sequence = self._sequence
        shared = common_prefix(prompt, sequence.ids[: sequence.end])
        messages = trace.messages
        shared_msgs = shared_messages(messages, self._last_messages)
        meta = {name: getattr(trace, name) for name in _META_FIELDS}
        meta["messages"] = messages[shared_msgs:]
        blob = pack(meta)
        undo = (sequence.ids, sequence.end, len(sequence.ids), self._last_messages, self._routed_rows)
        self._undo = undo
        ids, prompt_end, end = sequence.add(prompt, array("i", trace.completion_token_ids), shared)
        logprobs = array("d", trace.logprobs)
        routed = trace.routed_experts
        self._calls.append(_Stored(ids, shared, prompt_end, end, logprobs, shared_msgs, blob, routed))
        self._last_messages = [*self._last_messages[:shared_msgs], *messages[shared_msgs:]]
        held = min(shared, self._routed_rows)
        self._routed_rows = routed_rows(trace.routed_experts_start, routed, held, end)

    def pop_last(self) -> None:
        """Undo the last :meth:`append` (its reply never reached the client)."""
        if self._undo is None:
            raise RuntimeError("nothing to undo")
        ids, end, length, self._last_messages, self._routed_rows = self._undo
        self._calls.pop()
        del ids[length:]  # what the call appended in place, if it did
        self._sequence.ids, self._sequence.end = ids, end
        self._undo = None

    def snapshot(self) -> list[_Stored]:
        """The stored calls as of now (cheap; rebuild them with :func:`rebuild` outside any lock)."""
        return list(self._calls)

    def calls(self) -> list[CallTrace]:
        """The exact traces, rebuilt in call order."""
        return rebuild(self._calls)


def routed_rows(start: int | None, routed: bytes | None, held: int, end: int) -> int:
    """Leading positions of a call's sequence (``end`` ids) whose routed experts the session
    holds after it: all but the last (never forwarded) when the engine returned the call's rows
    from a start within what was held (``held``: the rows before it that its prompt shares);
    else only ``held`` (none when the run does not replay routing)."""
    if start is None:
        return 0
    return end - 1 if routed is not None and start <= held else held


def link(
    deltas: list[tuple[int, array[int], array[int], array[float], int, bytes, bytes | None]],
) -> list[_Stored]:
    """Stored calls from what each added, in call order: ``(shared_ids, new_prompt_ids,
    completion_ids, logprobs, shared_messages, blob, routed)`` (as :mod:`.trace_wire` carries them)."""
    sequence = _Sequence()
    out = []
    for shared, new_prompt, completion, logprobs, shared_messages, blob, routed in deltas:
        if shared > sequence.end:
            raise ValueError(f"a call shares {shared} ids with a sequence of {sequence.end}")
        prompt = sequence.ids[:shared] + new_prompt
        ids, prompt_end, end = sequence.add(prompt, completion, shared)
        out.append(_Stored(ids, shared, prompt_end, end, logprobs, shared_messages, blob, routed))
    return out


def rebuild(stored: list[_Stored]) -> list[CallTrace]:
    """The exact :class:`CallTrace` records of stored calls, in call order."""
    out: list[CallTrace] = []
    messages: list[dict[str, Any]] = []
    for call in stored:
        if len(call.ids) < call.end:  # undone since the snapshot (its reply was not delivered)
            break
        meta = unpack(call.blob)
        messages = [*messages[: call.shared_messages], *meta.pop("messages")]
        out.append(
            CallTrace(
                prompt_token_ids=call.ids[: call.prompt_end].tolist(),
                completion_token_ids=call.ids[call.prompt_end : call.end].tolist(),
                logprobs=call.logprobs.tolist(),
                messages=messages,
                routed_experts=call.routed,
                **meta,
            )
        )
    return out
