"""Environment checks: bash and python versions, what the job imports, the slime checkout, Ray.

The job runs ``python3 train.py`` through ``ray job submit`` with PYTHONPATH = MEGATRON_DIR and
this toolkit's python/ (as train.sh sets it), so the imports are tried by that python with that
PYTHONPATH (TOOLKIT_JOB_PYTHON overrides which python).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..preflight.context import Context
from ..preflight.report import Result, failed, passed, warned

#: what the job imports: slime's stack, then this package and its dependencies
JOB_MODULES = (
    "slime",
    "megatron.core",
    "sglang",
    "sglang_router",
    "ray",
    "agentcore_slime.rollout",
    "boto3",
    "yaml",
    "aiohttp",
    "httpx",
    "renderers",
    "transformers",
)
#: the job imports this package: its python floor is the package's requires-python
PYTHON_FLOOR = (3, 11)
FLOOR = ".".join(map(str, PYTHON_FLOOR))
_IMPORTS = Path(__file__).with_name("_imports.py")
_PIN = re.compile(r'^PIN_SLIME="([0-9a-f]{7,40})"', re.MULTILINE)


def check_bash(ctx: Context) -> Result:
    """bash >= 4.4 (the rendered scripts need it).

    :param ctx: the check context.
    """
    try:
        out = subprocess.run(
            ["bash", "-c", 'echo "${BASH_VERSINFO[0]} ${BASH_VERSINFO[1]} $BASH_VERSION"'],
            capture_output=True,
            text=True,
            env=dict(ctx.environ),
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return failed("env.bash", "bash does not run", "install bash >= 4.4")
    if (int(out[0]), int(out[1])) < (4, 4):
        return failed("env.bash", f"bash {out[2]}", "install bash >= 4.4")
    return passed("env.bash", f"bash {out[2]}")


def check_job_python(ctx: Context) -> list[Result]:
    """The job's python version and each module it imports.

    :param ctx: the check context.
    """
    data, error = ctx.run_job_python(_IMPORTS, *JOB_MODULES)
    if data is None:
        return [
            failed(
                "env.python",
                f"the job's python does not run: {error}",
                f"put python3 >= {FLOOR} on PATH, or set TOOLKIT_JOB_PYTHON",
            )
        ]
    version = str(data.get("python", "0.0.0"))
    results = []
    if tuple(int(part) for part in version.split(".")[:2]) < PYTHON_FLOOR:
        results.append(
            failed(
                "env.python",
                f"the job's python is {version}",
                f"use python >= {FLOOR} (the slime environment)",
            )
        )
    else:
        results.append(passed("env.python", f"the job's python {ctx.job_python} is {version}"))
    modules = data.get("modules") or {}
    broken = {name: info["error"] for name, info in modules.items() if info.get("error")}
    if broken:
        shown = "; ".join(f"{name}: {err}" for name, err in broken.items())
        results.append(
            failed(
                "env.imports",
                f"the job's python cannot import {', '.join(broken)} ({shown})",
                "activate the slime environment (install_slime.sh) and pip install -e python/ "
                "of this toolkit",
            )
        )
    else:
        results.append(passed("env.imports", f"the job's python imports {', '.join(modules)}"))
    ray = modules.get("ray", {})
    if ray and not ray.get("error"):
        results.append(check_ray_auth(ctx, str(ray.get("version", ""))))
    return results


def check_ray_auth(ctx: Context, version: str) -> Result:
    """The Ray version and whether its token authentication will be on.

    :param ctx: the check context.
    :param version: ray.__version__ of the job's python.
    """
    token_file = Path(ctx.environ.get("HOME", "~")).expanduser() / ".ray" / "auth_token"
    if ctx.environ.get("RAY_AUTH_MODE") == "token":
        auth = "token authentication on (RAY_AUTH_MODE=token)"
    elif token_file.exists():
        auth = f"token authentication on ({token_file} exists: a new head turns it on)"
    else:
        auth = "no token authentication configured"
    return passed("env.ray", f"ray {version}; {auth}")


def check_checkouts(ctx: Context) -> list[Result]:
    """SLIME_DIR and MEGATRON_DIR exist; slime is at the commit install_slime.sh pins.

    :param ctx: the check context.
    """
    slime, megatron = Path(str(ctx.value("SLIME_DIR"))), Path(str(ctx.value("MEGATRON_DIR")))
    results = []
    if (slime / "train.py").is_file():
        results.append(passed("env.slime-dir", f"{slime} is a slime checkout"))
    else:
        results.append(
            failed("env.slime-dir", f"{slime}/train.py does not exist", "set SLIME_DIR to the slime checkout")
        )
    if (megatron / "megatron").is_dir():
        results.append(passed("env.megatron-dir", f"{megatron} is a Megatron-LM checkout"))
    else:
        results.append(
            failed(
                "env.megatron-dir",
                f"{megatron}/megatron does not exist",
                "set MEGATRON_DIR to the Megatron-LM checkout",
            )
        )
    if slime.is_dir():  # a missing checkout is env.slime-dir's failure, not a commit to warn about
        results.append(check_slime_commit(ctx, slime))
    return results


def pinned_slime_commit(repo: Path) -> str | None:
    """The slime commit install_slime.sh installs (its ``PIN_SLIME=`` line).

    :param repo: the toolkit checkout.
    """
    try:
        match = _PIN.search((repo / "install_slime.sh").read_text(encoding="utf-8"))
    except OSError:
        return None
    return match.group(1) if match else None


@dataclass(frozen=True)
class TestedStack:
    """A slime commit the toolkit is tested with, and the stack it runs with there.

    :param name: how doctor names it.
    :param sglang: the SGLang version.
    :param router_build: the release of slime's sgl-router fork its docker files install.
    :param install: the installer command that installs this stack ("" when none does).
    """

    name: str
    sglang: str
    router_build: str
    install: str


#: the slime commits the toolkit is tested with; what differs between them is chosen at run time
#: (templates/lib/slime.sh, tests/slime_stacks/*.flags). SGLang and the router build are those of
#: slime's docker/Dockerfile at each commit (install_slime.sh installs the same for fa3c990 and
#: v0.3.1).
TESTED_SLIMES = {
    "fa3c990af6f18efd3fd9922698bf4bf4048d1263": TestedStack(
        "fa3c990 (install_slime.sh's default stack)", "0.5.13", "v0.3.2-1117d05", "install_slime.sh"
    ),
    "a6272da0d4f3d0a08520c99a2f3b4f6c887960dc": TestedStack(
        "v0.3.1 (a6272da0d)", "0.5.15.post1", "v0.3.2-9daabcd", "install_slime.sh --stack v0.3.1"
    ),
    "624b824a898ab0ec1fcb4d373004c7f3852bf515": TestedStack(
        "624b824a8 (2026-08-21)", "0.5.15.post1", "v0.3.2-9daabcd", ""
    ),
}
_STACK_PROBE = Path(__file__).with_name("_stack_probe.py")
_ROUTER_RELEASE = re.compile(r"/releases/download/([^/]+)/sglang_router-[^/]*\.whl$")
#: what train.sh does about the slime stack (templates/lib/slime.sh)
_CHOSEN = (
    "train.sh passes the flags this slime and SGLang have (--megatron-to-hf-mode only at "
    "fa3c990, SGLang's cuda-graph flag by its name there)"
)


def installed_stack(ctx: Context) -> tuple[str, str]:
    """The job's python's SGLang version and sglang-router, each "" when not installed; the router
    as ``0.3.2 (slime's build v0.3.2-9daabcd)`` or ``0.3.2 (no build recorded: ...)``.

    :param ctx: the check context.
    """
    data, _ = ctx.run_job_python(_STACK_PROBE)
    data = data or {}
    router, url = str(data.get("router", "")), str(data.get("router_url", ""))
    release = _ROUTER_RELEASE.search(url)
    if router and release:
        router = f"{router} (slime's build {release.group(1)})"
    elif router:
        router = f"{router} (no build recorded: not installed from a release of slime's sgl-router fork)"
    return str(data.get("sglang", "")), router


def check_slime_commit(ctx: Context, slime: Path) -> Result:
    """Which slime stack the node has: slime's commit, the job's SGLang and sglang-router build.
    A tested stack (:data:`TESTED_SLIMES`) with the SGLang and router build it is tested with
    passes; what differs warns, with how to get the tested one; any other slime commit warns.

    :param ctx: the check context.
    :param slime: SLIME_DIR.
    """
    name, pin = "env.slime-commit", pinned_slime_commit(ctx.repo)
    try:
        head = subprocess.run(
            ["git", "-C", str(slime), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            env=dict(ctx.environ),
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return warned(
            name,
            f"{slime} is not a git checkout: its commit is unknown",
            f"install slime at {pin} (install_slime.sh)",
        )
    if pin is not None and pin not in TESTED_SLIMES and (head.startswith(pin) or pin.startswith(head)):
        return passed(name, f"slime at {head[:12]} (the commit install_slime.sh pins)")
    sglang, router = installed_stack(ctx)
    found = f"SGLang {sglang or '(not installed)'}, sglang-router {router or '(not installed)'}"
    tested = next((v for k, v in TESTED_SLIMES.items() if k.startswith(head) or head.startswith(k)), None)
    if tested is None:
        known = ", ".join(v.name.split(" ")[0] for v in TESTED_SLIMES.values())
        return warned(
            name,
            f"slime at {head[:12]} with {found} is not a tested stack (tested: {known}; "
            f"install_slime.sh pins {(pin or '?')[:12]}): flags and checks may differ",
            f"git -C {slime} checkout {(pin or '?')[:12]} (or a tested commit above), or rerun "
            "install_slime.sh",
        )
    return _compare_with_tested(name, tested, sglang, router, found)


def _compare_with_tested(name: str, tested: TestedStack, sglang: str, router: str, found: str) -> Result:
    differs = []
    if sglang != tested.sglang:
        differs.append(f"SGLang {sglang or '(not installed)'} where it is tested with {tested.sglang}")
    if f"slime's build {tested.router_build})" not in router:
        differs.append(
            f"sglang-router {router or '(not installed)'} where slime uses its build {tested.router_build}"
        )
    if not differs:
        return passed(name, f"slime {tested.name}, {found}: a tested stack; {_CHOSEN}")
    wanted = f"SGLang {tested.sglang} and sglang-router from slime's sgl-router release {tested.router_build}"
    fix = (
        f"rerun {tested.install} for this environment (it installs {wanted})"
        if tested.install
        else f"install {wanted}, as slime's docker/Dockerfile at {tested.name.split(' ')[0]} does, "
        "or move to a stack install_slime.sh installs (--stack v0.3.1)"
    )
    return warned(
        name, f"slime {tested.name}, {found}: differs from the tested stack: {'; '.join(differs)}", fix
    )


def check_environment(ctx: Context) -> list[Result]:
    """Every environment check.

    :param ctx: the check context.
    """
    return [check_bash(ctx), *check_checkouts(ctx), *check_job_python(ctx)]
