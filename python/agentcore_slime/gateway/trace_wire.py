"""A session's stored calls as bytes: how traces cross from the gateway process to the rollout.

JSON lists of ints cost ~7 bytes and a Python object per id on each side; a session of long
multi-turn calls holds hundreds of thousands of ids. Here each stored call
(:class:`~.store._Stored`: only what the call adds to the previous one) goes as it is stored:
its shared-prefix lengths, its JSON blob (the messages it adds and the trace's metadata,
written by :func:`~.store.pack`), then the raw little-endian bytes of its id arrays
(``int32``) and logprobs (``float64``, so every double comes back bit for bit). The reader
rebuilds exact :class:`~.trace.CallTrace` records with :func:`~.store.rebuild`.

Layout (all integers little-endian)::

    b"ACTW" u8 version u32 calls
    per call: u32 shared_ids u32 shared_messages u32 blob_bytes u32 new_prompt_ids u32 completion_ids
              u32 logprobs | blob | int32 x new_prompt_ids | int32 x completion_ids | float64 x logprobs
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import Any

from .store import _Stored, link

MAGIC = b"ACTW"
VERSION = 2
_START = struct.Struct("<4sBI")
_CALL = struct.Struct("<IIIIII")
if array("i").itemsize != 4 or array("d").itemsize != 8:  # the store's arrays; true on every CPython target
    raise ImportError("trace_wire needs 4-byte array('i') and 8-byte array('d')")


def _little_endian(values: array[Any]) -> bytes:
    if sys.byteorder == "little":
        return values.tobytes()
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped.tobytes()


def _from_little_endian(typecode: str, data: memoryview) -> array[Any]:
    values: array[Any] = array(typecode)
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def encode(calls: list[_Stored]) -> bytes:
    """The stored calls of one session, in call order, as bytes (see the module docstring)."""
    parts = [_START.pack(MAGIC, VERSION, len(calls))]
    for call in calls:
        counts = (len(call.new_prompt_ids), len(call.completion_ids), len(call.logprobs))
        parts.append(_CALL.pack(call.shared_ids, call.shared_messages, len(call.blob), *counts))
        parts += [call.blob, _little_endian(call.new_prompt_ids), _little_endian(call.completion_ids)]
        parts.append(_little_endian(call.logprobs))
    return b"".join(parts)


def decode(data: bytes) -> list[_Stored]:
    """The stored calls :func:`encode` wrote.

    :raises ValueError: the bytes are not (a complete) encoding of this version.
    """
    view = memoryview(data)
    if len(view) < _START.size:
        raise ValueError(f"trace bytes too short ({len(view)} bytes)")
    magic, version, count = _START.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not trace bytes of version {VERSION} (magic {bytes(magic)!r}, version {version})")
    offset = _START.size
    deltas = []
    for number in range(count):
        if offset + _CALL.size > len(view):
            raise ValueError(f"trace bytes end inside call {number} of {count}")
        shared_ids, shared_messages, size, prompt, completion, logprobs = _CALL.unpack_from(view, offset)
        offset += _CALL.size
        end = offset + size + 4 * (prompt + completion) + 8 * logprobs
        if end > len(view):
            raise ValueError(f"trace bytes end inside call {number} of {count}")
        blob = bytes(view[offset : offset + size])
        offset += size
        ids = _from_little_endian("i", view[offset : offset + 4 * prompt])
        offset += 4 * prompt
        out = _from_little_endian("i", view[offset : offset + 4 * completion])
        offset += 4 * completion
        probs = _from_little_endian("d", view[offset : offset + 8 * logprobs])
        offset = end
        deltas.append((shared_ids, ids, out, probs, shared_messages, blob))
    if offset != len(view):
        raise ValueError(f"{len(view) - offset} bytes after the last of {count} calls")
    return link(deltas)
