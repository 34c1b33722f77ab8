"""``python3 -m agentcore_slime.launch``: the entry point bin/train execs."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
