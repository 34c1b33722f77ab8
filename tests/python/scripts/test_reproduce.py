"""A run re-renders byte for byte from its run directory (bin/train runs/<EXP_ID>/env, or the
run directory itself), for every variant, with --set values and flags after ``--``; what else
decides a run (data, model, commits) is recorded, and a re-render names what changed.

bin/train runs as a user runs it: a subprocess, --render-only (no GPU, no slime here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path, **extra: str) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "tokenizer.json").write_text("{}")
    data = tmp_path / "train.jsonl"
    if not data.exists():
        data.write_text('{"prompt": "1+1", "metadata": {"answer": "2"}}\n')
    lines = {
        "EXP_ID": "again",
        "S3_BUCKET": "my-bucket",
        "AGENT_URL": "http://127.0.0.1:8080",
        "MODEL_DIR": str(model),
        "DATA_PATH": str(data),
        "MODEL_TYPE": "qwen2.5-3B",
        **extra,
    }
    path = tmp_path / "exp.env"
    path.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
    return path


def _train(tmp_path: Path, *argv: str, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLKIT_RUNS_DIR": str(tmp_path / "runs")}
    if pythonpath:  # where the python3 of the rendered script finds sglang
        env["PYTHONPATH"] = pythonpath
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return subprocess.run(
        [str(REPO / "bin/train"), *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("variant", "extra", "scripts"),
    [
        ("sync", {}, ["train.sh"]),
        ("async", {}, ["train_async.sh"]),
        ("sync", {"NUM_NODES": "2"}, ["train.sh", "join.sh"]),
    ],
    ids=["sync", "async", "two-nodes"],
)
@pytest.mark.parametrize("again", ["env", "dir"])
def test_the_run_directory_re_renders_byte_for_byte(
    tmp_path: Path, variant: str, extra: dict[str, str], scripts: list[str], again: str
) -> None:
    env_file = _env(tmp_path, **extra)
    first = _train(
        tmp_path,
        "--render-only",
        "--variant",
        variant,
        "--set",
        "NUM_ROLLOUT=7",
        "--set",
        "ROLLOUT_TEMPERATURE=0.7",
        str(env_file),
        "--",
        "--rollout-top-k",
        "20",
        "--seed",
        "7",
    )
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "runs" / "again"
    before = _files(run_dir)
    assert set(scripts) <= before.keys()
    recorded = json.loads(before["invocation.json"])
    assert recorded["variant"] == variant and recorded["slime_flags"] == [
        "--rollout-top-k",
        "20",
        "--seed",
        "7",
    ]

    target = run_dir / "env" if again == "env" else run_dir
    second = _train(tmp_path, "--render-only", str(target))
    assert second.returncode == 0, second.stderr
    assert "re-rendering the recorded run" in second.stderr
    assert "warning: changed since" not in second.stderr, second.stderr
    after = _files(run_dir)
    assert after == before  # every file, scripts included, byte for byte; no edited copies
    assert f"bash {run_dir / scripts[0]}" in second.stdout
    manifest = json.loads(after["manifest.json"])
    assert manifest["seeds"]["--seed"] == "7" and manifest["seeds"]["--rollout-seed"].startswith("42")


def test_the_manifest_records_what_else_decides_the_run(tmp_path: Path) -> None:
    env_file = _env(tmp_path)
    assert _train(tmp_path, "--render-only", str(env_file)).returncode == 0
    manifest = json.loads((tmp_path / "runs/again/manifest.json").read_text())
    import hashlib

    data = (tmp_path / "train.jsonl").read_bytes()
    assert manifest["data_sha256"] == {"DATA_PATH": hashlib.sha256(data).hexdigest()}
    assert set(manifest["model_sha256"]) == {"config.json", "tokenizer.json"}
    assert manifest["agent"] == "http://127.0.0.1:8080"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert manifest["toolkit_commit"].startswith(head.stdout.strip())
    assert manifest["slime_commit"] is None  # /root/slime is not here


def test_a_re_render_names_what_changed(tmp_path: Path) -> None:
    env_file = _env(tmp_path)
    assert _train(tmp_path, "--render-only", str(env_file)).returncode == 0
    run_dir = tmp_path / "runs/again"
    # the data changed since, and (as if the toolkit had moved on) the recorded commit differs
    (tmp_path / "train.jsonl").write_text('{"prompt": "2+2", "metadata": {"answer": "4"}}\n')
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["toolkit_commit"] = "0" * 40
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "train.sh").write_text((run_dir / "train.sh").read_text() + "# the toolkit of then\n")
    again = _train(tmp_path, "--render-only", str(run_dir / "env"))
    assert again.returncode == 0, again.stderr
    assert "warning: changed since" in again.stderr and "data_sha256.DATA_PATH: " in again.stderr
    assert "toolkit_commit: 000000000000 -> " in again.stderr
    assert "warning: train.sh differs from the one recorded in" in again.stderr
    assert "the toolkit's commit changed" in again.stderr


def test_changing_a_recorded_run_says_so_and_renders_the_change(tmp_path: Path) -> None:
    env_file = _env(tmp_path)
    assert (
        _train(tmp_path, "--render-only", "--variant", "async", str(env_file), "--", "--x", "1").returncode
        == 0
    )
    run_dir = tmp_path / "runs/again"
    changed = _train(tmp_path, "--render-only", "--variant", "sync", str(run_dir / "env"), "--")
    assert changed.returncode == 0, changed.stderr
    assert "with changes to the recorded run" in changed.stderr
    recorded = json.loads((run_dir / "invocation.json").read_text())
    assert recorded["variant"] == "sync" and recorded["slime_flags"] == []
    assert "--x" not in (run_dir / "train.sh").read_text().split("EXTRA_ARGS=(", 1)[1].split(")", 1)[0]


def test_dry_run_hint_repeats_the_whole_invocation(tmp_path: Path) -> None:
    env_file = _env(tmp_path)
    out = _train(
        tmp_path,
        "--dry-run",
        "--variant",
        "async",
        "--set",
        "NUM_ROLLOUT=10",
        str(env_file),
        "--",
        "--rollout-top-k",
        "20",
    )
    assert out.returncode == 1, out.stderr  # the checks a real run makes first fail here: no model, no data
    hint = f"bin/train --render-only --variant async --set NUM_ROLLOUT=10 {env_file} -- --rollout-top-k 20"
    assert f"to read the whole script: {hint}\n" in out.stderr
    assert not (tmp_path / "runs").exists()


# ---- the rough edges a newcomer hits (issue: the newcomer's findings 5 and 8) ----------------


def test_a_file_that_is_not_an_env_file_gets_one_line(tmp_path: Path) -> None:
    out = _train(tmp_path, "--dry-run", str(REPO / "README.md"))
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert "README.md is not an env file: " in line and "lines are not KEY=VALUE" in line
    assert "such as examples/gsm8k.env" in line
    yaml = tmp_path / "config.yaml"
    yaml.write_text("name: qwen\ndir: /m\ndata: /d.jsonl\nEXP_ID=x\n")
    out = _train(tmp_path, "--dry-run", str(yaml))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "config.yaml is not an env file: 3 of its 4 lines" in out.stderr


def test_a_few_bad_lines_are_each_named_and_many_are_counted(tmp_path: Path) -> None:
    env_file = _env(tmp_path)
    text = env_file.read_text()
    env_file.write_text(text + "".join(f"bad line {n}\n" for n in range(4)))
    out = _train(tmp_path, "--dry-run", str(env_file))
    assert out.returncode == 2 and out.stderr.count("cannot parse") == 4, out.stderr
    many = "".join(f"KEY_{n}='v'\nbad {n}\n" for n in range(14))
    env_file.write_text(text + "# a comment\n" * 3 + many)
    out = _train(tmp_path, "--dry-run", str(env_file))
    assert out.returncode == 2 and out.stderr.count("cannot parse") == 10, out.stderr
    assert "4 more lines cannot be parsed" in out.stderr


def test_an_unclosed_quote_is_the_one_error_reported(tmp_path: Path) -> None:
    """``EXP_ID="my-exp`` swallows every line after it: before, the right first line came with
    three wrong ones (EXP_ID required, a ${EXP_ID} reference to "no earlier key", ...)."""
    env_file = _env(tmp_path)
    lines = env_file.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("EXP_ID="))
    lines[at] = 'EXP_ID="my-exp'
    env_file.write_text("\n".join([*lines, "WANDB_GROUP=${EXP_ID}-g"]) + "\n")
    out = _train(tmp_path, "--dry-run", str(env_file))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"{env_file}:{at + 1}: the \" opened in 'EXP_ID=\"my-exp' is never closed" in out.stderr
    assert '(close it: EXP_ID="my-exp")' in out.stderr


def test_slime_flags_before_the_double_dash_point_to_it(tmp_path: Path) -> None:
    env_file = _env(tmp_path)
    out = _train(tmp_path, "--dry-run", str(env_file), "--rollout-top-k", "20")
    assert out.returncode == 2
    fixed = f"bin/train --dry-run {env_file} -- --rollout-top-k 20"
    assert out.stderr == (
        f"bin/train: unrecognized arguments: --rollout-top-k 20 (flags for slime go after `--`: {fixed}; "
        "bin/train's own options: bin/train --help)\n"
    )
    out = _train(tmp_path, "--dryrun", str(env_file))
    assert out.returncode == 2 and "did you mean --dry-run?" in out.stderr


def test_a_model_type_in_the_wrong_case_gets_did_you_mean(tmp_path: Path) -> None:
    models = tmp_path / "slime/scripts/models"
    models.mkdir(parents=True)
    for name in ("qwen2.5-3B", "qwen3-4B", "glm4-9B"):
        (models / f"{name}.sh").write_text("MODEL_ARGS=()\n")
    env_file = _env(tmp_path, SLIME_DIR=str(tmp_path / "slime"), MODEL_TYPE="qwen2.5-3b")
    out = _train(tmp_path, "--dry-run", str(env_file))
    assert out.returncode == 1, out.stderr  # the model check a real run makes first fails too
    assert (
        "qwen2.5-3b.sh does not exist (expected a slime model script; did you mean MODEL_TYPE=qwen2.5-3B?)"
        in (out.stderr)
    )


def test_the_manifest_records_the_slime_stack_train_sh_will_choose(tmp_path: Path) -> None:
    """The stack as train.sh's own code finds it (templates/lib/slime.sh) on a node described from
    each recorded stack; a re-render after the node moved to another stack names the change."""
    from test_slime_stacks import describe_node, read_stack

    pinned = describe_node(read_stack("fa3c990"), tmp_path / "pinned")
    newer = describe_node(read_stack("v0.3.1"), tmp_path / "newer")
    env_file = _env(tmp_path, SLIME_DIR=str(pinned[0]))
    done = _train(tmp_path, "--render-only", str(env_file), pythonpath=str(pinned[1]))
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "runs/again"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["slime_stack"] == {
        "slime": "version unknown (not a git checkout)",
        "sglang": "0.5.13",
        "flags": "--megatron-to-hf-mode bridge --sglang-cuda-graph-max-bs 32",
    }
    # the experiment rendered again on a v0.3.1 node: every difference is named, whole
    env_file.write_text(env_file.read_text().replace(str(pinned[0]), str(newer[0])))
    again = _train(tmp_path, "--render-only", str(env_file), pythonpath=str(newer[1]))
    assert again.returncode == 0, again.stderr
    assert "slime_stack.sglang: 0.5.13 -> 0.5.15.post1" in again.stderr
    assert ("slime_stack.flags: --megatron-to-hf-mode bridge --sglang-cuda-graph-max-bs 32 -> "
            "--sglang-cuda-graph-max-bs-decode 32") in again.stderr


def test_the_manifest_says_why_the_stack_cannot_be_read(tmp_path: Path) -> None:
    env_file = _env(tmp_path, SLIME_DIR=str(tmp_path / "no-slime"))
    assert _train(tmp_path, "--render-only", str(env_file)).returncode == 0
    manifest = json.loads((tmp_path / "runs/again/manifest.json").read_text())
    assert manifest["slime_stack"] == {
        "error": f"no {tmp_path}/no-slime/slime/utils/arguments.py (SLIME_DIR must be a slime checkout)"
    }
