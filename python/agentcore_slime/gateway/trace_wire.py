"""A session's stored calls as bytes: how traces cross from the gateway process to the rollout.

JSON lists of ints cost ~7 bytes and a Python object per id on each side; a session of long
multi-turn calls holds hundreds of thousands of ids. Here each stored call
(:class:`~.store._Stored`: only what the call adds to the previous one) goes as it is stored:
its shared-prefix lengths, its JSON blob (the messages it adds and the trace's metadata,
written by :func:`~.store.pack`), then the raw little-endian bytes of its id arrays
(``int32``) and logprobs (``float64``, so every double comes back bit for bit), then its routed
experts (rollout routing replay: the rows it added, as the engine sent them). The reader
rebuilds exact :class:`~.trace.CallTrace` records with :func:`~.store.rebuild`.

Layout (all integers little-endian)::

    b"ACTW" u8 version u32 calls
    per call: u32 shared_ids u32 shared_messages u32 blob_bytes u32 new_prompt_ids u32 completion_ids
              u32 logprobs u32 routed_bytes (NO_ROUTED: none) | blob | int32 x new_prompt_ids
              | int32 x completion_ids | float64 x logprobs | routed bytes
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from typing import Any

from .store import _Stored, link

MAGIC = b"ACTW"
VERSION = 3
_START = struct.Struct("<4sBI")
_CALL = struct.Struct("<IIIIIII")
NO_ROUTED = 0xFFFFFFFF  # routed_bytes of a call without routed experts (None)
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
        routed = NO_ROUTED if call.routed is None else len(call.routed)
        parts.append(_CALL.pack(call.shared_ids, call.shared_messages, len(call.blob), *counts, routed))
        parts += [call.blob, _little_endian(call.new_prompt_ids), _little_endian(call.completion_ids)]
        parts.append(_little_endian(call.logprobs))
        if call.routed is not None:
            parts.append(call.routed)
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
        fields = _CALL.unpack_from(view, offset)
        shared_ids, shared_messages, size, prompt, completion, logprobs, routed = fields
        offset += _CALL.size
        routed_size = 0 if routed == NO_ROUTED else routed
        end = offset + size + 4 * (prompt + completion) + 8 * logprobs + routed_size
        if end > len(view):
            raise ValueError(f"trace bytes end inside call {number} of {count}")
        blob = bytes(view[offset : offset + size])
        offset += size
        ids = _from_little_endian("i", view[offset : offset + 4 * prompt])
        offset += 4 * prompt
        out = _from_little_endian("i", view[offset : offset + 4 * completion])
        offset += 4 * completion
        probs = _from_little_endian("d", view[offset : offset + 8 * logprobs])
        offset += 8 * logprobs
        rows = None if routed == NO_ROUTED else bytes(view[offset:end])
        offset = end
        deltas.append((shared_ids, ids, out, probs, shared_messages, blob, rows))
    if offset != len(view):
        raise ValueError(f"{len(view) - offset} bytes after the last of {count} calls")
    return link(deltas)


BATCH_MAGIC = b"ACTB"
_BATCH = struct.Struct("<4sI")


def encode_batch(results: list[dict[str, Any]], blobs: list[bytes]) -> bytes:
    """The reply to a batch of session operations: ``b"ACTB" u32 header_bytes``, the header
    (JSON: one result per operation; a result with ``"size"`` owns the next blob), the blobs.

    :param results: one dict per operation, in order (``status``, ``base_url``/``message``).
    :param blobs: the :func:`encode` bytes of the results that carry traces, in order.
    """
    sized = iter(blobs)
    header = []
    for result in results:
        if result.get("traces"):
            result = {**result, "size": len(next(sized))}
        header.append(result)
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_BATCH.pack(BATCH_MAGIC, len(head)), head, *blobs])


def decode_batch(data: bytes) -> list[tuple[dict[str, Any], bytes | None]]:
    """Each operation's result and its trace bytes (None without), as :func:`encode_batch` wrote them.

    :raises ValueError: not (a complete) batch reply.
    """
    view = memoryview(data)
    if len(view) < _BATCH.size:
        raise ValueError(f"batch reply too short ({len(view)} bytes)")
    magic, size = _BATCH.unpack_from(view)
    if magic != BATCH_MAGIC or _BATCH.size + size > len(view):
        raise ValueError(f"not a batch reply (magic {bytes(magic)!r}, header of {size} bytes)")
    offset = _BATCH.size + size
    header = json.loads(bytes(view[_BATCH.size : offset]))
    out: list[tuple[dict[str, Any], bytes | None]] = []
    for result in header:
        blob = None
        if "size" in result:
            end = offset + int(result["size"])
            if end > len(view):
                raise ValueError("batch reply ends inside a session's traces")
            blob, offset = bytes(view[offset:end]), end
        out.append((result, blob))
    if offset != len(view):
        raise ValueError(f"{len(view) - offset} bytes after the last result of the batch")
    return out
