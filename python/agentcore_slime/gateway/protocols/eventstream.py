"""AWS event-stream framing (``application/vnd.amazon.eventstream``), as botocore reads it.

A message is: total length (4 bytes, big-endian), headers length (4), CRC32 of those 8
bytes (the prelude), the headers, the payload, and a CRC32 of everything before it. A
header is: name length (1 byte), name, value type (1 byte; 7 = string), value length (2
bytes), value. Reference: botocore's ``eventstream.py`` (``EventStreamMessage``,
``_validate_prelude``, ``_parse_headers``), which decodes what :func:`event_message` writes.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from ..wire import dump_json

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_STRING = 7  # header value type: a UTF-8 string with a 2-byte length


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return struct.pack(">B", len(key)) + key + struct.pack(">BH", _STRING, len(text)) + text


def message(headers: dict[str, str], payload: bytes) -> bytes:
    """One framed message."""
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return head + struct.pack(">I", zlib.crc32(head))


def event_message(event_type: str, payload: dict[str, Any]) -> bytes:
    """An event (``:message-type: event``) with a JSON payload, e.g. ``messageStart``."""
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return message(headers, dump_json(payload))
