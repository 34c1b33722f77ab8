"""Where a test's bash driver starts SGLang engines the way eval.sh does (templates/lib's
functions running ``python3 -m sglang.launch_server``), the server being the stand-in of
fakes/sglang_shim (SGLang 0.5.13's key rule, the scripted protocol on ``--port``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agentcore_slime.gateway.engine import ENGINE_KEY_ENV

from fakes.renders import REPO

SHIM = REPO / "tests" / "python" / "fakes" / "sglang_shim"


def shim_env(out: Path, **extra: str) -> dict[str, str]:
    """This environment with ``OUT`` and ``TMPDIR`` the test's folder, this python first on
    ``PATH``, the shim, the tests and the package on ``PYTHONPATH``, and ``extra``; no engine
    key of the caller's."""
    env = dict(os.environ)
    env.update(
        OUT=str(out),
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=os.pathsep.join([str(SHIM), str(REPO / "tests" / "python"), str(REPO / "python")]),
        TMPDIR=str(out),
        **extra,
    )
    env.pop(ENGINE_KEY_ENV, None)
    return env
