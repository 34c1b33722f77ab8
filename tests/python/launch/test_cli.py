"""The launcher's command line, run in-process (``main(argv)``): exit codes, stdout/stderr
discipline, the run directory, and the shell quoting every rendered value goes through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from agentcore_slime.launch import cli
from agentcore_slime.scripts.render import shell_quote
from hypothesis import given, settings
from hypothesis import strategies as st

ENV = """\
EXP_ID=cli-exp
S3_BUCKET=my-bucket
AGENT_URL=http://127.0.0.1:8080
MODEL_DIR=/m
DATA_PATH=/d.jsonl
MODEL_TYPE=qwen2.5-3B
"""


@pytest.fixture
def env_file(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TOOLKIT_RUNS_DIR", str(tmp_path / "runs"))
    path = tmp_path / "exp.env"
    path.write_text(ENV)
    return path


def test_render_only_writes_the_run_dir_and_prints_how_to_run(env_file: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["--render-only", str(env_file)]) == 0
    out, err = capsys.readouterr()
    run_dir = tmp_path / "runs" / "cli-exp"
    assert out == f"bash {run_dir / 'train.sh'}\n"
    assert "warning: MODEL_DIR: /m/config.json does not exist" in err
    helpers = ["budget_helper.py", "cuda_helper.py", "lock_helper.py", "processes_helper.py", "ray_helper.py",
               "ray_run_end.py", "slime_helper.py"]  # the Python train.sh runs, beside it
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([
        ".rendered.json", ".run.lock", "env", "invocation.json", "manifest.json", "toolkit.yaml", "train.sh",
        *helpers,
    ])
    assert (run_dir / ".run.lock").read_bytes() == b""  # released: no holder named
    assert (run_dir / "train.sh").stat().st_mode & 0o111


def test_dry_run_prints_the_command_and_writes_nothing(
    env_file: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    # 1: the checks a real run makes first fail here (no /m, no /d.jsonl), and say so
    assert cli.main(["--dry-run", "--set", "NUM_ROLLOUT=5", str(env_file), "--", "--my flag"]) == 1
    out, err = capsys.readouterr()
    assert "bin/train: doctor: FAIL model.config: /m/config.json does not exist" in err
    assert "bin/train: dry run: a real run stops at the FAIL lines above, before it starts anything\n" in err
    (command,) = out.splitlines()
    # no slime here: the model script's arguments stay a placeholder (train.sh --print-command
    # says why); the other arrays are built, empty without a wandb key, checkpoint or CUDA_HOME
    assert command.startswith("python3 /root/slime/train.py ${MODEL_ARGS[@]} --hf-checkpoint /m ")
    assert " --num-rollout 5 " in command
    # the command a real run executes: its toolkit.yaml is the run directory's; the flags that
    # depend on the slime stack stay a placeholder too (no slime here)
    assert command.endswith(
        f" --custom-config-path {tmp_path}/runs/cli-exp/toolkit.yaml ${{STACK_ARGS[@]}} '--my flag'"
    )
    # the hint repeats the whole invocation, --set and the flags after -- included
    hint = f"bin/train --render-only --set NUM_ROLLOUT=5 {env_file} -- '--my flag'"
    assert f"to read the whole script: {hint}\n" in err
    assert not (tmp_path / "runs").exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_bad_input_exits_2_with_one_line_on_stderr(env_file: Path, capsys) -> None:
    assert cli.main(["--render-only", "--set", "TP_SIZE=3", str(env_file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "bin/train: NUM_GPUS=8 is not divisible by TP_SIZE=3 (choose a TP_SIZE that divides "
        "NUM_GPUS (e.g. 1, 2, 4 or 8 on an 8-GPU node))\n"
    )


def test_real_run_with_missing_paths_is_an_error(env_file: Path, capsys) -> None:
    assert cli.main([str(env_file)]) == 2
    err = capsys.readouterr().err
    # every missing path, one line each (no "and N more")
    assert err.splitlines()[0] == (
        "bin/train: MODEL_DIR: /m/config.json does not exist (expected an HF model directory: "
        "fix the path, or use --render-only to render on a machine without it)"
    )
    assert [line.split(":")[1].strip() for line in err.splitlines()] == [
        "MODEL_DIR",
        "DATA_PATH",
        "SLIME_DIR",
        "MODEL_TYPE",
        "MEGATRON_DIR",
    ]


def test_real_run_execs_bash_on_the_script(env_file: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "tokenizer.json").write_text("{}")
    (tmp_path / "d.jsonl").write_text('{"prompt": "1+1?", "metadata": {}}\n')
    models = tmp_path / "slime" / "scripts" / "models"
    models.mkdir(parents=True)
    (tmp_path / "slime" / "train.py").write_text("")
    (models / "qwen2.5-3B.sh").write_text("MODEL_ARGS=(--a)\n")
    (tmp_path / "meg").mkdir()
    env_file.write_text(
        ENV.replace("/m\n", f"{tmp_path}/m\n").replace("/d.jsonl", f"{tmp_path}/d.jsonl")
        + f"SLIME_DIR={tmp_path}/slime\nMEGATRON_DIR={tmp_path}/meg\n"
    )
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(cli.os, "execvp", lambda prog, argv: calls.append((prog, argv)))
    # every tool found; a path given as it is (TOOLKIT_JOB_PYTHON: the python running the tests)
    monkeypatch.setattr(cli.shutil, "which", lambda tool, **_: tool if "/" in tool else f"/usr/bin/{tool}")
    monkeypatch.setenv("TOOLKIT_JOB_PYTHON", sys.executable)
    # credentials the run's workers would inherit (bin/train's gate looks for them; no AWS call)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("TOOLKIT_SAVED_PYTHONPATH", "unset")
    monkeypatch.setenv("PYTHONPATH", "/repo/python")
    assert cli.main([str(env_file)]) == 1  # only reached because execvp is replaced
    assert calls == [("bash", ["bash", str(tmp_path / "runs" / "cli-exp" / "train.sh")])]
    assert "PYTHONPATH" not in cli.os.environ  # the caller had none: restored before exec


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12),
        min_size=1,
        max_size=5,
    )
)
def test_shell_quote_round_trips_through_bash(words: list[str]) -> None:
    """bash reads each quoted word back as exactly the original text (nothing expands)."""
    script = 'printf "%s\\0" ' + " ".join(shell_quote(w) for w in words)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out.decode("utf-8", "surrogateescape").split("\0")[:-1] == words


@pytest.mark.parametrize("word", ["a\nb", "$(x)", "`x`", "\t", "\x1b[0m", "it's", "é"])
def test_shell_quote_stays_on_one_line(word: str) -> None:
    assert "\n" not in shell_quote(word)


def test_one_optimizer_step_per_rollout_and_it_must_split_over_dp(env_file: Path, capsys) -> None:
    """--global-batch-size counts rollouts (episodes) at slime fa3c990 (dp_schedule.py:100-104);
    without it Megatron's micro_batch_size * dp would give 256 / 4 = 64 optimizer steps per rollout.
    Megatron asserts it divides by micro_batch_size * dp (num_microbatches_calculator.py:340)."""
    assert cli.main(["--dry-run", "--skip-doctor", str(env_file)]) == 0
    (command,) = capsys.readouterr().out.splitlines()
    assert " --n-samples-per-prompt 8 --global-batch-size 256 " in command
    sets = ["--set", "ROLLOUT_BATCH_SIZE=3", "--set", "N_SAMPLES_PER_PROMPT=1"]
    assert cli.main(["--dry-run", *sets, str(env_file)]) == 2
    assert capsys.readouterr().err.startswith(
        "bin/train: ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT = 3 episodes per rollout is not a "
        "multiple of the data-parallel size 4 (training GPUs 8 / TP_SIZE 2)"
    )
    split = ["--skip-doctor", "--variant", "async", "--set", "ROLLOUT_NUM_GPUS=4",
             "--set", "ROLLOUT_BATCH_SIZE=3"]
    assert cli.main(["--dry-run", *split, "--set", "N_SAMPLES_PER_PROMPT=2", str(env_file)]) == 0
    assert " --global-batch-size 6 " in capsys.readouterr().out
    assert cli.main(["--dry-run", *split, "--set", "N_SAMPLES_PER_PROMPT=1", str(env_file)]) == 2
    expected = "not a multiple of the data-parallel size 2 (training GPUs 4 / TP_SIZE 2)"
    assert expected in capsys.readouterr().err
