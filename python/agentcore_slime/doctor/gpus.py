"""GPU checks: nvidia-smi sees NUM_GPUS GPUs with free memory, the CUDA toolkit, torch_memory_saver.

The torch_memory_saver check mirrors ``fix_torch_memory_saver`` of templates/lib/cuda.sh: slime
preloads ``..._cu12.abi3.so`` (or the unsuffixed name); a cu13 build ships only ``_cu13``, and
train.sh links the cu12 name to it only when CUDA_HOME is set in the env file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..preflight.context import Context
from ..preflight.report import Result, failed, passed, warned

#: a GPU with less free memory than this fraction of its total is in use by something else
BUSY_FRACTION = 0.9
_TMS_STEM = "torch_memory_saver_hook_mode_preload"
_TMS_PROBE = Path(__file__).with_name("_find_package.py")


def _run(argv: list[str], ctx: Context) -> tuple[int, str]:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=dict(ctx.environ), timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout + done.stderr


def check_nvidia_smi(ctx: Context) -> Result:
    """NUM_GPUS GPUs visible, each with most of its memory free.

    :param ctx: the check context.
    """
    name, want = "gpus.count", int(str(ctx.value("NUM_GPUS")))
    if shutil.which("nvidia-smi", path=ctx.environ.get("PATH")) is None:
        return failed(
            name, "nvidia-smi not found on PATH", "install the NVIDIA driver, or run on the GPU node"
        )
    query = ["nvidia-smi", "--query-gpu=index,memory.total,memory.free", "--format=csv,noheader,nounits"]
    status, out = _run(query, ctx)
    if status != 0:
        return failed(
            name, f"nvidia-smi failed: {out.strip()[:200]}", "check the driver (nvidia-smi must work)"
        )
    gpus = [[field.strip() for field in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    try:
        memory = [(row[0], int(row[1]), int(row[2])) for row in gpus]
    except (IndexError, ValueError):
        return failed(name, f"cannot read nvidia-smi's output: {out.strip()[:200]}", "check the driver")
    if len(memory) < want:
        return failed(
            name, f"nvidia-smi sees {len(memory)} GPUs, NUM_GPUS={want}", f"set NUM_GPUS={len(memory)}"
        )
    busy = [
        f"GPU {index} ({free} of {total} MiB free)"
        for index, total, free in memory
        if free < BUSY_FRACTION * total
    ]
    if busy:
        return warned(
            name,
            f"{len(memory)} GPUs; in use: {', '.join(busy)}",
            "stop what holds them (nvidia-smi lists the processes); "
            "bin/train stops only this user's stale SGLang and Ray",
        )
    return passed(name, f"{len(memory)} GPUs (NUM_GPUS={want}), memory free")


def check_cuda(ctx: Context) -> Result:
    """CUDA_HOME (env file, else environment) and its nvcc version.

    :param ctx: the check context.
    """
    name = "gpus.cuda"
    home = ctx.value("CUDA_HOME") or ctx.environ.get("CUDA_HOME")
    nvcc = (
        str(Path(str(home)) / "bin" / "nvcc") if home else shutil.which("nvcc", path=ctx.environ.get("PATH"))
    )
    if not nvcc or not Path(nvcc).exists():
        where = f"CUDA_HOME={home}" if home else "no CUDA_HOME and no nvcc on PATH"
        return warned(
            name,
            f"{where}: nvcc not found",
            "set CUDA_HOME in the env file to the toolkit, e.g. /usr/local/cuda-13.0",
        )
    status, out = _run([nvcc, "--version"], ctx)
    version = re.search(r"release (\d+\.\d+)", out)
    if status != 0 or version is None:
        return warned(name, f"{nvcc} --version failed", "check the CUDA toolkit installation")
    pinned = "pinned by the env file" if ctx.value("CUDA_HOME") else "inherited, not pinned"
    return passed(name, f"nvcc {version.group(1)} at {nvcc} ({pinned})")


def check_memory_saver(ctx: Context) -> Result:
    """Which torch_memory_saver preload library slime will find.

    :param ctx: the check context.
    """
    name = "gpus.torch-memory-saver"
    data, error = ctx.run_job_python(_TMS_PROBE, "torch_memory_saver")
    if data is None:
        return warned(name, f"cannot ask the job's python: {error}", "check TOOLKIT_JOB_PYTHON / python3")
    dirs = data.get("dirs") or []
    if not dirs:
        return warned(name, "torch_memory_saver is not installed in the job's python", "run install_slime.sh")
    site = Path(dirs[0]).parent
    if (site / f"{_TMS_STEM}_cu12.abi3.so").exists() or (site / f"{_TMS_STEM}.abi3.so").exists():
        return passed(name, f"preload library found in {site}")
    if (site / f"{_TMS_STEM}_cu13.abi3.so").exists():
        if ctx.value("CUDA_HOME"):
            return passed(
                name, f"cu13 build in {site}: train.sh links the cu12 name to it (CUDA_HOME is set)"
            )
        return warned(
            name,
            f"cu13 build in {site} ships only {_TMS_STEM}_cu13.abi3.so, which slime does not look for",
            "set CUDA_HOME in the env file: train.sh then links the name slime preloads",
        )
    return warned(name, f"no preload library in {site}", "reinstall torch_memory_saver (install_slime.sh)")


def check_gpus(ctx: Context) -> list[Result]:
    """Every GPU check.

    :param ctx: the check context.
    """
    return [check_nvidia_smi(ctx), check_cuda(ctx), check_memory_saver(ctx)]
