"""How train.sh's stack question (templates/lib/slime.sh over slime_helper.py) answers the odd
node: packages that print while imported, an SGLang with neither cuda-graph flag, a slime whose
arguments cannot be built. The node is a stand-in (fakes/stack_node.py) on PYTHONPATH; asked
through scripts/stack.py, as bin/doctor and the manifest ask it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agentcore_slime.scripts.stack import read_stack
from fakes.renders import REPO
from fakes.stack_node import STACKS, write_node, write_sglang, write_slime_arguments


def _environ(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(site)}


def test_what_the_imports_print_is_not_taken_for_the_answer(tmp_path: Path) -> None:
    slime, site = write_node(tmp_path, "v0.3.1")
    noise = 'import os, sys\nos.write(1, b"C-level noise\\n")\nprint("noise")\n'
    write_slime_arguments(slime, STACKS["v0.3.1"].slime_options, extra="\n" + noise)
    found = read_stack(REPO, str(slime), _environ(site), sys.executable)
    assert (found.error, found.sglang) == ("", "0.5.15.post1")
    assert found.args == ["--sglang-cuda-graph-max-bs-decode", "32"]


def test_an_sglang_without_either_cuda_graph_flag_gets_none_and_a_line_saying_so(tmp_path: Path) -> None:
    slime, site = write_node(tmp_path, "v0.3.1")
    write_sglang(site, "0.6.0", ["--mem-fraction-static"])
    found = read_stack(REPO, str(slime), _environ(site), sys.executable)
    assert found.error == "" and found.args == []
    assert found.note.endswith("SGLang 0.6.0: no --megatron-to-hf-mode (this slime has none and loads an HF "
                               "--ref-load itself); no cuda-graph batch size flag (this SGLang has neither "
                               "--cuda-graph-max-bs-decode nor --cuda-graph-max-bs; its default applies)")


def test_a_slime_whose_arguments_cannot_be_built_is_named_with_the_reason(tmp_path: Path) -> None:
    slime, site = write_node(tmp_path, "fa3c990")
    write_slime_arguments(slime, [], extra="\nimport no_such_module_here\n")
    found = read_stack(REPO, str(slime), _environ(site), sys.executable, "bin/doctor")
    assert found.error == (f"cannot build slime's arguments from {slime} "
                           "(ModuleNotFoundError: No module named 'no_such_module_here')")
