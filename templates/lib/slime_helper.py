"""Which SGLang the job's python3 has (templates/lib/slime.sh, sglang_source).

Run as ``python3 slime_helper.py`` with the job's python3: two lines, the version of its sglang
and the path of its srt/server_args.py, found without importing sglang (find_spec runs no
package code). Fails when python3 has no sglang.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys


def sglang_source() -> tuple[str, str]:
    """(version, path of srt/server_args.py) of python3's sglang."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        sys.exit("python3 has no sglang package")
    server_args = os.path.join(os.path.dirname(spec.origin), "srt", "server_args.py")
    return importlib.metadata.version("sglang"), server_args


if __name__ == "__main__":
    print("\n".join(sglang_source()))
