"""GPU checks against a stubbed nvidia-smi and nvcc on PATH, and a fake torch_memory_saver."""

from __future__ import annotations

from pathlib import Path

from agentcore_slime.doctor.gpus import check_cuda, check_memory_saver, check_nvidia_smi
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import MakeContext, stub

EIGHT_FREE = "\n".join(f"{i}, 81559, 81000" for i in range(8))


def test_enough_free_gpus_pass(make_context: MakeContext, bin_dir: Path) -> None:
    stub(
        bin_dir,
        "nvidia-smi",
        f'[[ $1 == --query-gpu=index,memory.total,memory.free ]] || exit 9\necho "{EIGHT_FREE}"',
    )
    result = check_nvidia_smi(make_context())
    assert result.status is Status.PASS and result.found.startswith("8 GPUs")


def test_fewer_gpus_than_num_gpus_fail(make_context: MakeContext, bin_dir: Path) -> None:
    stub(bin_dir, "nvidia-smi", 'printf "0, 81559, 81000\\n1, 81559, 81000\\n"')
    result = check_nvidia_smi(make_context())
    assert result.status is Status.FAIL and "sees 2 GPUs, NUM_GPUS=8" in result.found
    assert result.fix == "set NUM_GPUS=2"


def test_gpus_in_use_are_warned(make_context: MakeContext, bin_dir: Path) -> None:
    stub(bin_dir, "nvidia-smi", 'printf "0, 81559, 81000\\n1, 81559, 2000\\n"')
    result = check_nvidia_smi(make_context(NUM_GPUS="2", TP_SIZE="1", ROLLOUT_GPUS_PER_ENGINE="1"))
    assert result.status is Status.WARN and "GPU 1 (2000 of 81559 MiB free)" in result.found


def test_no_nvidia_smi_or_a_failing_one_fails(make_context: MakeContext, bin_dir: Path) -> None:
    ctx = make_context(environ={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert check_nvidia_smi(ctx).status is Status.FAIL
    stub(bin_dir, "nvidia-smi", 'echo "NVIDIA-SMI has failed" >&2; exit 9')
    result = check_nvidia_smi(ctx)
    assert result.status is Status.FAIL and "NVIDIA-SMI has failed" in result.found


def test_cuda_home_with_nvcc_passes_and_without_warns(make_context: MakeContext, tmp_path: Path) -> None:
    home = tmp_path / "cuda-13.0"
    (home / "bin").mkdir(parents=True)
    stub(home / "bin", "nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.88"')
    result = check_cuda(make_context(CUDA_HOME=str(home)))
    assert result.status is Status.PASS and "nvcc 13.0" in result.found and "pinned" in result.found
    empty = tmp_path / "cuda-none"
    empty.mkdir()
    assert check_cuda(make_context(CUDA_HOME=str(empty))).status is Status.WARN


def _memory_saver(site: Path, *libraries: str) -> None:
    package = site / "torch_memory_saver"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in libraries:
        (site / name).write_text("")


def test_memory_saver_cu13_build_is_fine_only_with_cuda_home(
    make_context: MakeContext, tmp_path: Path
) -> None:
    """The layout fix_torch_memory_saver (templates/lib/cuda.sh) repairs: only a _cu13 library."""
    site = tmp_path / "site"
    _memory_saver(site, "torch_memory_saver_hook_mode_preload_cu13.abi3.so")
    environ = {"PYTHONPATH": str(site)}
    warned = check_memory_saver(make_context(environ=environ))
    assert warned.status is Status.WARN and "set CUDA_HOME" in warned.fix
    home = tmp_path / "cuda"
    home.mkdir()
    assert check_memory_saver(make_context(environ=environ, CUDA_HOME=str(home))).status is Status.PASS


def test_memory_saver_with_the_cu12_name_passes(make_context: MakeContext, tmp_path: Path) -> None:
    site = tmp_path / "site"
    _memory_saver(site, "torch_memory_saver_hook_mode_preload_cu12.abi3.so")
    assert check_memory_saver(make_context(environ={"PYTHONPATH": str(site)})).status is Status.PASS


def test_memory_saver_missing_warns(make_context: MakeContext) -> None:
    result = check_memory_saver(make_context())
    assert result.status is Status.WARN and "not installed" in result.found
