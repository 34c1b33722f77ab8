"""The gateway's bounds against clients that send too much or too slowly (issue 23).

- :class:`TokenFloor`: a cheap lower bound on a prompt's token count from the UTF-8 size of
  its text and the longest token of the vocabulary, so that a prompt that cannot fit the
  context is refused before its full render (seconds of CPU for megabytes of text).
- :class:`ConnectionCap`: at most N client connections; at the cap, a connection without a call
  in progress is closed to make room, those that never sent a request on a live session first
  and the crowded peer's first (each peer holds a bounded number of them), so that slow, stalled
  or flooding clients cannot starve the agents of connections or open files; a call on a live
  session is never closed, its slow body included.
- :func:`raise_open_files_limit`: the soft open-files limit raised to the hard one at start.
"""

from __future__ import annotations

import asyncio
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
PROTECTED_PER_SESSION = 8  # calls of one session whose connection is never closed to make room
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
    """Admit at most ``cap`` client connections to an aiohttp server; make room by closing
    connections that are not serving a call, the least proven first (issue 43):

    1. connections that never sent a complete request head on a live session (a half-sent head,
       an idle connection, a request to no session), from the peer address that holds the most
       of them, oldest first; besides, one peer holds at most ``per_peer`` of them (its oldest
       is closed when it opens another);
    2. idle keep-alive connections that served a call of a live session, oldest first;
    3. never a connection whose call on a live session is in progress, its body still arriving
       included (up to :data:`PROTECTED_PER_SESSION` calls of one session at once; more stay
       closable until their body has arrived): the session id is the call's credential.

    Connections on another kind of socket (the admin routes' Unix socket) are not counted.
    Closes are counted (:attr:`closed`) and logged: the first at once, then once a minute.

    Put :meth:`middleware` in the application (it marks the connections whose request is being
    handled), :meth:`attach` the runner's server, and use :meth:`factory` as the protocol
    factory of ``loop.create_server``.

    :param cap: the most connections open at once.
    :param per_peer: the most unproven connections of one peer address (default: half the cap).
    """

    late_methods = frozenset({"POST"})
    late_prefix = "/sessions/"  # agent calls, every protocol: the route marks them (call_on)
    report_every = 60.0  # seconds between two log lines about closed connections

    def __init__(self, cap: int, per_peer: int | None = None) -> None:
        self.server: web.Server | None = None
        self.cap = cap
        self.per_peer = per_peer or max(8, cap // 2)
        self.closed = 0  # connections closed to make room, since the start
        self._peer: dict[RequestHandler, str] = {}  # every counted connection -> its peer address
        self._unproven: dict[str, dict[RequestHandler, None]] = {}  # peer -> its unproven, oldest first
        self._proven: dict[RequestHandler, None] = {}  # idle ones that served a live session's call
        self._trusted: set[RequestHandler] = set()  # those that ever did
        self._busy: dict[RequestHandler, int] = {}  # requests in progress per connection
        self._calls: dict[str, int] = {}  # protected calls in progress per session
        self._window: dict[str, int] = {}  # closes per peer since the last log line
        self._reporting = False

    def attach(self, server: web.Server) -> None:
        """Serve for ``server`` (an :class:`aiohttp.web.AppRunner`'s); its connections are
        followed from when they are made to when they are lost."""
        self.server = server
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: RequestHandler, transport: Any) -> None:
            made(handler, transport)
            self._admit(handler, transport)

        def connection_lost(handler: RequestHandler, exc: BaseException | None = None) -> None:
            lost(handler, exc)
            self._forget(handler)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def factory(self) -> RequestHandler:
        assert self.server is not None
        needed = len(self._peer) - self.cap + 1
        if needed > 0:
            self._make_room(needed)
        return self.server()

    # ------------------------------------------------------------------ following connections
    def _admit(self, handler: RequestHandler, transport: Any) -> None:
        peername = transport.get_extra_info("peername") if transport is not None else None
        if not isinstance(peername, tuple):  # not TCP: the admin socket
            return
        peer = str(peername[0])
        while len(self._unproven.get(peer, ())) >= self.per_peer:
            self._close(next(iter(self._unproven[peer])))
        self._peer[handler] = peer
        self._unproven.setdefault(peer, {})[handler] = None

    def _forget(self, handler: RequestHandler) -> None:
        peer = self._peer.pop(handler, None)
        if peer is None:
            return
        self._proven.pop(handler, None)
        self._trusted.discard(handler)
        self._busy.pop(handler, None)
        mine = self._unproven.get(peer)
        if mine is not None:
            mine.pop(handler, None)
            if not mine:
                del self._unproven[peer]

    def _set_idle(self, handler: RequestHandler, proven: bool) -> None:
        peer = self._peer.get(handler)
        if peer is None or handler in self._busy:
            return
        if proven:
            self._trusted.add(handler)
        if handler in self._trusted:
            self._proven[handler] = None  # the newest idle one
        else:
            self._unproven.setdefault(peer, {})[handler] = None

    def _set_busy(self, handler: RequestHandler) -> None:
        self._busy[handler] = self._busy.get(handler, 0) + 1
        peer = self._peer.get(handler)
        if peer is not None:
            self._proven.pop(handler, None)
            mine = self._unproven.get(peer)
            if mine is not None:
                mine.pop(handler, None)

    # ------------------------------------------------------------------ making room
    def _make_room(self, needed: int) -> None:
        while needed > 0:
            victim = self._least_proven()
            if victim is None:
                logger.warning(
                    "%d client connections, all with a call in progress (cap %d)", len(self._peer), self.cap
                )
                return
            self._close(victim)
            needed -= 1

    def _least_proven(self) -> RequestHandler | None:
        if self._unproven:
            crowded = max(self._unproven.values(), key=len)
            if crowded:
                return next(iter(crowded))
        return next(iter(self._proven), None)

    def _close(self, handler: RequestHandler) -> None:
        peer = self._peer.get(handler, "?")
        self._forget(handler)
        handler.force_close()
        self.closed += 1
        self._window[peer] = self._window.get(peer, 0) + 1
        if not self._reporting:
            self._reporting = True
            self._report(first=True)

    def _report(self, first: bool = False) -> None:
        """Log the closes since the last line (one line at most per :attr:`report_every`)."""
        window, self._window = self._window, {}
        if not window:
            self._reporting = False
            return
        peers = sorted(window.items(), key=lambda item: -item[1])[:3]
        logger.warning(
            "closed %d client connection(s) %s to make room (cap %d, %d unproven per peer address): "
            "connections that had not sent a request on a live session or sat idle; most from %s "
            "(%d closed since the start; anyone who can reach the gateway's port can open connections: "
            "see docs/launcher.md, operator's section)",
            sum(window.values()),
            "just now" if first else f"in the last {self.report_every:g} s",
            self.cap,
            self.per_peer,
            ", ".join(f"{peer} ({count})" for peer, count in peers),
            self.closed,
        )
        asyncio.get_running_loop().call_later(self.report_every, self._report)

    # ------------------------------------------------------------------ marking requests
    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Marks the connection busy while its request is handled; agent calls (``late``) are
        marked by their route (:meth:`call_on`, :meth:`serving`), which knows their session."""
        if request.method in self.late_methods and request.path.startswith(self.late_prefix):
            return await handler(request)  # type: ignore[no-any-return]
        with self.serving(request):
            return await handler(request)  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def call_on(self, request: web.Request, session: str) -> Iterator[None]:
        """A call on the live session ``session`` (its head has arrived): its connection is not
        closed to make room while this lasts, body still arriving included, for up to
        :data:`PROTECTED_PER_SESSION` calls of the session at once; afterwards it counts as proven."""
        if self._calls.get(session, 0) >= PROTECTED_PER_SESSION:
            yield  # more calls of one session at once than agents make: closable until the body arrived
            return
        self._calls[session] = self._calls.get(session, 0) + 1
        try:
            with self.serving(request, proven=True):
                yield
        finally:
            left = self._calls.pop(session) - 1
            if left:
                self._calls[session] = left

    @contextlib.contextmanager
    def serving(self, request: web.Request, proven: bool = False) -> Iterator[None]:
        """Its connection is not closed to make room while this lasts."""
        protocol = request.protocol
        self._set_busy(protocol)
        try:
            yield
        finally:
            left = self._busy.pop(protocol, 1) - 1
            if left:
                self._busy[protocol] = left
            else:
                self._set_idle(protocol, proven)


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
