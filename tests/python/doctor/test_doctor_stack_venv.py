"""bin/doctor on a node whose job python is a venv's, as install_slime.sh sets every node up.

The node is a stand-in of each supported stack: a real venv (``python -m venv``) whose
site-packages holds that stack's SGLang (its version and ``ServerArgs.add_cli_args``,
fakes/stack_node.py) and sglang-router (the dist-info of slime's router build,
tests/fixtures/doctor/stacks), and the slime checkout installed in it as ``pip install -e`` does
(a .pth file naming SLIME_DIR; its ``slime.utils.arguments`` is the parser stand-in of
tests/fixtures/doctor/job_site). Nothing reaches the job's python through PYTHONPATH, so only a
python run by its own path finds these packages (a link to it elsewhere loses its venv).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentcore_slime.doctor.environment import check_slime_commit
from agentcore_slime.doctor.flags import check_flags
from agentcore_slime.preflight.context import Context
from agentcore_slime.preflight.report import Status
from agentcore_slime.scripts.stack import read_stack
from fakes.doctor_helpers import FIXTURES, REPO, MakeContext, stub
from fakes.stack_node import STACKS, write_sglang

NEW_GRAPH_FLAG = "--sglang-cuda-graph-max-bs-decode"
#: what doctor says about each stack, and the flags train.sh chooses for it
EXPECTED = {
    "fa3c990": (
        "slime fa3c990 (install_slime.sh's default stack), SGLang 0.5.13",
        "--megatron-to-hf-mode bridge --sglang-cuda-graph-max-bs 32",
    ),
    "v0.3.1": ("slime v0.3.1 (a6272da0d), SGLang 0.5.15.post1", f"{NEW_GRAPH_FLAG} 32"),
    "624b824a8": ("slime 624b824a8 (2026-08-21), SGLang 0.5.15.post1", f"{NEW_GRAPH_FLAG} 32"),
}


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of the python running the tests (no pip: packages are laid in as pip lays them)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    return root


def venv_node(stack: str, venv: Path, install: Path, make_context: MakeContext, bin_dir: Path) -> Context:
    """The fake install turned into a node of ``stack`` whose job python is the venv's."""
    slime = install / "slime"
    arguments = slime / "slime" / "utils" / "arguments.py"
    if "--megatron-to-hf-mode" not in STACKS[stack].slime_options:  # removed in slime #2251
        arguments.write_text(arguments.read_text().replace('    "--megatron-to-hf-mode",\n', ""))
    [site] = (venv / "lib").glob("python3*/site-packages")
    for path in (FIXTURES / "stacks" / stack / "site").iterdir():  # the router build's dist-info
        shutil.copytree(path, site / path.name, dirs_exist_ok=True)
    write_sglang(site, STACKS[stack].sglang, STACKS[stack].sglang_options)
    (site / "slime.pth").write_text(f"{slime}\n")
    commit = (FIXTURES / "stacks" / stack / "commit").read_text().strip()
    stub(bin_dir, "git", f'[[ "$*" == *"rev-parse"*"HEAD"* ]] && echo {commit}; true')
    python = str(venv / "bin" / "python")
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": "", "TOOLKIT_JOB_PYTHON": python}
    return make_context(environ=environ)


@pytest.mark.parametrize("stack", list(EXPECTED))
def test_doctor_names_the_stack_of_a_venv_python_without_a_false_warning(
    stack: str, bare_venv: Path, tmp_path: Path, install: Path, make_context: MakeContext, bin_dir: Path
) -> None:
    venv = tmp_path / "venv"
    shutil.copytree(bare_venv, venv, symlinks=True)
    ctx = venv_node(stack, venv, install, make_context, bin_dir)
    named, flags = EXPECTED[stack]
    commit = check_slime_commit(ctx, install / "slime")
    assert commit.status is Status.PASS, commit.line()
    assert commit.found.startswith(f"{named}, sglang-router 0.3.2 (slime's build ")
    [known] = check_flags(ctx)
    assert known.status is Status.PASS, known.line()
    assert known.found.endswith(f", {flags} (chosen for this slime stack) included")


def test_the_stack_is_asked_of_the_venv_python_by_its_path(
    bare_venv: Path, tmp_path: Path, install: Path, make_context: MakeContext, bin_dir: Path
) -> None:
    """What bin/doctor, --dry-run, train.sh and the manifest share (scripts/stack.py): the venv's
    packages answer, not those of whatever python3 comes first on PATH."""
    venv = tmp_path / "venv"
    shutil.copytree(bare_venv, venv, symlinks=True)
    ctx = venv_node("v0.3.1", venv, install, make_context, bin_dir)
    slime, environ = str(install / "slime"), ctx.job_environ()
    found = read_stack(REPO, slime, environ, str(venv / "bin" / "python"), "bin/doctor")
    assert (found.error, found.sglang, found.args) == ("", "0.5.15.post1", [NEW_GRAPH_FLAG, "32"])
    # the python the tests run has no sglang: asked instead, it says so
    other = read_stack(REPO, slime, environ, sys.executable, "bin/doctor")
    assert other.error == (
        f"python3 ({sys.executable}) has no sglang package "
        "(activate the environment that has the slime stack)"
    )
