"""Prompt ids for a call: a full render, or in cumulative mode a *bridge* that extends the
previous call's prompt + sampled completion with tokens for the new messages only.

Two ways to bridge (``CUMULATIVE_BRIDGE``, docs/gateway.md "Cumulative token mode"):

- ``new-messages`` (the default): the new messages' tokens are the chat template's rendering of
  them alone, after a stand-in conversation (:func:`after_reply_text`), so the prompt is the
  previous prompt + the sampled ids + those tokens whatever the template does to earlier turns
  (Qwen3's ``loop.last`` rule, reasoning dropped before the last user query); renderers families
  bridge with ``thinking_retention="all"`` (their bridge renders only the new messages too).
- ``template``: a bridge only where the template's re-render of the whole conversation starts
  with the previous render (reference §8), else a full render: the episode forks at every turn
  the template renders otherwise.

The renderer is chosen in :mod:`.family`; messages and chains are :mod:`.conversation`'s;
completions are read back by :mod:`.parsing`. Chat-template text is encoded by the model's Rust
tokenizer with the GIL released (:mod:`.encoding`: the same ids as transformers' call, checked
against the renderer's own ids once at start), so a long render does not stall the gateway's
event loop.
"""

from __future__ import annotations

import logging
from array import array
from typing import Any

from .conversation import (
    ChainState,
    Prompt,
    RenderError,
    last_assistant,
    same_reply,
    tools_key,
)
from .encoding import PromptEncoder
from .family import CHAT_TEMPLATE_FAMILY
from .parsing import ParsedTurn, parse_turn, parsing_view

logger = logging.getLogger(__name__)

WINDOW_STANDIN = "(first message)"  # stands for the first message's text in a bridge's window
BRIDGE_NEW_MESSAGES = "new-messages"  # CUMULATIVE_BRIDGE: the new messages rendered on their own
BRIDGE_TEMPLATE = "template"  # CUMULATIVE_BRIDGE: only where the template's re-render extends
# The stand-in conversation the new messages are rendered after (new-messages bridges): a user
# turn and a reply whose text occurs nowhere else, so the reply's end is found in the render.
ANCHOR_QUERY = "(the conversation so far)"
ANCHOR_REPLY = "gateway-anchor-reply-5f3c9e"


def after_reply_text(
    apply: Any, first: dict[str, Any], new: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str | None:
    """The chat template's text that follows an assistant reply's own text when ``new`` comes
    after it, up to the generation prompt: the turn's close, the new messages, the prompt.

    Rendered after a stand-in conversation (a system stand-in when the conversation starts with
    a system message, a user turn, a reply of :data:`ANCHOR_REPLY`), so it does not depend on
    how the template renders the real earlier turns. The rules that decide a new message's text
    look only at the message, its neighbours and a preceding assistant reply, which the stand-in
    has: a tool result after a reply, a user turn after it, the generation prompt.

    :param apply: renders messages as text (``apply(messages, tools, add_generation_prompt=True)``).
    :returns: the text, or None when the template does not render the stand-in reply once.
    """
    anchor: list[dict[str, Any]] = [
        {"role": "user", "content": ANCHOR_QUERY},
        {"role": "assistant", "content": ANCHOR_REPLY},
    ]
    if first.get("role") == "system":
        anchor.insert(0, {"role": "system", "content": WINDOW_STANDIN})
    try:
        text = str(apply([*anchor, *new], tools, add_generation_prompt=True))
    except Exception:  # noqa: BLE001 - the full render reports template errors
        return None
    at = text.find(ANCHOR_REPLY)
    if at < 0 or text.find(ANCHOR_REPLY, at + 1) >= 0:
        return None
    return text[at + len(ANCHOR_REPLY) :]


def rust_tokenizer(tokenizer: Any) -> Any:
    """The Rust ``tokenizers.Tokenizer`` behind a fast transformers tokenizer, when it encodes as
    the wrapper does (no truncation, no padding); else None."""
    backend = getattr(tokenizer, "_tokenizer", None)
    usable = (
        backend is not None
        and hasattr(backend, "encode_batch")
        and getattr(backend, "truncation", None) is None
        and getattr(backend, "padding", None) is None
    )
    return backend if usable else None


class PromptBuilder:
    """Builds prompt ids for a call: full render, or a bridge in cumulative mode.

    :param renderer: a renderers ``Renderer``.
    :param tokenizer: the model tokenizer (used by the chat-template bridge).
    :param family: the renderer family (``default`` = chat template).
    :param extra_stop_ids: more ids that end a turn (generation_config.json ``eos_token_id``).
    :param release_gil: encode chat-template text with the Rust tokenizer directly, the GIL
        released (:func:`rust_tokenizer`); the render worker, used when that is off, does not.
    :param tool_call_parser: the SGLang tool-call parser name completions are read with (None:
        the renderer's own parser).
    :param bridge: how cumulative mode bridges (:data:`BRIDGE_NEW_MESSAGES`, the default, or
        :data:`BRIDGE_TEMPLATE`; see the module).
    """

    def __init__(
        self,
        renderer: Any,
        tokenizer: Any,
        family: str,
        extra_stop_ids: list[int] | None = None,
        *,
        release_gil: bool = True,
        tool_call_parser: str | None = None,
        bridge: str = BRIDGE_NEW_MESSAGES,
    ) -> None:
        if bridge not in (BRIDGE_NEW_MESSAGES, BRIDGE_TEMPLATE):
            raise ValueError(
                f"unknown cumulative bridge {bridge!r} ({BRIDGE_NEW_MESSAGES} or {BRIDGE_TEMPLATE})"
            )
        self.renderer = renderer
        self.bridge_mode = bridge
        self.tool_call_parser = tool_call_parser
        self.parser = parsing_view(renderer)  # what parse_completion is given
        self.tokenizer = tokenizer
        self.family = family
        stops = [*renderer.get_stop_token_ids(), *self._eos_ids(), *(extra_stop_ids or [])]
        self.stop_ids = list(dict.fromkeys(stops))
        close = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._close_id = close if isinstance(close, int) and close != tokenizer.unk_token_id else None
        self._window_ok = True
        self._stop_texts: dict[int, str] = {}
        chat_template = family == CHAT_TEMPLATE_FAMILY
        # what bridges a renderers family (new-messages: one that bridges every turn)
        keeps_policy = chat_template or bridge == BRIDGE_TEMPLATE
        self.bridger = renderer if keeps_policy else _bridging(renderer, tokenizer)
        # what full renders are encoded with (None: the renderer's own render_ids, GIL held)
        self.rust = rust_tokenizer(tokenizer) if chat_template and release_gil else None
        self.encoder = PromptEncoder(self.rust) if self.rust is not None else None
        if self.rust is not None and not self._encodes_as_renderer():
            logger.warning(
                "the tokenizer's own encoding differs from the renderer's; full renders hold the GIL"
            )
            self.rust = self.encoder = None

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
        return self.rust is not None

    def _encodes_as_renderer(self) -> bool:
        """Whether the template text encoded by the Rust tokenizer gives the renderer's ids (a
        conversation of every role, checked once: the same encode call on the same text)."""
        call = {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
        probe: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a probe."},
            {"role": "user", "content": "Hello  there,\n\tworld."},
            {"role": "assistant", "content": "Calling.", "tool_calls": [call]},
            {"role": "tool", "content": "42"},
        ]
        try:
            expected = self.renderer.render_ids(probe, tools=None, add_generation_prompt=True)
            return array("i", expected) == self._encode_whole(
                self._apply_text(probe, None, add_generation_prompt=True)
            )
        except Exception:  # noqa: BLE001 - a template that cannot render the probe: the renderer's way
            return False

    def _encode_whole(self, text: str) -> array[int]:
        """The ids of template text as encoded whole, the GIL released (:class:`PromptEncoder`:
        long pieces every session shares from its cache)."""
        assert self.encoder is not None
        return self.encoder.encode(text)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Full render with the generation prompt."""
        return self.render_array(messages, tools).tolist()

    def render_array(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> array[int]:
        """Full render with the generation prompt, as ``array('i')``."""
        try:
            if self.rust is not None:
                return self._encode_whole(self._apply_text(messages, tools, add_generation_prompt=True))
            ids = self.renderer.render_ids(messages, tools=tools or None, add_generation_prompt=True)
            return array("i", ids)
        except RenderError:
            raise
        except Exception as err:  # template errors are the request's fault (bad message shapes)
            raise RenderError(f"cannot render the messages: {err}") from err

    def build(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        chain: ChainState | None,
        cumulative: bool,
    ) -> Prompt:
        """Prompt ids for ``messages``; bridged from ``chain`` when cumulative mode can prove it."""
        if not cumulative or chain is None:
            return Prompt(self.render_array(messages, tools), "rendered")
        bridged, why = self.bridge(messages, tools, chain)
        return bridged or Prompt(self.render_array(messages, tools), "rendered", why)

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
        k = last_assistant(messages)
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
            tail, why = self._template_bridge(messages, k, tools, chain)
            if tail is None:
                return None, why
            return head + tail, ""  # extends head by construction
        out = self.bridger.bridge_to_next_turn(
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
    ) -> tuple[array[int] | None, str]:
        """The ids that follow the previous prompt + completion for chat-template models, or
        None and why the call must be rendered in full."""
        if self.bridge_mode == BRIDGE_TEMPLATE:
            ids = self._rerender_bridge(messages, k, tools, chain)
            return ids, "" if ids is not None else "the template re-renders the history otherwise"
        text = after_reply_text(self._apply_text, messages[0], messages[k + 1 :], tools)
        if text is None:
            return None, "the template does not render the new messages after a stand-in reply"
        if chain.end > chain.prompt_len and chain.ids[chain.end - 1] in self.stop_ids:
            # the model sampled the turn's end: the template's text goes on after it, and must
            # begin with it (a reply that ended otherwise than the template ends it re-renders)
            stop = self._stop_text(chain.ids[chain.end - 1])
            if not text.startswith(stop):
                return None, f"the reply ended with {stop!r}, the template ends it otherwise"
            text = text[len(stop) :]
        # text after a sampled stop starts right after an added token, where the tokenizer cuts;
        # a truncated reply gets the template's close (a special token) and what follows
        return self._encode(text), ""

    def _stop_text(self, token_id: int) -> str:
        text = self._stop_texts.get(token_id)
        if text is None:
            text = str(self.tokenizer.decode([token_id], skip_special_tokens=False))
            self._stop_texts[token_id] = text
        return text

    def _rerender_bridge(
        self, messages: list[dict[str, Any]], k: int, tools: list[dict[str, Any]] | None, chain: ChainState
    ) -> array[int] | None:
        """ChatML bridge that follows the template's re-render (reference §8, step 3): the ids
        that follow the previous prompt + completion, when the template renders the history as
        it rendered it before.

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
        """Ids of template text (no BOS/EOS): the Rust tokenizer directly when it matches the
        renderer (the Python wrapper costs more than a short encode)."""
        if self.rust is not None:
            return array("i", self.rust.encode(text, add_special_tokens=False).ids)
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


def _bridging(renderer: Any, tokenizer: Any) -> Any:
    """A renderers family's renderer that bridges every turn (``thinking_retention="all"``):
    its bridge renders only the new messages, whatever the family's retention policy would do
    to the history in a full render. The renderer itself when its config has no such field."""
    config = getattr(renderer, "config", None)
    if config is None or "thinking_retention" not in type(config).model_fields:
        return renderer
    from renderers import create_renderer

    try:
        return create_renderer(tokenizer, config.model_copy(update={"thinking_retention": "all"}))
    except Exception as err:  # noqa: BLE001 - bridging under the family's own policy still works
        logger.warning("renderer family cannot bridge every turn (%s); it bridges under its own policy", err)
        return renderer
