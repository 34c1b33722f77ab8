"""bin/eval's render: every examples/*.env (and the feature fixture) renders eval.sh byte for byte
to tests/fixtures/golden/<name>.evaluate.sh; every render passes ``bash -n`` and ShellCheck; the
commands ``--dry-run`` prints are the ones in the script.

Regenerate after an intended change with
``TOOLKIT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/python/evaluate/test_eval_render.py``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from agentcore_slime.evaluate.render import EvalRequest, commands, render_eval
from agentcore_slime.scripts.render import Rendered, RunPaths
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.validate import Config, resolve
from fakes.renders import FIXED_REPO, FIXED_RUNS, GOLDEN, INPUTS, REPO, _shellcheck, without_libraries


def _config(env_file: Path, overrides: dict[str, str] | None = None) -> Config:
    return resolve(read_env_file(env_file), overrides or {}, env_file.relative_to(REPO), FIXED_RUNS)


def _render(config: Config, request: EvalRequest, env_file: Path) -> Rendered:
    rel = env_file.relative_to(REPO)
    paths = RunPaths(FIXED_REPO, FIXED_RUNS / str(config["EXP_ID"]), str(rel), f"bin/eval --limit 5 {rel}")
    return render_eval(config, paths, request, REPO / "templates")


@pytest.mark.parametrize("env_file", INPUTS, ids=lambda p: p.stem)
def test_eval_render_matches_golden_and_lints(env_file: Path, tmp_path: Path) -> None:
    config = _config(env_file)
    rendered = _render(config, EvalRequest(Path(str(config["MODEL_DIR"])), 5), env_file)
    golden = GOLDEN / f"{env_file.stem}.evaluate.sh"
    text = without_libraries(rendered.files["eval.sh"])  # as test_golden: libraries are tested apart
    if os.environ.get("TOOLKIT_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), "regenerate (module docstring)"
    script = tmp_path / "eval.sh"
    script.write_text(rendered.files["eval.sh"], encoding="utf-8")
    subprocess.run(["bash", "-n", str(script)], check=True)
    result = subprocess.run([_shellcheck(), "-x", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_dry_run_commands_are_the_scripts_arrays() -> None:
    """What --dry-run prints is the script's SERVER_ARGS / EVAL_ARGS, words for words."""
    env_file = INPUTS[0]
    config = _config(env_file, {"EVAL_SGLANG_FLAGS": "--attention-backend 'fa 3'", "EVAL_TP_SIZE": "4"})
    request = EvalRequest(Path("/ckpt with space"), None)
    text = _render(config, request, env_file).files["eval.sh"]
    server, evaluate = commands(config, request, FIXED_RUNS / str(config["EXP_ID"]))

    def array(name: str) -> list[str]:
        body = text.split(f"\n{name}=(\n", 1)[1].split("\n)\n", 1)[0]
        return shlex.split(body)

    assert shlex.split(server.removesuffix(" --base-gpu-id 0 --port $port"))[3:] == array("SERVER_ARGS")
    assert "sglang_router" not in text and "ROUTER_ARGS" not in text  # several engines, no router
    # NUM_GPUS=8 of gsm8k.env: every GPU, 2 engines of TP 4
    assert "ENGINES=2\nENGINES_SET=0\nTP_SIZE=4\n" in text
    assert array("SERVER_ARGS")[:4] == ["--model-path", "/ckpt with space", "--tp-size", "4"]
    assert array("SERVER_ARGS")[-2:] == ["--attention-backend", "fa 3"]
    words = shlex.split(evaluate.split(" --engine-url ", 1)[0])
    assert words[3:] == array("EVAL_ARGS") and "--limit" not in words
