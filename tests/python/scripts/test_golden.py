"""Golden renders: every examples/*.env (and the feature fixture) renders byte for byte to
tests/fixtures/golden/<name>.sh (``--variant sync``), <name>.async.sh (where the file fits
it) and <name>.toolkit.yaml, and every render passes
``bash -n`` and ShellCheck.

Paths are fixed (repo /opt/agentcore-slime, runs dir /runs) so the goldens do not depend on
where the checkout lives. After an intended change, regenerate them with

    TOOLKIT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/python/scripts/test_golden.py

and review the diff (git diff tests/fixtures/golden/). The goldens leave out the bodies of the
library functions a script carries (copied unchanged from templates/lib/*.sh: tests/python/
scripts/test_library.py, and the bats tests test them): one line per library file names them,
so a change inside a function does not rewrite every golden.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from agentcore_slime.scripts.render import Rendered, RunPaths, render
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.schema import rollout_keys
from agentcore_slime.settings.validate import check_variant, resolve
from agentcore_slime.settings.variants import VARIANTS
from fakes.renders import FIXED_REPO, FIXED_RUNS, GOLDEN, INPUTS, REPO, _shellcheck, without_libraries

#: (env file, variant) pairs with a golden: examples in every variant, the full fixture in sync,
#: the two-node fixture in sync (multi-node runs colocate)
CASES = [
    (p, v)
    for p in INPUTS
    for v in VARIANTS
    if not (p.stem == "full" and v == "async") and not (p.stem == "two_nodes" and v != "sync")
]
SUFFIX = {"sync": ".sh", "async": ".async.sh"}


def _render(env_file: Path, cli_flags: list[str] | None = None, variant: str = "sync") -> Rendered:
    rel = env_file.relative_to(REPO)
    config = resolve(read_env_file(env_file), {}, rel, FIXED_RUNS)
    check_variant(config, VARIANTS[variant])
    paths = RunPaths(
        repo=FIXED_REPO,
        run_dir=FIXED_RUNS / str(config["EXP_ID"]),
        env_file=str(rel),
        command=f"bin/train --render-only --variant {variant} {rel}",
    )
    return render(config, paths, variant, cli_flags or [], REPO / "templates")


def _case_id(case: tuple[Path, str]) -> str:
    return f"{case[0].stem}-{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_render_matches_golden(case: tuple[Path, str]) -> None:
    env_file, variant = case
    rendered = _render(env_file, variant=variant)
    script = VARIANTS[variant].script
    outputs = [(script, SUFFIX[variant])] + ([("toolkit.yaml", ".toolkit.yaml")] if variant == "sync" else [])
    if "join.sh" in rendered.files:
        outputs.append(("join.sh", ".join.sh"))
    for name, suffix in outputs:
        golden = GOLDEN / f"{env_file.stem}{suffix}"
        text = without_libraries(rendered.files[name])
        if os.environ.get("TOOLKIT_UPDATE_GOLDEN"):
            golden.write_text(text, encoding="utf-8")
        assert golden.exists(), f"no golden {golden}: run with TOOLKIT_UPDATE_GOLDEN=1"
        assert text == golden.read_text(encoding="utf-8"), (
            f"{name} of {env_file.name} differs from {golden.name}; if intended, regenerate "
            "(see this module's docstring)"
        )


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_render_passes_bash_n_and_shellcheck(case: tuple[Path, str], tmp_path: Path) -> None:
    env_file, variant = case
    flags = ["--x", "a b", "$(touch y)", "q'uote", "l1\nl2"]
    files = _render(env_file, flags, variant).files
    for name in (VARIANTS[variant].script, "join.sh"):
        if name not in files:
            continue
        script = tmp_path / name
        script.write_text(files[name])
        subprocess.run(["bash", "-n", str(script)], check=True)
        result = subprocess.run([_shellcheck(), "-x", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stdout}"


@pytest.mark.parametrize("env_file", INPUTS, ids=lambda p: p.stem)
def test_toolkit_yaml_round_trips_typed(env_file: Path) -> None:
    config = resolve(read_env_file(env_file), {}, env_file, FIXED_RUNS)
    loaded = yaml.safe_load(_render(env_file).files["toolkit.yaml"])
    assert list(loaded) == [key.yaml_key for key in rollout_keys()]
    assert loaded == {key.yaml_key: config[key.name] for key in rollout_keys()}


def test_variants_differ_where_they_should() -> None:
    """async: train_async.py, split GPUs, no --colocate."""
    example = INPUTS[0]
    sync, asyn = (_render(example, variant=v).slime_argv for v in ("sync", "async"))
    assert sync[1].endswith("/train.py") and "--colocate" in sync
    assert asyn[1].endswith("/train_async.py") and "--colocate" not in asyn
    assert asyn[asyn.index("--rollout-num-gpus") + 1] == "4"
    assert asyn[asyn.index("--actor-num-gpus-per-node") + 1] == "4"


def test_full_fixture_golden_has_every_optional_group() -> None:
    """The feature fixture exercises what gsm8k does not (so its golden is worth keeping)."""
    text = (GOLDEN / "full.sh").read_text()
    for needle in (
        "--save-hf '/runs/full-features/checkpoints/hf/{rollout_id}'",
        "--eval-prompt-data aime-2024",
        "CUDA_HOME_PIN=/usr/local/cuda-12.9",
        "--sglang-reasoning-parser qwen3",
        "--sglang-context-length 32768",
        "$'it\\'s $HOME'",
        "WANDB_GROUP='group with spaces'",
    ):
        assert needle in text
