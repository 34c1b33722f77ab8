"""Flag check: the final command line against the parsers slime's parse_args builds.

The job's python imports the slime stand-in of tests/fixtures/doctor/job_site, whose
``parse_args`` builds parsers the way slime's does (several parsers, each through
``parse_known_args``, then a validation that fails on an empty command line), holding the flags
tests/python/launcher/test_slime_flags.py audited at the pinned commits.
"""

from __future__ import annotations

import importlib.util
import re

from agentcore_slime.doctor.flags import check_flags, unknown_flags
from agentcore_slime.preflight.report import Status
from doctor_helpers import JOB_SITE, REPO, MakeContext


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
    spec = importlib.util.spec_from_file_location("audit", REPO / "tests/python/launcher/test_slime_flags.py")
    assert spec and spec.loader
    audit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(audit)
    stand_in = (JOB_SITE / "slime" / "utils" / "arguments.py").read_text()
    listed = set(re.findall(r'"(--[a-z0-9-]+)"', stand_in))
    assert set(audit.KNOWN) <= listed
