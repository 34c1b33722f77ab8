"""Chat-template text -> ids, exactly as the model's tokenizer encodes the text whole, with the
long pieces every session shares (a system prompt, tool schemas) taken from a cache.

A Hugging Face tokenizer cuts a text at its added tokens before anything else: the normalizer,
the pre-tokenizer and the model then run on each piece between them, so the ids of a text are
its pieces' ids with the added tokens' ids between them. That holds when the tokens cut match
only themselves (no ``lstrip``/``rstrip``/``single_word``, not ``normalized``) and the
pre-tokenizer treats every piece alike (a Metaspace that marks only the text's first piece does
not). :class:`PromptEncoder` checks both once per tokenizer, when the gateway starts: the added
special tokens' settings, then probe texts encoded whole and in pieces. Where the check passes,
a long render is encoded as its long pieces (from the cache, or encoded and kept) and the
stretches between them, cut only at special tokens; elsewhere every text is encoded whole.
Both ways are ``encode_batch`` calls of the Rust tokenizer, which release the GIL.
"""

from __future__ import annotations

import logging
import re
import threading
from array import array
from collections import OrderedDict
from typing import Any

logger = logging.getLogger(__name__)

CACHE_MIN_CHARS = 2048  # a piece this long is cached (a system prompt, tool schemas); shorter
# text is cheaper to encode again than to look up and join
CACHE_CHARS = 8_000_000  # characters of cached pieces kept (least recently used go first)

# Texts put between the special tokens of the probes: what starts and ends a piece in a render
# (newlines, spaces, words, digits, punctuation, non-ASCII), so that a tokenizer treating a
# piece's start or end specially is caught.
_PROBE_FILLERS = ("", "a", " a", "system\n", "\n", "\n\n", "  x ", "12 34", "é ü", "\t{", "Ça va?\n ")


def _splitting_tokens(backend: Any) -> list[str]:
    """The added special tokens a text may be cut at: those that match only themselves."""
    tokens = []
    for added in backend.get_added_tokens_decoder().values():
        exact = not (added.lstrip or added.rstrip or added.single_word or added.normalized)
        if added.special and exact and added.content:
            tokens.append(str(added.content))
    return tokens


class PromptEncoder:
    """Encodes template text whole, or cut at special tokens with a cache when that is exact.

    :param backend: the model tokenizer's Rust ``tokenizers.Tokenizer`` (no truncation, no padding).
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._cache: OrderedDict[str, array[int]] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()
        self._cut: re.Pattern[str] | None = None
        tokens = _splitting_tokens(backend)
        if tokens and self._cuts_exactly(tokens):
            longest_first = sorted(tokens, key=len, reverse=True)
            self._cut = re.compile("|".join(re.escape(token) for token in longest_first))
        elif tokens:
            logger.info("prompt pieces are not encoded apart: the tokenizer's pieces depend on their place")

    @property
    def caches(self) -> bool:
        """Whether long pieces are encoded apart and cached (the start check passed)."""
        return self._cut is not None

    def _cuts_exactly(self, tokens: list[str]) -> bool:
        """Whether every probe text encodes whole to its pieces' ids joined (see the module).

        One probe per filler: every token, each between this filler and another one, so a
        tokenizer with hundreds of special tokens (DeepSeek's) is checked in a few calls.
        """
        for i, filler in enumerate(_PROBE_FILLERS):
            other = _PROBE_FILLERS[(i * 7 + 3) % len(_PROBE_FILLERS)]
            pieces = [filler]
            for j, token in enumerate(tokens):
                pieces += [token, other if j % 2 else filler]
            joined = array("i")
            for part in self._backend.encode_batch(pieces, add_special_tokens=False):
                joined += array("i", part.ids)
            if self.encode_whole("".join(pieces)) != joined:
                return False
        return True

    def encode_whole(self, text: str) -> array[int]:
        """The ids of ``text`` in one piece, the GIL released (``encode_batch`` of one text)."""
        return array("i", self._backend.encode_batch([text], add_special_tokens=False)[0].ids)

    def encode(self, text: str) -> array[int]:
        """The ids of ``text``: equal to :meth:`encode_whole`, long pieces from the cache."""
        if self._cut is None or len(text) < CACHE_MIN_CHARS:
            return self.encode_whole(text)
        parts = self._parts(text, self._cut)
        ids: dict[int, array[int]] = {}
        with self._lock:
            for i, (part, long) in enumerate(parts):
                hit = self._lookup(part) if long else None
                if hit is not None:
                    ids[i] = hit
        todo = [i for i in range(len(parts)) if i not in ids]
        encoded = self._backend.encode_batch([parts[i][0] for i in todo], add_special_tokens=False)
        ids.update((i, array("i", enc.ids)) for i, enc in zip(todo, encoded, strict=True))
        self._remember([(parts[i][0], ids[i]) for i in todo if parts[i][1]])
        out = array("i")
        for i in range(len(parts)):
            out += ids[i]
        return out

    @staticmethod
    def _parts(text: str, cut: re.Pattern[str]) -> list[tuple[str, bool]]:
        """``text`` as its long pieces between special tokens (``True``) and the stretches
        between those (special tokens included, ``False``); joined, they are the text."""
        parts: list[tuple[str, bool]] = []
        start = 0  # where the stretch not yet taken begins
        piece = 0  # where the current piece (text after the last special token) begins
        for match in [*cut.finditer(text), None]:
            end = len(text) if match is None else match.start()
            if end - piece >= CACHE_MIN_CHARS:
                if piece > start:
                    parts.append((text[start:piece], False))
                parts.append((text[piece:end], True))
                start = end
            if match is not None:
                piece = match.end()
        if start < len(text):
            parts.append((text[start:], False))
        return parts

    def _lookup(self, piece: str) -> array[int] | None:
        ids = self._cache.get(piece)
        if ids is not None:
            self._cache.move_to_end(piece)
        return ids

    def _remember(self, entries: list[tuple[str, array[int]]]) -> None:
        with self._lock:
            for piece, ids in entries:
                if piece in self._cache or len(piece) > CACHE_CHARS // 8:
                    continue
                self._cache[piece] = ids
                self._cached_chars += len(piece)
            while self._cached_chars > CACHE_CHARS:
                piece, _ = self._cache.popitem(last=False)
                self._cached_chars -= len(piece)
