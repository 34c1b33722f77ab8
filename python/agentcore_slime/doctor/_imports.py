"""Probe run by the job's python: import each module named on the command line, as JSON.

Usage: python3 _imports.py MODULE...  -> {"python": "3.12.3", "modules": {name: {"version": ..,
"error": ..}}} on the last stdout line. Imports are real (a broken build fails here, not in Ray).
"""

import importlib
import json
import sys

found: dict[str, dict[str, str]] = {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        found[name] = {"version": str(getattr(module, "__version__", "")), "error": ""}
    except BaseException as exc:  # noqa: BLE001 - any failure means "not importable"
        found[name] = {"version": "", "error": f"{type(exc).__name__}: {exc}"[:300]}
print()
print(json.dumps({"python": ".".join(map(str, sys.version_info[:3])), "modules": found}))
