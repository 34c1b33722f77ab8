"""``python -m agentcore_slime.evaluate``: see :mod:`agentcore_slime.evaluate.cli`."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
