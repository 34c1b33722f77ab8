"""Flag check: the final command line against the parsers slime's parse_args builds.

The job's python imports the slime stand-in of tests/fixtures/doctor/job_site, whose
``parse_args`` builds parsers the way slime's does (several parsers, each through
``parse_known_args``, then a validation that fails on an empty command line), holding the flags
tests/python/scripts/test_slime_flags.py audited at the pinned commits.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from agentcore_slime.doctor.flags import check_flags, unknown_flags
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import JOB_SITE, REPO, MakeContext


def test_the_rendered_command_line_passes(make_context: MakeContext) -> None:
    [result] = check_flags(make_context(VAL_DATA_PATH=str(REPO / "README.md"), SAVE_HF="true"))
    assert result.status is Status.PASS, result.line()


def test_an_unknown_flag_fails_named_with_the_closest_one(make_context: MakeContext) -> None:
    ctx = make_context(
        EXTRA_FLAGS="--rollout-temprature 0.9 --sglang-router-policy cache_aware",
        slime_flags=["--totally-made-up"],
    )
    [result] = check_flags(ctx)
    assert result.status is Status.FAIL
    assert "slime would silently ignore 3 flag(s)" in result.found
    assert "--rollout-temprature (did you mean --rollout-temperature?)" in result.found
    assert "--sglang-router-policy (did you mean --router-policy?)" in result.found
    assert "--totally-made-up (no similar flag)" in result.found


def test_without_slime_the_check_warns(make_context: MakeContext) -> None:
    [result] = check_flags(make_context(environ={"PYTHONPATH": ""}))
    assert result.status is Status.WARN and "No module named 'slime'" in result.found


def test_unknown_flags_reads_inline_values() -> None:
    assert unknown_flags(["--a=1", "-1", "value", "--b"], {"--a", "--b"}) == []


def test_the_stand_in_holds_every_flag_the_launcher_audit_knows() -> None:
    spec = importlib.util.spec_from_file_location("audit", REPO / "tests/python/scripts/test_slime_flags.py")
    assert spec and spec.loader
    audit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(audit)
    stand_in = (JOB_SITE / "slime" / "utils" / "arguments.py").read_text()
    listed = set(re.findall(r'"(--[a-z0-9-]+)"', stand_in))
    assert set(audit.KNOWN) <= listed


def test_the_flags_train_sh_chooses_for_the_stack_are_checked(make_context: MakeContext) -> None:
    """The fake node is fa3c990 with SGLang 0.5.13 (the job_site stand-ins): train.sh adds
    --megatron-to-hf-mode bridge and --sglang-cuda-graph-max-bs, and the check counts them."""
    [result] = check_flags(make_context())
    assert result.status is Status.PASS, result.line()
    assert result.found.endswith(
        ", --megatron-to-hf-mode bridge --sglang-cuda-graph-max-bs 32 (chosen for this slime stack) included"
    )


def test_a_stack_train_sh_cannot_read_warns(make_context: MakeContext, tmp_path: Path) -> None:
    (tmp_path / "bare" / "scripts" / "models").mkdir(parents=True)
    [result] = check_flags(make_context(SLIME_DIR=str(tmp_path / "bare")))
    assert result.status is Status.WARN
    reason = f"it cannot tell which stack this node has (no {tmp_path}/bare/slime/utils/arguments.py"
    assert reason in result.found
