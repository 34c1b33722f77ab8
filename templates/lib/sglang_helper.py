"""What templates/lib/sglang.sh asks python3 (standard library only), one subcommand each.

``health URL``
    exit 0 when GET URL/health answers 200 within 5 seconds.
``api-key FILE``
    a random API key for the SGLang servers: written into FILE (a private YAML that mktemp made,
    given to SGLang with --config) as ``api-key: KEY`` and printed once (never on argv).
"""

from __future__ import annotations

import secrets
import sys
import urllib.request


def healthy(url: str) -> bool:
    """True when ``url``/health answers 200 within 5 seconds."""
    with urllib.request.urlopen(url + "/health", timeout=5) as reply:
        return bool(reply.status == 200)


def make_key(path: str) -> str:
    """A new key, written into ``path`` (mktemp made it: ours, 0600) as SGLang's --config YAML."""
    key = secrets.token_hex(32)
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"api-key: {key}\n")
    return key


def main(argv: list[str]) -> None:
    if argv[0] == "health":
        sys.exit(0 if healthy(argv[1]) else 1)
    elif argv[0] == "api-key":
        print(make_key(argv[1]))
    else:
        sys.exit(f"sglang_helper.py: unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
