"""Fixtures for the gateway tests: the toy tokenizer directory and its loaded tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.toy_tokenizer import build_toy_tokenizer


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local Qwen2.5-like model directory (tokenizer + config.json), built once per run."""
    return build_toy_tokenizer(tmp_path_factory.mktemp("toy-qwen2.5"))


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path) -> Any:
    """The toy tokenizer loaded through transformers, as the gateway loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
