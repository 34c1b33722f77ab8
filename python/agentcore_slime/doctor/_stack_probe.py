"""Probe run by the job's python: the installed SGLang and sglang-router, read from their
distribution metadata (nothing is imported), as JSON.

The router's build is the wheel's URL that pip or uv recorded (PEP 610 ``direct_url.json``):
slime's docker files and install_slime.sh install the router from a release of slime's fork,
``.../releases/download/v0.3.2-<build>/sglang_router-...whl``.

Usage: python3 _stack_probe.py  -> {"sglang": "0.5.13", "router": "0.3.2", "router_url": "..."}
(an empty string for what is not installed or not recorded) on the last stdout line.
"""

import json
from importlib import metadata


def _found(name: str) -> tuple[str, str]:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return "", ""
    try:
        url = str(json.loads(dist.read_text("direct_url.json") or "{}").get("url", ""))
    except ValueError:
        url = ""
    return dist.version, url


sglang, _ = _found("sglang")
router, router_url = _found("sglang-router")
print()
print(json.dumps({"sglang": sglang, "router": router, "router_url": router_url}))
