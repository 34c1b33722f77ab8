"""The slime stack a node has and the flags train.sh chooses for it, read by train.sh's own code.

The flags whose name or presence depends on the slime and SGLang installed (``STACK_ARGS``:
``--megatron-to-hf-mode`` only where slime has it, SGLang's cuda-graph flag by its name there)
are chosen when the rendered script runs, by ``slime_stack_args`` of templates/lib/slime.sh.
bin/train's manifest and bin/doctor ask the same function through bash, so what they record and
check is what a run on this node passes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .render import MEGATRON_TO_HF_MODE, SGLANG_CUDA_GRAPH_MAX_BS

#: seconds the stack may take to answer: importing SGLang's server arguments imports torch, which
#: takes a while on a busy node; only a hang reaches this
STACK_TIMEOUT = 300

# chooses STACK_ARGS with the launcher's own function, asking the python $6 by its path (never a
# link to it elsewhere: a venv's python finds its site-packages only beside its pyvenv.cfg);
# prints the slime checkout's identity, the SGLang version, STACK_NOTE and STACK_ARGS, NUL-separated
_CHOOSE = (
    'set -euo pipefail; TOOLKIT_PROG="$5" TOOLKIT_HELPER_DIR="$1"; '
    'source "$1/common.sh"; source "$1/slime.sh"; '
    'slime_stack_args "$2" "$3" "$4" "$6"; '
    'printf "%s\\0" "$(slime_identity "$2")" "$STACK_SGLANG" "$STACK_NOTE" "${STACK_ARGS[@]}"'
)


@dataclass(frozen=True)
class StackChoice:
    """What :func:`read_stack` found.

    :param slime: the slime checkout's commit (9 hex digits, ``+dirty`` with local changes) or
        ``version V (not a git checkout)``; empty when the stack could not be read.
    :param sglang: the version of python3's sglang; empty when the stack could not be read.
    :param args: STACK_ARGS, the flags train.sh adds for this stack.
    :param note: STACK_NOTE, the line train.sh prints about it.
    :param error: why the stack could not be read (empty when it was).
    """

    slime: str = ""
    sglang: str = ""
    args: list[str] = field(default_factory=list)
    note: str = ""
    error: str = ""


def read_stack(
    repo: Path, slime_dir: str, environ: Mapping[str, str], python: str | None = None, prog: str = "bin/train"
) -> StackChoice:
    """The stack at ``slime_dir`` and python3's SGLang, and the flags train.sh passes for it.

    :param repo: the toolkit checkout (its templates/lib).
    :param slime_dir: SLIME_DIR.
    :param environ: the environment the stack is asked in (its PATH finds python3).
    :param python: ask this python, by this path, instead of python3 on PATH (bin/doctor's job
        python).
    :param prog: the prefix of the reason on failure (``<prog>: ...`` is cut off).
    """
    lib = repo / "templates" / "lib"
    argv = ["bash", "-c", _CHOOSE, "bash", str(lib), slime_dir, MEGATRON_TO_HF_MODE,
            str(SGLANG_CUDA_GRAPH_MAX_BS), prog, python or "python3"]
    try:
        done = subprocess.run(
            argv, capture_output=True, env=dict(environ), timeout=STACK_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return StackChoice(error=str(exc))
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        said = [line.removeprefix(f"{prog}: ") for line in lines if line.startswith(f"{prog}: ")]
        return StackChoice(error=(said or lines or [f"bash exited {done.returncode}"])[-1])
    words = done.stdout.decode(errors="replace").split("\0")[:-1]
    return StackChoice(slime=words[0], sglang=words[1], note=words[2], args=words[3:])
