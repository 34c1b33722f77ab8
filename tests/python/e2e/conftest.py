"""Fixtures for the end-to-end rehearsal: puts the example math agent on sys.path.

``examples/math_agent`` is not a package (ACR runs ``python agent.py`` in its container),
so its modules are imported the way that command imports them.
"""

from __future__ import annotations

import sys
from pathlib import Path

MATH_AGENT = Path(__file__).resolve().parents[3] / "examples" / "math_agent"
EXAMPLES = MATH_AGENT.parent

for directory in (EXAMPLES, MATH_AGENT):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
