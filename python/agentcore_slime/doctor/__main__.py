"""``python3 -m agentcore_slime.doctor``: the entry point bin/doctor execs."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
