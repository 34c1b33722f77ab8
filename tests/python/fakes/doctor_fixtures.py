"""Fixtures for bin/doctor's tests: a fake slime installation and a check context over it.

The installation (``install``) is a temporary directory with a slime checkout holding the
fixture model scripts (tests/fixtures/doctor/models), a Megatron-LM checkout whose
``megatron.core`` is importable, the two Qwen2.5-32B model directories (base and Instruct
config.json) and the data fixtures. The job's python is this test's python, with
tests/fixtures/doctor/job_site (stand-ins of slime's parsers, SGLang and the router) on its
PYTHONPATH; everything else it imports (ray, boto3, transformers, renderers) is real.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from agentcore_slime.doctor import Context
from agentcore_slime.settings.envfile import EnvEntry
from agentcore_slime.settings.validate import resolve

from fakes.doctor_helpers import FIXTURES, JOB_SITE, REPO, MakeContext


@pytest.fixture
def install(tmp_path: Path) -> Path:
    """A fake slime stack, model directories and data under ``tmp_path/install``."""
    root = tmp_path / "install"
    models = root / "slime" / "scripts" / "models"
    models.mkdir(parents=True)
    (root / "slime" / "train.py").write_text("")
    # the checkout's own parser module, which train.sh reads for the stack's flags: fa3c990's
    shutil.copytree(JOB_SITE / "slime", root / "slime" / "slime", ignore=shutil.ignore_patterns("*.pyc"))
    for script in (FIXTURES / "models").glob("*.sh"):
        shutil.copy(script, models)
    core = root / "Megatron-LM" / "megatron" / "core"
    core.mkdir(parents=True)
    (core.parent / "__init__.py").write_text("")
    (core / "__init__.py").write_text("")
    shutil.copytree(FIXTURES / "hf", root / "hf")
    shutil.copytree(FIXTURES / "data", root / "data")
    return root


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A directory first on the context's PATH, for stubs such as nvidia-smi."""
    path = tmp_path / "stubs"
    path.mkdir()
    return path


@pytest.fixture
def make_context(install: Path, bin_dir: Path, tmp_path: Path) -> MakeContext:
    """Build a :class:`Context` from env-file values (defaults: the Instruct model, good data).

    :returns: ``make(**keys, slime_flags=[], variant="sync", offline=True, environ={})``.
    """

    def make(
        slime_flags: list[str] | None = None,
        variant: str = "sync",
        offline: bool = True,
        environ: dict[str, str] | None = None,
        **keys: str,
    ) -> Context:
        values = {
            "EXP_ID": "doctor-exp",
            "S3_BUCKET": "my-bucket",
            "AGENT_RUNTIME_ARN": "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-AbC123",
            "MODEL_DIR": str(install / "hf" / "qwen2.5-32b-instruct"),
            "DATA_PATH": str(install / "data" / "good.jsonl"),
            "MODEL_TYPE": "qwen2.5-32B",
            "SLIME_DIR": str(install / "slime"),
            "MEGATRON_DIR": str(install / "Megatron-LM"),
            "SAVE_DIR": str(tmp_path / "save"),
            **keys,
        }
        entries = {name: EnvEntry(value, line) for line, (name, value) in enumerate(values.items(), 1)}
        config = resolve(entries, {}, tmp_path / "exp.env", tmp_path / "runs")
        env = {
            "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(JOB_SITE),
            "TOOLKIT_JOB_PYTHON": sys.executable,
            **(environ or {}),
        }
        return Context(
            config=config,
            repo=REPO,
            slime_flags=slime_flags or [],
            variant=variant,
            environ=env,
            offline=offline,
        )

    return make
