"""``python3 -m agentcore_slime.launch``: the entry point bin/train (and bin/eval) exec.

bin/eval goes through bin/train's Python lookup and sets ``TOOLKIT_ENTRY_COMMAND=eval``.
"""

from __future__ import annotations

import os

if os.environ.pop("TOOLKIT_ENTRY_COMMAND", "train") == "eval":
    from ..evaluate.launch import main
else:
    from .cli import main

raise SystemExit(main())
