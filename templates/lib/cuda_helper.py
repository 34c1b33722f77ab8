"""The directories python3 would import a package from (templates/lib/cuda.sh).

Run as ``python3 cuda_helper.py PACKAGE`` with the job's python3: one directory per line
(namespace packages such as ``nvidia`` have several); nothing if it is not installed. The
package is located, not imported.
"""

from __future__ import annotations

import importlib.util
import sys


def package_dirs(name: str) -> list[str]:
    """The import locations of package ``name`` (none when it is not installed)."""
    spec = importlib.util.find_spec(name)
    return list(spec.submodule_search_locations or []) if spec else []


if __name__ == "__main__":
    for path in package_dirs(sys.argv[1]):
        print(path)
