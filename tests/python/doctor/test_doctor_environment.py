"""Environment checks: bash, the job's python and its imports, the checkouts, the slime commit, Ray.

The job's python is this test's python with stand-ins of slime, SGLang and the router on its
PYTHONPATH (tests/fixtures/doctor/job_site) and MEGATRON_DIR holding an importable
``megatron.core``; ray, boto3, transformers and renderers are the real installed packages.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from agentcore_slime.doctor.environment import (
    check_bash,
    check_checkouts,
    check_job_python,
    check_ray_auth,
    check_slime_commit,
    pinned_slime_commit,
)
from agentcore_slime.preflight.report import Status
from doctor_helpers import REPO, MakeContext, by_name, stub


def test_bash_version_passes(make_context: MakeContext) -> None:
    assert check_bash(make_context()).status is Status.PASS


def test_an_old_bash_fails(make_context: MakeContext, bin_dir: Path) -> None:
    stub(bin_dir, "bash", 'echo "3 2 3.2.57(1)-release"', shell="/bin/sh")
    result = check_bash(make_context())
    assert result.status is Status.FAIL and "3.2.57" in result.found


def test_the_job_python_imports_everything(make_context: MakeContext) -> None:
    results = by_name(check_job_python(make_context()))
    assert results["env.python"].status is Status.PASS
    assert results["env.imports"].status is Status.PASS, results["env.imports"].line()
    assert results["env.ray"].status is Status.PASS and results["env.ray"].found.startswith("ray 2.")


def test_a_missing_package_fails_naming_it(make_context: MakeContext) -> None:
    results = by_name(check_job_python(make_context(environ={"PYTHONPATH": ""})))
    imports = results["env.imports"]
    assert imports.status is Status.FAIL
    # sglang_router may be importable here (the tests install it for its parser): not asserted
    assert "cannot import slime, sglang" in imports.found
    assert "No module named 'slime'" in imports.found


def test_a_job_python_that_does_not_run_fails(make_context: MakeContext) -> None:
    results = check_job_python(make_context(environ={"TOOLKIT_JOB_PYTHON": "no-such-python"}))
    assert [r.status for r in results] == [Status.FAIL]


def test_ray_token_auth_is_reported(make_context: MakeContext, tmp_path: Path) -> None:
    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text("x")
    ray = check_ray_auth(make_context(), "2.60.0")
    assert ray.found.startswith("ray 2.60.0; token authentication on (") and "auth_token exists" in ray.found
    ray = check_ray_auth(make_context(environ={"RAY_AUTH_MODE": "token", "HOME": str(tmp_path)}), "2.60.0")
    assert "(RAY_AUTH_MODE=token)" in ray.found


def test_checkouts_pass_and_missing_ones_fail(make_context: MakeContext, tmp_path: Path) -> None:
    results = by_name(check_checkouts(make_context()))
    assert results["env.slime-dir"].status is Status.PASS
    assert results["env.megatron-dir"].status is Status.PASS
    results = by_name(check_checkouts(make_context(SLIME_DIR=str(tmp_path), MEGATRON_DIR=str(tmp_path))))
    assert results["env.slime-dir"].status is Status.FAIL
    assert results["env.megatron-dir"].status is Status.FAIL


def _git_checkout(path: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "x")
    return git("rev-parse", "HEAD")


def test_slime_at_another_commit_warns_and_at_the_pin_passes(
    make_context: MakeContext, install: Path, tmp_path: Path
) -> None:
    slime = install / "slime"
    head = _git_checkout(slime)
    result = check_slime_commit(make_context(), slime)
    assert result.status is Status.WARN and head[:12] in result.found
    assert "fa3c990af6f1" in result.found and result.fix.startswith(f"git -C {slime} checkout fa3c990af6f1")
    repo = tmp_path / "toolkit"
    repo.mkdir()
    (repo / "install_slime.sh").write_text(f'PIN_SLIME="{head}"  # THUDM/slime\n')
    ctx = make_context()
    ctx.repo = repo
    assert check_slime_commit(ctx, slime).status is Status.PASS


def test_the_pin_is_read_from_install_slime_sh() -> None:
    assert pinned_slime_commit(REPO) == "fa3c990af6f18efd3fd9922698bf4bf4048d1263"


def test_an_old_job_python_fails(make_context: MakeContext, bin_dir: Path) -> None:
    """A stand-in python that answers the probe like a 3.9 interpreter with everything importable."""
    body = 'echo; echo \'{"python": "3.9.18", "modules": {"ray": {"version": "2.9.0", "error": ""}}}\''
    old = stub(bin_dir, "python3.9", body)
    results = by_name(check_job_python(make_context(environ={"TOOLKIT_JOB_PYTHON": str(old)})))
    assert results["env.python"].status is Status.FAIL and "3.9.18" in results["env.python"].found
    assert results["env.imports"].status is Status.PASS


def test_a_missing_slime_checkout_fails_once_and_gets_no_commit_warning(
    make_context: MakeContext, tmp_path: Path
) -> None:
    results = by_name(check_checkouts(make_context(SLIME_DIR=str(tmp_path / "no-slime"))))
    assert results["env.slime-dir"].status is Status.FAIL
    assert "env.slime-commit" not in results


@pytest.mark.parametrize(
    ("commit", "found"),
    [
        ("fa3c990af6f18efd3fd9922698bf4bf4048d1263",
         "slime fa3c990 (install_slime.sh's default pin): tested with SGLang 0.5.13"),
        ("a6272da0d4f3d0a08520c99a2f3b4f6c887960dc",
         "slime v0.3.1 (a6272da0d): tested with SGLang 0.5.15.post1"),
        ("624b824a898ab0ec1fcb4d373004c7f3852bf515",
         "slime 624b824a8 (2026-08-21): tested with SGLang 0.5.15.post1"),
    ],
)
def test_each_tested_slime_is_named_with_its_sglang(
    make_context: MakeContext, bin_dir: Path, install: Path, commit: str, found: str
) -> None:
    """A node of each supported stack (git answers the checkout's commit): doctor names it."""
    stub(bin_dir, "git", f'[[ "$*" == *"rev-parse HEAD"* ]] && echo {commit}')
    ctx = make_context(environ={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    result = check_slime_commit(ctx, install / "slime")
    assert result.status is Status.PASS and result.found.startswith(found), result.found
