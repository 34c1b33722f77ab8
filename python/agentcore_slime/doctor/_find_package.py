"""Probe run by the job's python: where packages are (located, not imported), as JSON.

Usage: python3 _find_package.py PACKAGE  -> {"dirs": [...]} on the last stdout line.
"""

import importlib.util
import json
import sys

spec = importlib.util.find_spec(sys.argv[1])
dirs = list(spec.submodule_search_locations or []) if spec else []
print(json.dumps({"dirs": dirs}))
