"""The gateway's bounds against clients that send too much or too slowly (issue 23).

- :class:`TokenFloor`: a cheap lower bound on a prompt's token count from the UTF-8 size of
  its text and the longest token of the vocabulary, so that a prompt that cannot fit the
  context is refused before its full render (seconds of CPU for megabytes of text).
- :class:`ConnectionCap`: at most N client connections; at the cap, the oldest connection
  without a request in progress (a half-sent head, an idle keep-alive) is closed to make room,
  so that slow or stalled clients cannot starve the others of connections or open files.
- :func:`raise_open_files_limit`: the soft open-files limit raised to the hard one at start.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import resource
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

logger = logging.getLogger(__name__)

FD_RESERVE = 64  # open files kept for the engine's pool, the render worker's pipes, logs
MARGIN_BYTES = 8  # bytes a text chunk may merge with the text around it (normalized or tokenized)
FLOOR_CHUNK_CHARS = 64 * 1024  # text measured per C call: the event loop gets the GIL in between
_UNICODE_FORMS = {"NFC", "NFD", "NFKC", "NFKD"}
_DROPPING_PRE_TOKENIZERS = ("Whitespace", "BertPreTokenizer", "Removed", "CharDelimiterSplit")


def raise_open_files_limit() -> int:
    """Raise this process's soft open-files limit to its hard limit; return the soft limit now.

    Each client connection and each engine request holds a file: with a low soft limit (1024
    is common) a few hundred connections exhaust it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as err:
            logger.info("cannot raise the open-files limit from %d to %d: %s", soft, target, err)
    return soft


def connection_cap(configured: int, open_files: int) -> int:
    """Client connections served at once: the configured cap, within the open-files limit
    (each served call also holds an engine connection, hence half of what is left)."""
    return max(8, min(configured, (open_files - FD_RESERVE) // 2))


class ConnectionCap:
    """Admit at most ``cap`` connections to an aiohttp server; make room by closing the oldest
    connection that has no request in progress.

    Put :meth:`middleware` in the application (it marks the connections whose request is being
    handled), :meth:`attach` the runner's server, and use :meth:`factory` as the protocol
    factory of ``loop.create_server``.

    :param cap: the most connections open at once.
    """

    late_methods = frozenset({"POST"})
    late_prefix = "/sessions/"  # agent calls, every protocol: busy once their body has arrived

    def __init__(self, cap: int) -> None:
        self.server: web.Server | None = None
        self.cap = cap
        self.closed = 0  # connections closed to make room
        self._busy: dict[RequestHandler, int] = {}  # requests in progress per connection
        self._closing: set[RequestHandler] = set()

    def attach(self, server: web.Server) -> None:
        """Serve for ``server`` (an :class:`aiohttp.web.AppRunner`'s: it lists the connections)."""
        self.server = server

    def factory(self) -> RequestHandler:
        assert self.server is not None
        connections = self.server.connections
        if len(connections) >= self.cap:
            self._closing.intersection_update(connections)
            self._make_room(connections, len(connections) - len(self._closing) - self.cap + 1)
        return self.server()

    def _make_room(self, connections: list[RequestHandler], needed: int) -> None:
        for handler in connections:  # oldest first (the server keeps them in arrival order)
            if needed <= 0:
                return
            if handler in self._busy or handler in self._closing:
                continue
            self._closing.add(handler)
            handler.force_close()
            self.closed += 1
            needed -= 1
        if needed > 0:
            logger.warning(
                "%d client connections, all with a request in progress (cap %d)", len(connections), self.cap
            )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Marks the connection busy while its request is handled; requests with a body the
        handler reads itself (``late``) are marked by :meth:`serving` once it has arrived, so
        a connection stalled mid-body can still be closed to make room."""
        if request.method in self.late_methods and request.path.startswith(self.late_prefix):
            return await handler(request)  # type: ignore[no-any-return]
        with self.serving(request):
            return await handler(request)  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def serving(self, request: web.Request) -> Iterator[None]:
        """Its connection is not closed to make room while this lasts."""
        protocol = request.protocol
        self._busy[protocol] = self._busy.get(protocol, 0) + 1
        try:
            yield
        finally:
            left = self._busy.pop(protocol) - 1
            if left:
                self._busy[protocol] = left


class TokenFloor:
    """A lower bound on the tokens of a prompt, from its messages' text, without tokenizing.

    Every token stands for at most :attr:`longest` bytes of (normalized) text, so a prompt
    whose rendered text contains ``B`` bytes of message text has at least ``B / longest``
    tokens. Only text every chat template renders counts: the content of system, user and tool
    messages (a template may drop an assistant turn's reasoning). The bound is used only for
    BPE tokenizers whose pre-tokenizer keeps every byte (byte-level or metaspace, as chat
    models have); for others :attr:`longest` is 0 and the floor is 0.

    :param tokenizer: a transformers tokenizer (fast: its ``backend_tokenizer`` is read).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.longest = 0
        self.why_off = ""
        self._normalize = _identity
        self._ascii_kept = True  # the normalizer leaves ASCII text as it is (a Unicode form, or none)
        try:
            self._setup(tokenizer)
        except Exception as err:  # noqa: BLE001 - an unusual tokenizer: no floor, say why
            self.longest, self.why_off = 0, f"{type(err).__name__}: {err}"
        if not self.longest:
            logger.info("no token floor (%s): too-long prompts are refused after their render", self.why_off)

    def _setup(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            self.why_off = "not a fast tokenizer"
            return
        if type(backend.model).__name__ != "BPE":
            self.why_off = f"a {type(backend.model).__name__} model, not BPE"
            return
        pre = _state(backend.pre_tokenizer)
        if any(name in pre for name in _DROPPING_PRE_TOKENIZERS):
            self.why_off = "a pre-tokenizer that drops text"
            return
        self._normalize = _normalizer(backend.normalizer)
        self._ascii_kept = self._normalize is _identity or isinstance(self._normalize, functools.partial)
        byte_level = "ByteLevel" in pre
        self.longest = max(_token_bytes(token, byte_level) for token in tokenizer.get_vocab())

    def floor(self, messages: Iterable[dict[str, Any]]) -> int:
        """At least this many tokens render from ``messages`` (normalized messages)."""
        if not self.longest:
            return 0
        size = 0
        for message in messages:
            content = message.get("content")
            if message.get("role") == "assistant" or not isinstance(content, str) or not content:
                continue
            for start in range(0, len(content), FLOOR_CHUNK_CHARS):
                size += max(0, self._utf8_size(content[start : start + FLOOR_CHUNK_CHARS]) - MARGIN_BYTES)
        return size // self.longest

    def _utf8_size(self, text: str) -> int:
        """Bytes of ``text`` normalized (a chunk: each C call holds the GIL for well under 1 ms)."""
        if self._ascii_kept and text.isascii():  # a flag of the string: no normalizing, no encoding
            return len(text)
        return len(self._normalize(text).encode("utf-8", "surrogatepass"))


def _identity(text: str) -> str:
    return text


def _state(component: Any) -> str:
    """A tokenizers component's JSON ("" for none)."""
    if component is None:
        return ""
    state = component.__getstate__()
    return state.decode() if isinstance(state, bytes) else json.dumps(state)


def _normalizer(normalizer: Any) -> Any:
    """The tokenizer's normalizer as a function: Python's own for a plain Unicode form (fast on
    text that is normalized already), the tokenizer's otherwise."""
    if normalizer is None:
        return _identity
    kind = json.loads(_state(normalizer)).get("type")
    if kind in _UNICODE_FORMS:
        return functools.partial(unicodedata.normalize, kind)
    return normalizer.normalize_str


@functools.cache
def _byte_level_chars() -> frozenset[str]:
    """The 256 characters byte-level BPE writes bytes as (GPT-2's table): each is one byte."""
    spans = (("!", "~"), ("¡", "¬"), ("®", "ÿ"))
    printable = [c for low, high in spans for c in range(ord(low), ord(high) + 1)]
    extra = [256 + n for n in range(256 - len(printable))]
    return frozenset(chr(c) for c in [*printable, *extra])


def _token_bytes(token: str, byte_level: bool) -> int:
    """The most bytes of text a vocabulary entry can stand for (an upper bound: a byte-level
    character is one byte; anything else counts its UTF-8 length, e.g. ``▁`` 3 for a space)."""
    if not byte_level:
        return len(token.encode("utf-8", "surrogatepass"))
    table = _byte_level_chars()
    return sum(1 if c in table else len(c.encode("utf-8", "surrogatepass")) for c in token)


def fits(floor: int, context_length: int | None) -> bool:
    """Whether a prompt of at least ``floor`` tokens can leave room for one completion token."""
    return context_length is None or floor < context_length


__all__ = ["ConnectionCap", "TokenFloor", "connection_cap", "fits", "raise_open_files_limit"]
