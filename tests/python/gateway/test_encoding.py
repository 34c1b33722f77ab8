"""Prompt encoding at the speed of a cache, exact (gateway/encoding.py).

The toy tokenizer (byte-level BPE with Qwen's special tokens, the real ``tokenizers`` code) cuts
exactly at its special tokens, so long pieces are encoded apart and cached; every text encodes to
the ids of the whole text (hypothesis over texts of special tokens, long pieces, whitespace and
non-ASCII). A sentencepiece-style tokenizer whose Metaspace marks only the text's first piece
does not cut exactly, and the start check sees it: every text is then encoded whole.
"""

from __future__ import annotations

from typing import Any

import pytest
from agentcore_slime.gateway.encoding import CACHE_MIN_CHARS, PromptEncoder
from agentcore_slime.gateway.family import choose_renderer
from agentcore_slime.gateway.rendering import PromptBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<tool_call>"]


class Recording:
    """A Rust tokenizer that records the texts it was asked to encode (everything else as is)."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.texts = backend, []

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> Any:
        self.texts += texts
        return self.backend.encode_batch(texts, add_special_tokens=add_special_tokens)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


@pytest.fixture(scope="module")
def encoder(tokenizer) -> PromptEncoder:
    encoder = PromptEncoder(tokenizer._tokenizer)
    assert encoder.caches
    return encoder


_piece = st.text(alphabet=st.sampled_from(list("ab xyz\n\t12{}\"é漢 ")), max_size=40)
_long = st.builds(
    lambda word, n: (word + " ") * n, st.sampled_from(["apples", "sum\n", "Ça"]), st.integers(600, 900)
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_piece, _long, st.sampled_from(SPECIALS)), max_size=12))
def test_a_text_encodes_to_the_ids_of_the_whole_text(encoder, parts) -> None:
    text = "".join(parts)
    assert encoder.encode(text) == encoder.encode_whole(text)
    assert encoder.encode(text) == encoder.encode_whole(text)  # again, long pieces from the cache


def test_a_shared_system_prompt_is_encoded_once(tokenizer) -> None:
    recording = Recording(tokenizer._tokenizer)
    encoder = PromptEncoder(recording)
    system = "You are a careful assistant. " * 300
    first = f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nfirst task<|im_end|>\n"
    second = first.replace("first task", "second task")
    recording.texts.clear()
    assert encoder.encode(first) == encoder.encode_whole(first)
    assert any(system in text for text in recording.texts)
    recording.texts.clear()
    ids = encoder.encode(second)
    assert recording.texts and not any(system in text for text in recording.texts)
    assert ids == encoder.encode_whole(second)


def test_short_texts_are_encoded_whole(encoder) -> None:
    text = "<|im_start|>user\nhi<|im_end|>\n"
    assert len(text) < CACHE_MIN_CHARS and encoder.encode(text) == encoder.encode_whole(text)


def _metaspace_tokenizer() -> Any:
    """A sentencepiece-style tokenizer (Metaspace, a word mark on the text's first piece only)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    specials = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(["a b c abc hello world " * 20], trainer=trainer)
    return tok


def test_a_tokenizer_that_marks_the_first_piece_is_encoded_whole() -> None:
    backend = _metaspace_tokenizer()
    whole = backend.encode_batch(["hello</s>world"], add_special_tokens=False)[0].ids
    pieces = [backend.encode(t, add_special_tokens=False).ids for t in ("hello", "</s>", "world")]
    assert whole != [i for p in pieces for i in p]  # cutting would not be exact here
    encoder = PromptEncoder(backend)
    assert not encoder.caches
    text = "hello world " * 300 + "</s>" + "world hello " * 300
    assert encoder.encode(text) == encoder.encode_whole(text)


def test_full_renders_with_a_long_system_prompt_are_the_renderers_ids(model_dir, tokenizer) -> None:
    renderer, choice = choose_renderer(
        str(model_dir), tokenizer, "auto", tool_call_parser=None, reasoning_parser=None
    )
    builder = PromptBuilder(renderer, tokenizer, choice.family)
    assert builder.encoder is not None and builder.encoder.caches
    system = {"role": "system", "content": "Add the numbers you are given, then say the sum. " * 200}
    for task in ("2+2?", "3+5?", "2+2?"):
        messages = [system, {"role": "user", "content": task}]
        assert builder.render(messages, None) == renderer.render_ids(messages, add_generation_prompt=True)
