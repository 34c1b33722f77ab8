"""Disk check: free space under SAVE_DIR against the checkpoints the model implies."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from agentcore_slime.preflight import disk
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import FIXTURES, MakeContext

Usage = namedtuple("Usage", "total used free")
GIB = 1024**3


def test_parameter_count_of_qwen25_32b_is_about_32_billion() -> None:
    import json

    hf = json.loads((FIXTURES / "hf" / "qwen2.5-32b-instruct" / "config.json").read_text())
    params = disk.parameter_count(hf)
    assert params is not None and 31e9 < params < 34e9  # the published size: 32.5B


@pytest.mark.parametrize(
    ("free_gib", "status"),
    [(10_000, Status.PASS), (600, Status.WARN), (100, Status.FAIL)],
)
def test_free_space_against_one_and_all_checkpoints(
    make_context: MakeContext, monkeypatch: pytest.MonkeyPatch, free_gib: int, status: Status
) -> None:
    """~32.8B params x 14 bytes = ~428 GiB per save; NUM_ROLLOUT 20 / SAVE_INTERVAL 10 = 2 saves."""
    seen: list[Path] = []

    def usage(path: Path) -> Usage:
        seen.append(Path(path))
        return Usage(0, 0, free_gib * GIB)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    ctx = make_context(NUM_ROLLOUT="20", SAVE_INTERVAL="10")
    [result] = disk.check_disk(ctx)
    assert result.status is status, result.line()
    assert "2 save(s)" in result.found
    assert seen and Path(str(ctx.value("SAVE_DIR"))).is_relative_to(seen[0])  # nearest existing parent


def test_a_model_without_sizes_is_a_warning(make_context: MakeContext, tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    [result] = disk.check_disk(make_context(MODEL_DIR=str(model)))
    assert result.status is Status.WARN
