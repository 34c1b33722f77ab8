"""train.sh's stack question asked of SGLang 0.5.13 itself: the real ``ServerArgs.add_cli_args``.

templates/lib/slime_helper.py chooses the cuda-graph flag by whether SGLang's own argument
definitions have ``--cuda-graph-max-bs-decode``. Here it runs with the python of ``.venv-sglang``
(tests/run makes it: SGLang 0.5.13's real package, CPU torch), where the only stand-in is
torchvision (as in tests/python/evaluate/sglang_parser_probe.py: no build of it loads beside a
CPU torch, and no parser touches it); slime is the stand-in of fakes/stack_node.py (slime is on
no package registry; tests/slime_stacks/README.md says how its real code was asked).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from fakes.renders import REPO
from fakes.sglang_venv import sglang_python
from fakes.stack_node import STACKS, write_slime_arguments

HELPER = REPO / "templates" / "lib" / "slime_helper.py"
#: runs the helper as ``python3 slime_helper.py SLIME_DIR`` does, torchvision stood in for first
_RUN = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from sglang_parser_probe import _TorchvisionStandIn
sys.meta_path.insert(0, _TorchvisionStandIn())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_sglang_0_5_13_has_only_the_old_cuda_graph_flag(tmp_path: Path) -> None:
    write_slime_arguments(tmp_path / "slime", STACKS["fa3c990"].slime_options)
    evaluate = REPO / "tests" / "python" / "evaluate"
    done = subprocess.run(
        [str(sglang_python()), "-c", _RUN, str(evaluate), str(HELPER), str(tmp_path / "slime")],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines() == ["0.5.13", "slime --megatron-to-hf-mode", "sglang --cuda-graph-max-bs"]
