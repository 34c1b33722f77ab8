"""Environment checks: bash, the job's python and its imports, the checkouts, the slime commit, Ray.

The job's python is this test's python with stand-ins of slime, SGLang and the router on its
PYTHONPATH (tests/fixtures/doctor/job_site) and MEGATRON_DIR holding an importable
``megatron.core``; ray, boto3, transformers and renderers are the real installed packages.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from agentcore_slime.doctor import Context
from agentcore_slime.doctor.environment import (
    TESTED_SLIMES,
    check_bash,
    check_checkouts,
    check_job_python,
    check_ray_auth,
    check_slime_commit,
    pinned_slime_commit,
)
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import FIXTURES, JOB_SITE, REPO, MakeContext, by_name, stub


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


STACKS = FIXTURES / "stacks"
ROUTER = "sglang-router 0.3.2 (slime's build"


def node(make_context: MakeContext, bin_dir: Path, commit_of: str, site_of: str | Path) -> Context:
    """A node whose slime is at the commit of stacks/<commit_of> and whose job python has the
    SGLang and router of stacks/<site_of> (or of that directory)."""
    commit = (STACKS / commit_of / "commit").read_text().strip()
    stub(bin_dir, "git", f'[[ "$*" == *"rev-parse HEAD"* ]] && echo {commit}')
    site = site_of if isinstance(site_of, Path) else STACKS / site_of / "site"
    return make_context(environ={"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": f"{site}:{JOB_SITE}"})


@pytest.mark.parametrize(
    ("stack", "found"),
    [
        ("fa3c990",
         f"slime fa3c990 (install_slime.sh's default stack), SGLang 0.5.13, {ROUTER} v0.3.2-1117d05)"),
        ("v0.3.1", f"slime v0.3.1 (a6272da0d), SGLang 0.5.15.post1, {ROUTER} v0.3.2-9daabcd)"),
        ("624b824a8", f"slime 624b824a8 (2026-08-21), SGLang 0.5.15.post1, {ROUTER} v0.3.2-9daabcd)"),
    ],
)
def test_each_tested_stack_is_named_with_its_sglang_and_router_build(
    make_context: MakeContext, bin_dir: Path, install: Path, stack: str, found: str
) -> None:
    """A node of each supported stack (tests/fixtures/doctor/stacks/<stack>): doctor names it."""
    result = check_slime_commit(node(make_context, bin_dir, stack, stack), install / "slime")
    assert result.status is Status.PASS, result.line()
    assert result.found == f"{found}: a tested stack; train.sh passes the flags this slime and SGLang have " \
        "(--megatron-to-hf-mode only at fa3c990, SGLang's cuda-graph flag by its name there)"


def test_slime_v031_with_the_pinned_stacks_sglang_says_what_differs_and_how_to_install_it(
    make_context: MakeContext, bin_dir: Path, install: Path
) -> None:
    result = check_slime_commit(node(make_context, bin_dir, "v0.3.1", "fa3c990"), install / "slime")
    assert result.status is Status.WARN
    assert result.found == (
        "slime v0.3.1 (a6272da0d), SGLang 0.5.13, sglang-router 0.3.2 (slime's build v0.3.2-1117d05): "
        "differs from the tested stack: SGLang 0.5.13 where it is tested with 0.5.15.post1; "
        "sglang-router 0.3.2 (slime's build v0.3.2-1117d05) where slime uses its build v0.3.2-9daabcd"
    )
    assert result.fix == (
        "rerun install_slime.sh --stack v0.3.1 for this environment (it installs SGLang 0.5.15.post1 "
        "and sglang-router from slime's sgl-router release v0.3.2-9daabcd)"
    )


def test_the_pinned_slime_with_only_another_router_build_warns(
    make_context: MakeContext, bin_dir: Path, install: Path, tmp_path: Path
) -> None:
    """The container's router build under the pinned slime and SGLang; then PyPI's router (no build)."""
    site = tmp_path / "site"
    shutil.copytree(STACKS / "fa3c990" / "site", site)
    url = site / "sglang_router-0.3.2.dist-info" / "direct_url.json"
    url.write_text(url.read_text().replace("1117d05", "9daabcd"))
    result = check_slime_commit(node(make_context, bin_dir, "fa3c990", site), install / "slime")
    assert result.status is Status.WARN
    assert result.found.endswith(
        "differs from the tested stack: sglang-router 0.3.2 (slime's build v0.3.2-9daabcd) where slime "
        "uses its build v0.3.2-1117d05"
    )
    assert result.fix.startswith("rerun install_slime.sh for this environment (it installs SGLang 0.5.13 ")
    url.unlink()  # as pip leaves it for a wheel from PyPI
    result = check_slime_commit(node(make_context, bin_dir, "fa3c990", site), install / "slime")
    assert result.status is Status.WARN
    no_build = "sglang-router 0.3.2 (no build recorded: not installed from a release of slime's sgl-router"
    assert no_build in result.found


def test_head_of_slime_with_the_wrong_sglang_names_no_installer_option_that_does_not_exist(
    make_context: MakeContext, bin_dir: Path, install: Path
) -> None:
    result = check_slime_commit(node(make_context, bin_dir, "624b824a8", "fa3c990"), install / "slime")
    assert result.status is Status.WARN
    assert "SGLang 0.5.13 where it is tested with 0.5.15.post1" in result.found
    assert result.fix == (
        "install SGLang 0.5.15.post1 and sglang-router from slime's sgl-router release v0.3.2-9daabcd, as "
        "slime's docker/Dockerfile at 624b824a8 does, or move to a stack install_slime.sh installs "
        "(--stack v0.3.1)"
    )


def test_the_tested_stacks_are_what_install_slime_sh_installs() -> None:
    """doctor's table and the installer's pins agree (slime, SGLang, router build of each stack)."""
    for commit, stack in TESTED_SLIMES.items():
        if not stack.install:
            continue
        option = stack.install.removeprefix("install_slime.sh").strip()
        plan = subprocess.run(
            ["bash", "-c", 'source <(sed -n "/^PIN_TORCH=/,/^# ----/p" "$1"); '
             '[[ -z $2 ]] || pins_v0_3_1; echo "$PIN_SLIME $PIN_SGLANG $PIN_SGLANG_ROUTER_WHEEL"',
             "bash", str(REPO / "install_slime.sh"), option],
            capture_output=True, text=True, check=True,
        ).stdout.split()
        assert plan[:2] == [commit, stack.sglang] and f"/download/{stack.router_build}/" in plan[2]
