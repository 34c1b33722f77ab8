"""The toy tokenizer the tests use: the one the toolkit ships for ``bin/eval --rehearse``
(:mod:`agentcore_slime.evaluate.toy_tokenizer`), re-exported under its old test path."""

from __future__ import annotations

from agentcore_slime.evaluate.toy_tokenizer import (
    CHAT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    QWEN3_STYLE_CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    build_toy_tokenizer,
)

__all__ = [
    "CHAT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "QWEN3_STYLE_CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "build_toy_tokenizer",
]
