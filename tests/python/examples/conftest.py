"""Fixtures for the tests of examples/: puts the example sources on sys.path.

``examples/`` is not a package (users run its scripts directly), so the tests import
``prepare_gsm8k`` and the math agent's modules the way ``python examples/...`` would.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
MATH_AGENT = EXAMPLES / "math_agent"

for directory in (EXAMPLES, MATH_AGENT):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
