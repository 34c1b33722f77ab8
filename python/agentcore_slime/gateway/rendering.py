"""Messages <-> token ids for the policy model: renderer choice, prompts, bridges, parsing.

Built on the ``renderers`` package (PrimeIntellect) and the model's own tokenizer loaded
from ``MODEL_DIR``. Three jobs:

- pick the renderer: an explicit family name, or one inferred from the model directory
  (config.json ``model_type``/``_name_or_path``, the tokenizer's name, the chat template);
  models no family fits (e.g. Qwen2.5-Instruct) use renderers' ``DefaultRenderer`` over the
  model's chat template with the tool/reasoning parsers mapped from SGLang's parser names;
- build prompt ids: a full render, or in cumulative mode a *bridge* that extends the
  previous call's prompt + sampled completion with tokens for the new messages only
  (``renderer.bridge_to_next_turn`` for renderers families; for chat-template models a
  gateway-side ChatML bridge, reference §8);
- parse sampled ids into an OpenAI assistant message.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcore_slime.errors import ConfigError
from agentcore_slime.settings.schema import REASONING_PARSERS, TOOL_CALL_PARSERS

from . import trace as fork
from .tool_calls import FORMATS as TOOL_CALL_FORMATS
from .tool_calls import parse_tool_calls
from .wire import new_id

logger = logging.getLogger(__name__)

# SGLang parser names -> renderers parser names (DefaultRenderer only) come from the settings
# schema: bin/train refuses any other name before anything starts.
# config.json model_type -> renderers family, for model dirs whose name is not a Hub id.
MODEL_TYPE_FAMILIES: dict[str, str] = {
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "gpt_oss": "gpt-oss",
    "glm4_moe": "glm-4.5",
    "kimi_k2": "kimi-k2",
    "minimax_m2": "minimax-m2",
}
WINDOW_STANDIN = "(first message)"  # stands for the first message's text in a bridge's window
CHAT_TEMPLATE_FAMILY = "default"  # renderers' name for "the model's own chat template"
PARSE_PROMPT_TAIL = 128  # prompt ids a completion parser sees: the generation prompt is in them


class RenderError(ValueError):
    """The messages cannot be rendered (bad roles, template error): a 400 for the agent."""


@dataclass
class RendererChoice:
    """Which renderer serves the model and why (logged once at start)."""

    family: str
    reason: str


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


# --------------------------------------------------------------------------- messages
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

    Content part lists become text, ``developer`` becomes ``system``, tool-call
    ``arguments`` become dicts, wire ids (tool call ids, ``tool_call_id``) are dropped.
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
        norm: dict[str, Any] = {"role": role, "content": _text_of(msg.get("content"))}
        if role != "assistant" and norm["content"] is None:
            norm["content"] = ""
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


def _last_assistant(messages: list[dict[str, Any]]) -> int:
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
    k = _last_assistant(messages)
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


# --------------------------------------------------------------------------- renderer
def load_tokenizer(model_dir: str) -> Any:
    """Load the model's tokenizer from a local directory (or a cached Hub id), offline-safe."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def infer_family(model_dir: str, tokenizer: Any) -> RendererChoice:
    """Guess the renderers family of a model directory; ``default`` when none fits.

    Looks, in order, at the Hub ids the directory names (config.json ``_name_or_path``,
    the tokenizer's ``name_or_path``, the directory name against the Hub ids renderers
    maps), at config.json ``model_type``, and at the chat template.
    """
    from renderers.base import MODEL_RENDERER_MAP

    root = Path(model_dir)
    config = _read_json(root / "config.json")
    by_basename = {k.split("/")[-1].lower(): v for k, v in MODEL_RENDERER_MAP.items()}
    for name in (config.get("_name_or_path"), getattr(tokenizer, "name_or_path", None), root.name):
        if not name:
            continue
        family = MODEL_RENDERER_MAP.get(str(name)) or by_basename.get(Path(str(name)).name.lower())
        if family:
            return RendererChoice(family, f"model name {name!r}")
    model_type = str(config.get("model_type") or "")
    if model_type in MODEL_TYPE_FAMILIES:
        return RendererChoice(MODEL_TYPE_FAMILIES[model_type], f"config.json model_type {model_type!r}")
    template = str(getattr(tokenizer, "chat_template", "") or "")
    if "<|im_start|>" in template and "enable_thinking" in template and "<tool_response>" in template:
        return RendererChoice("qwen3", "a Qwen3-style chat template (enable_thinking, <tool_response>)")
    why = f"model_type {model_type!r}" if model_type else "no model_type"
    return RendererChoice(CHAT_TEMPLATE_FAMILY, f"no renderers family fits ({why})")


def generation_stop_ids(model_dir: str) -> list[int]:
    """``eos_token_id`` of the model's generation_config.json (an int or a list), if any."""
    eos = _read_json(Path(model_dir) / "generation_config.json").get("eos_token_id")
    values = eos if isinstance(eos, list) else [eos]
    return [int(v) for v in values if isinstance(v, int)]


def _parser(name: str | None, table: dict[str, str], what: str, env: str) -> str | None:
    if not name:
        return None
    if name in table:
        return table[name]
    names = ", ".join(sorted(table))
    raise ConfigError(f"unknown {what} {name!r}", f"set {env} to one of: {names}, or unset it")


def build_renderer(
    tokenizer: Any,
    family: str,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> Any:
    """Create the renderer for ``family`` (``default`` = chat template + mapped parsers).

    :raises ValueError: for an unknown family or parser name, with the valid names.
    """
    from renderers import DefaultRendererConfig, config_from_name, create_renderer

    tool = _parser(tool_call_parser, TOOL_CALL_PARSERS, "tool call parser", "SGLANG_TOOL_CALL_PARSER")
    reasoning = _parser(reasoning_parser, REASONING_PARSERS, "reasoning parser", "SGLANG_REASONING_PARSER")
    if family == CHAT_TEMPLATE_FAMILY:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the model's tokenizer has no chat template (set RENDERER_FAMILY to a renderers family)"
            )
        return create_renderer(tokenizer, DefaultRendererConfig(tool_parser=tool, reasoning_parser=reasoning))
    try:
        config = config_from_name(family)
    except ValueError as err:
        raise ConfigError(f"unknown RENDERER_FAMILY {family!r}: {err}") from None
    return create_renderer(tokenizer, config)


def choose_renderer(
    model_dir: str,
    tokenizer: Any,
    family: str,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> tuple[Any, RendererChoice]:
    """The renderer for the gateway: explicit ``family``, or inferred when ``auto``.

    An inferred family whose renderer cannot be built on this tokenizer falls back to the
    chat template (logged once); an explicit one raises.
    """
    kwargs = {"tool_call_parser": tool_call_parser, "reasoning_parser": reasoning_parser}
    if family != "auto":
        return build_renderer(tokenizer, family, **kwargs), RendererChoice(family, "RENDERER_FAMILY")
    choice = infer_family(model_dir, tokenizer)
    if choice.family != CHAT_TEMPLATE_FAMILY:
        try:
            return build_renderer(tokenizer, choice.family, **kwargs), choice
        except Exception as err:  # noqa: BLE001 - any failure to fit means: use the chat template
            choice = RendererChoice(CHAT_TEMPLATE_FAMILY, f"family {choice.family!r} did not fit ({err})")
    logger.warning("renderer: %s; falling back to the model's chat template", choice.reason)
    return build_renderer(tokenizer, CHAT_TEMPLATE_FAMILY, **kwargs), choice


# --------------------------------------------------------------------------- prompts
SEGMENT_CACHE_CHARS = 16 * 1024 * 1024  # text the segment cache holds ids for (LRU; ~5x that in bytes)
SEGMENT_CACHE_MIN = 4096  # shorter pieces (a tool result, a reply) are cheap to encode and rarely repeat
SEGMENT_CHECKS = 8  # full renders compared with the renderer's own before trusting the split
BATCH_ENCODE_CHARS = 8_000  # from this much text on, encode with the GIL released (encode_batch)
SEGMENT_CHECK_CHARS = 48_000  # longer texts are checked against their own whole-text encoding


def _split_tokens(tokenizer: Any) -> list[str]:
    """Special tokens after which a text can be cut without changing its ids.

    The tokenizer extracts added tokens before anything else and encodes the text between
    them piece by piece, so the ids of ``a + b`` are ids(a) + ids(b) when ``a`` ends with
    an added token the tokenizer matches there. That holds for a special token that strips
    no whitespace, is matched on the raw text, and cannot overlap another added token
    (none contains it, none ends with a start of it).
    """
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    contents = [str(t.content) for t in added.values()]
    out = []
    for token in added.values():
        text = str(token.content)
        if not token.special or token.lstrip or token.rstrip or token.single_word or token.normalized:
            continue
        clash = any(
            other != text and (text in other or any(other.endswith(text[:i]) for i in range(1, len(text))))
            for other in contents
        )
        if text and not clash:
            out.append(text)
    return out


class SegmentEncoder:
    """Encodes chat-template text piece by piece, with a cache, off the GIL.

    Two things make a full render of a long conversation slow for everyone else: the
    tokenizer holds the GIL for its whole length (the gateway's event loop waits), and the
    same long system prompt and tool schemas are encoded again for every session. Here the
    text is cut after special tokens (see :func:`_split_tokens`), long pieces are looked up
    in an LRU cache, and the rest go to the Rust tokenizer's ``encode_batch``, which releases
    the GIL. The first :data:`SEGMENT_CHECKS` encodes are compared with the renderer's own
    ids; one difference (a tokenizer whose pre-tokenizer treats the start of the text
    specially, say) switches the encoder off for good.
    """

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "_tokenizer", None)
        tokens = _split_tokens(tokenizer)
        usable = (
            backend is not None
            and hasattr(backend, "encode_batch")
            and getattr(backend, "truncation", None) is None
            and getattr(backend, "padding", None) is None
        )
        self._backend = backend if usable and tokens else None
        self._tokens = tokens
        self._cache: OrderedDict[str, array[int]] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()
        self.checks_left = SEGMENT_CHECKS

    @property
    def enabled(self) -> bool:
        return self._backend is not None

    def disable(self, why: str) -> None:
        if self._backend is not None:
            logger.warning("segment encoding off (%s); full renders hold the GIL", why)
        self._backend = None
        with self._lock:
            self._cache.clear()
            self._cached_chars = 0

    def pieces(self, text: str) -> list[str]:
        """``text`` cut after every split token (concatenated, the pieces are the text)."""
        cuts = sorted(
            {
                i + len(token)
                for token in self._tokens
                for i in _occurrences(text, token)
                if i + len(token) < len(text)
            }
        )
        return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]

    def encode(self, text: str) -> array[int]:
        """The ids of ``text`` (without added BOS/EOS), as ``array('i')``."""
        backend = self._backend
        assert backend is not None, "segment encoding is off"
        if len(text) < SEGMENT_CACHE_MIN:  # a bridge's few new messages: one plain call is cheapest
            return array("i", backend.encode(text, add_special_tokens=False).ids)
        pieces = self.pieces(text)
        found: dict[int, array[int]] = {}
        with self._lock:
            for i, piece in enumerate(pieces):
                hit = self._cache.get(piece) if len(piece) >= SEGMENT_CACHE_MIN else None
                if hit is not None:
                    self._cache.move_to_end(piece)
                    found[i] = hit
        missing = [i for i in range(len(pieces)) if i not in found]
        if sum(len(pieces[i]) for i in missing) < BATCH_ENCODE_CHARS:
            # short work: handing it to the tokenizer's thread pool costs more than it saves
            for i in missing:
                found[i] = array("i", backend.encode(pieces[i], add_special_tokens=False).ids)
        elif missing:
            encodings = backend.encode_batch([pieces[i] for i in missing], add_special_tokens=False)
            for i, encoding in zip(missing, encodings, strict=True):
                found[i] = array("i", encoding.ids)
        self._remember([(pieces[i], found[i]) for i in missing if len(pieces[i]) >= SEGMENT_CACHE_MIN])
        out = array("i")
        for i in range(len(pieces)):
            out += found[i]
        return out

    def encode_whole(self, text: str) -> array[int]:
        """The ids of ``text`` encoded in one piece (the GIL released)."""
        backend = self._backend
        assert backend is not None, "segment encoding is off"
        return array("i", backend.encode_batch([text], add_special_tokens=False)[0].ids)

    def _remember(self, entries: list[tuple[str, array[int]]]) -> None:
        with self._lock:
            for piece, ids in entries:
                if piece in self._cache or len(piece) > SEGMENT_CACHE_CHARS // 4:
                    continue
                self._cache[piece] = ids
                self._cached_chars += len(piece)
            while self._cached_chars > SEGMENT_CACHE_CHARS:
                piece, _ = self._cache.popitem(last=False)
                self._cached_chars -= len(piece)


def _occurrences(text: str, token: str) -> list[int]:
    out = []
    i = text.find(token)
    while i >= 0:
        out.append(i)
        i = text.find(token, i + len(token))
    return out


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


class PromptBuilder:
    """Builds prompt ids for a call: full render, or a bridge in cumulative mode.

    :param renderer: a renderers ``Renderer``.
    :param tokenizer: the model tokenizer (used by the chat-template bridge).
    :param family: the renderer family (``default`` = chat template).
    :param extra_stop_ids: more ids that end a turn (generation_config.json ``eos_token_id``).
    :param segment_encoding: render chat-template text through a :class:`SegmentEncoder` when
        the tokenizer allows it (the render worker, used when the gateway's is off, does not).
    :param tool_call_parser: the SGLang tool-call parser name completions are read with (None:
        the renderer's own parser).
    """

    def __init__(
        self,
        renderer: Any,
        tokenizer: Any,
        family: str,
        extra_stop_ids: list[int] | None = None,
        *,
        segment_encoding: bool = True,
        tool_call_parser: str | None = None,
    ) -> None:
        self.renderer = renderer
        self.tool_call_parser = tool_call_parser
        self.parser = parsing_view(renderer)  # what parse_completion is given
        self.tokenizer = tokenizer
        self.family = family
        stops = [*renderer.get_stop_token_ids(), *self._eos_ids(), *(extra_stop_ids or [])]
        self.stop_ids = list(dict.fromkeys(stops))
        close = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._close_id = close if isinstance(close, int) and close != tokenizer.unk_token_id else None
        self._window_ok = True
        chat_template = family == CHAT_TEMPLATE_FAMILY
        self.segments = SegmentEncoder(tokenizer) if chat_template and segment_encoding else None

    def _eos_ids(self) -> list[int]:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return [eos] if isinstance(eos, int) else []

    def parse(
        self, completion_ids: list[int], prompt_ids: array[int], tools: list[dict[str, Any]] | None
    ) -> ParsedTurn:
        """The sampled ids of a call read into its assistant message (:func:`parse_turn`)."""
        return parse_turn(self.parser, completion_ids, prompt_ids, tools, self.tool_call_parser)

    @property
    def releases_gil(self) -> bool:
        """Whether a full render leaves the GIL to other threads while it tokenizes."""
        return self.segments is not None and self.segments.enabled

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Full render with the generation prompt."""
        return self.render_array(messages, tools).tolist()

    def render_array(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> array[int]:
        """Full render with the generation prompt, as ``array('i')``."""
        try:
            if self.segments is not None and self.segments.enabled:
                return self._render_segments(messages, tools, self.segments)
            ids = self.renderer.render_ids(messages, tools=tools or None, add_generation_prompt=True)
            return array("i", ids)
        except RenderError:
            raise
        except Exception as err:  # template errors are the request's fault (bad message shapes)
            raise RenderError(f"cannot render the messages: {err}") from err

    def _render_segments(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, segments: SegmentEncoder
    ) -> array[int]:
        """The chat template's text encoded piece by piece; the first few checked against the
        renderer's own ids (the text is what renderers' DefaultRenderer tokenizes)."""
        text = self._apply_text(messages, tools, add_generation_prompt=True)
        ids = segments.encode(text)
        if segments.checks_left > 0:
            segments.checks_left -= 1
            # short texts: against the renderer itself; long ones against the whole text in one
            # piece (the GIL stays free: a long first render must not stall the loop either)
            if len(text) <= SEGMENT_CHECK_CHARS:
                reference = array(
                    "i", self.renderer.render_ids(messages, tools=tools or None, add_generation_prompt=True)
                )
            else:
                reference = segments.encode_whole(text)
            if reference != ids:
                segments.disable("pieces encoded apart differ from the whole text encoded")
                return reference
        return ids

    def build(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        chain: ChainState | None,
        cumulative: bool,
        full_render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], list[int]] | None = None,
    ) -> Prompt:
        """Prompt ids for ``messages``; bridged from ``chain`` when cumulative mode can prove it.

        :param full_render: renders in full instead of :meth:`render` (e.g. in another process).
        """

        def render() -> array[int]:
            if full_render is None:
                return self.render_array(messages, tools)
            return array("i", full_render(messages, tools))

        if not cumulative or chain is None:
            return Prompt(render(), "rendered")
        bridged, why = self.bridge(messages, tools, chain)
        return bridged or Prompt(render(), "rendered", why)

    def bridge(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, chain: ChainState
    ) -> tuple[Prompt | None, str]:
        """The bridged prompt, or None and why the call must be rendered in full."""
        ids, why = self._bridge(messages, tools, chain)
        if ids is None:
            return None, why
        return Prompt(ids, "bridged"), ""

    def _bridge(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, chain: ChainState
    ) -> tuple[array[int] | None, str]:
        k = _last_assistant(messages)
        if k < 0:
            return None, "no assistant message in the history"
        if tools_key(tools) != chain.tools_key:
            return None, "tools changed"
        if messages[:k] != chain.messages:
            return None, "history before the last assistant message differs from the previous call"
        if not same_reply(messages[k], chain.response):
            return None, "the last assistant message is not the reply the gateway returned"
        new = messages[k + 1 :]
        if not new:
            return None, "no new messages after the last assistant message"
        head = chain.sequence
        if self.family == CHAT_TEMPLATE_FAMILY:
            tail = self._template_bridge(messages, k, tools, chain)
            if tail is None:
                return None, "the renderer declined to bridge"
            return head + tail, ""  # extends head by construction
        out = self.renderer.bridge_to_next_turn(
            chain.prompt_ids.tolist(), chain.completion_ids.tolist(), new, tools=tools or None
        )
        if out is None:
            return None, "the renderer declined to bridge"
        ids = array("i", out.token_ids)
        if ids[: len(head)] != head:
            return None, "the bridge does not extend the previous prompt + completion"
        return ids, ""

    def _template_bridge(
        self, messages: list[dict[str, Any]], k: int, tools: list[dict[str, Any]] | None, chain: ChainState
    ) -> array[int] | None:
        """ChatML bridge for chat-template models (reference §8, step 3): the ids that follow
        the previous prompt + completion.

        The tokens for the new messages are the text the chat template puts after the
        ``<|im_end|>`` closing the last assistant message, up to the generation prompt,
        encoded on its own: it starts after a special token, which BPE never merges across.
        """
        if self._close_id is None:
            return None
        suffix = self._suffix(messages, k, tools)
        if suffix is None:
            return None
        ended = chain.end > chain.prompt_len and chain.ids[chain.end - 1] in self.stop_ids
        closing = array("i", [] if ended else [self._close_id])
        return closing + self._encode(suffix)

    def _encode(self, text: str) -> array[int]:
        """Ids of template text (no BOS/EOS): the Rust tokenizer directly when it can be trusted
        to match (the Python wrapper costs more than a short encode)."""
        if self.segments is not None and self.segments.enabled:
            return self.segments.encode(text)
        return array("i", self.tokenizer.encode(text, add_special_tokens=False))

    def _suffix(
        self, messages: list[dict[str, Any]], k: int, tools: list[dict[str, Any]] | None
    ) -> str | None:
        """The template text after message ``k``'s close, rendered from a short window.

        Rendering the whole conversation twice per turn grows with its length; the window
        (first message, then message ``k`` onward) gives the same text for templates that
        render each message from itself and its neighbours, as ChatML templates do. A
        first message's text (a long system prompt) is replaced by a stand-in: the text
        after message ``k`` does not contain it, and rendering it twice per turn was most of
        a bridge's cost. Both are verified on every short conversation (<= 8 messages)
        against the full render; one mismatch switches windowing off for good.
        """
        if k == 0 or not self._window_ok:
            return self._suffix_text(messages, k, tools)
        first = messages[0]
        if isinstance(first.get("content"), str) and len(first["content"]) > len(WINDOW_STANDIN):
            first = {**first, "content": WINDOW_STANDIN}
        windowed = self._suffix_text([first, *messages[k:]], 1, tools)
        if len(messages) <= 8:
            full = self._suffix_text(messages, k, tools)
            if full != windowed:
                logger.warning("chat template is not message-local; cumulative bridges render in full")
                self._window_ok = False
                return full
        return windowed

    def _suffix_text(
        self, messages: list[dict[str, Any]], k: int, tools: list[dict[str, Any]] | None
    ) -> str | None:
        close = "<|im_end|>"
        try:
            before = self._apply_text(messages[: k + 1], tools, add_generation_prompt=False)
            full = self._apply_text(messages, tools, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - the full render reports template errors
            return None
        cut = before.rfind(close)
        if cut < 0 or before[cut + len(close) :].strip():
            return None
        head = before[: cut + len(close)]
        return full[len(head) :] if full.startswith(head) else None

    def _apply_text(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **kw: Any
    ) -> str:
        config = getattr(self.renderer, "config", None)
        extra = dict(getattr(config, "model_extra", None) or {})  # template kwargs DefaultRenderer forwards
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, **extra, **kw
        )
        return str(text)


# --------------------------------------------------------------------------- parsing
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
