"""Fixtures for the launcher tests: the repo layout and a fixed rendering context."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def repo() -> Path:
    """The checkout under test."""
    return REPO


@pytest.fixture
def templates() -> Path:
    """templates/ of the checkout."""
    return REPO / "templates"
