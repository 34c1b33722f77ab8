"""The rendered command line against what each supported slime stack accepts.

Each supported stack's flags were recorded from its real parsers (slime, Megatron-LM, SGLang,
sglang-router) into ``tests/slime_stacks/<stack>.flags`` (how: tests/slime_stacks/README.md).
A node of each stack is described from that file alone: a slime checkout whose
``get_slime_extra_args_provider`` adds the stack's own flags, and an ``sglang`` package whose
``ServerArgs.add_cli_args`` adds its server flags, with its version (fakes/stack_node.py).
``train.sh --print-command`` then chooses the stack's flags (templates/lib/slime.sh) exactly as
on a node, and every flag of the printed command line must be one that stack accepts under its
current name.

The argv printed for each stack and variant is written to ``$TOOLKIT_STACK_ARGV_DIR`` when set
(the closing note of issue 35 quotes it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from agentcore_slime.scripts.render import RunPaths, render
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.validate import check_variant, resolve
from agentcore_slime.settings.variants import VARIANTS
from fakes.renders import FIXED_REPO, FIXED_RUNS, FIXTURES, REPO
from fakes.stack_node import write_sglang, write_slime_arguments

STACKS_DIR = REPO / "tests" / "slime_stacks"
STACKS = ("fa3c990", "v0.3.1", "624b824a8")
#: (env file, variant): one node sync and async, two nodes (which colocate)
RUNS = (
    (REPO / "examples" / "gsm8k.env", "sync"),
    (REPO / "examples" / "gsm8k.env", "async"),
    (FIXTURES / "two_nodes.env", "sync"),
)
#: Megatron flags of the stand-in model script (real Megatron-LM flags, no slime script copied)
MODEL_TYPES = ("qwen2.5-3B", "qwen2.5-7B")  # of the env files in RUNS
MODEL_FLAGS = ["--swiglu", "--num-layers", "36", "--hidden-size", "2048", "--normalization", "RMSNorm"]


@dataclass
class Stack:
    """One recorded stack: its flags, deprecated aliases (old -> new) and SGLang version."""

    name: str
    flags: set[str]
    renamed: dict[str, str]
    sglang: str


def read_stack(name: str) -> Stack:
    text = (STACKS_DIR / f"{name}.flags").read_text(encoding="utf-8")
    version = re.search(r"^# sglang (\S+),", text, re.MULTILINE)
    assert version, f"{name}.flags has no '# sglang VERSION,' header line"
    flags: set[str] = set()
    renamed: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        flag, _, new = line.partition(" -> ")
        flags.add(flag)
        if new:
            renamed[flag] = new
    return Stack(name, flags, renamed, version.group(1))


def describe_node(stack: Stack, root: Path) -> tuple[Path, Path]:
    """A slime checkout and an sglang package that say what ``stack`` says; (SLIME_DIR, site).

    Their argument definitions (fakes/stack_node.py) hold the recorded flags: slime's own and
    Megatron's for slime's ``get_slime_extra_args_provider``, the ``--sglang-*`` ones unprefixed
    for SGLang's ``ServerArgs.add_cli_args``.
    """
    slime = root / "slime"
    own = [f for f in stack.flags if not f.startswith(("--sglang-", "--router-"))]
    write_slime_arguments(slime, own)
    (slime / "train.py").write_text("", encoding="utf-8")
    models = slime / "scripts" / "models"
    models.mkdir(parents=True)
    for model_type in MODEL_TYPES:
        model_args = f"MODEL_ARGS=({shlex.join(MODEL_FLAGS)})\n"
        (models / f"{model_type}.sh").write_text(model_args, encoding="utf-8")
    site = root / "site"
    server = ["--" + f.removeprefix("--sglang-") for f in stack.flags if f.startswith("--sglang-")]
    write_sglang(site, stack.sglang, server)
    return slime, site


def print_command(
    env_file: Path, variant: str, slime: Path, site: Path, tmp_path: Path
) -> tuple[list[str], str]:
    """train.sh --print-command of ``env_file`` rendered with SLIME_DIR=slime: (argv, stderr)."""
    rel = env_file.relative_to(REPO)
    config = resolve(read_env_file(env_file), {"SLIME_DIR": str(slime)}, rel, FIXED_RUNS)
    check_variant(config, VARIANTS[variant])
    paths = RunPaths(FIXED_REPO, tmp_path / "run", str(rel), "bin/train")
    rendered = render(config, paths, variant, [], REPO / "templates")
    script = tmp_path / "train.sh"
    script.write_text(next(text for name, text in rendered.files.items() if name.endswith(".sh")
                           and name != "join.sh"), encoding="utf-8")
    for name, text in rendered.files.items():  # the Python helpers the script runs, beside it
        if name.endswith(".py"):
            (tmp_path / name).write_text(text, encoding="utf-8")
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("TOOLKIT_", "WANDB_"))}
    environ["PYTHONPATH"] = str(site)
    done = subprocess.run(["bash", str(script), "--print-command"], capture_output=True, text=True,
                          env=environ, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout), done.stderr


def flags_of(argv: list[str]) -> list[str]:
    return [word.partition("=")[0] for word in argv if word.startswith("--")]


CASES = [(stack, env, variant) for stack in STACKS for env, variant in RUNS]
CASE_IDS = [f"{s}-{e.stem}-{v}" for s, e, v in CASES]


@pytest.mark.parametrize(("stack_name", "env_file", "variant"), CASES, ids=CASE_IDS)
def test_every_rendered_flag_is_accepted_by_the_stack_under_its_current_name(
    stack_name: str, env_file: Path, variant: str, tmp_path: Path
) -> None:
    stack = read_stack(stack_name)
    slime, site = describe_node(stack, tmp_path / "node")
    argv, stderr = print_command(env_file, variant, slime, site, tmp_path)
    assert argv[:2] == ["python3", f"{slime}/{'train_async.py' if variant == 'async' else 'train.py'}"]
    assert "stays unexpanded" not in stderr, stderr
    assert f"SGLang {stack.sglang}" in stderr
    unknown = [f for f in flags_of(argv) if f not in stack.flags]
    assert not unknown, f"{stack_name} does not accept {unknown} (slime would ignore them silently)"
    deprecated = {f: stack.renamed[f] for f in flags_of(argv) if f in stack.renamed}
    assert not deprecated, f"{stack_name}: deprecated aliases passed: {deprecated}"
    out = os.environ.get("TOOLKIT_STACK_ARGV_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{stack_name}-{env_file.stem}-{variant}.argv").write_text(shlex.join(argv) + "\n")


@pytest.mark.parametrize("stack_name", STACKS)
def test_the_stack_flags_are_chosen_from_what_the_node_has(stack_name: str, tmp_path: Path) -> None:
    stack = read_stack(stack_name)
    slime, site = describe_node(stack, tmp_path / "node")
    argv, stderr = print_command(REPO / "examples" / "gsm8k.env", "sync", slime, site, tmp_path)
    flags = flags_of(argv)
    if "--megatron-to-hf-mode" in stack.flags:  # fa3c990: bridge mode loads the HF --ref-load
        assert argv[argv.index("--megatron-to-hf-mode") + 1] == "bridge"
    else:
        assert "--megatron-to-hf-mode" not in flags and "no --megatron-to-hf-mode" in stderr
    graph = "--sglang-cuda-graph-max-bs-decode" if "--sglang-cuda-graph-max-bs-decode" in stack.flags \
        else "--sglang-cuda-graph-max-bs"
    assert argv[argv.index(graph) + 1] == "32"
    assert [f for f in flags if f.startswith("--sglang-cuda-graph-max-bs")] == [graph]


def test_the_recorded_stacks_differ_where_the_issue_says() -> None:
    """The facts the runtime choice rests on, as recorded from the real parsers."""
    pinned, v031, head = (read_stack(name) for name in STACKS)
    assert "--megatron-to-hf-mode" in pinned.flags
    assert "--megatron-to-hf-mode" not in v031.flags | head.flags
    assert "--sglang-cuda-graph-max-bs-decode" not in pinned.flags
    assert v031.renamed["--sglang-cuda-graph-max-bs"] == head.renamed["--sglang-cuda-graph-max-bs"] \
        == "--sglang-cuda-graph-max-bs-decode"
    assert "--rollout-sample-hook-path" in v031.flags - pinned.flags
    assert (pinned.sglang, v031.sglang, head.sglang) == ("0.5.13", "0.5.15.post1", "0.5.15.post1")


def test_the_audit_catches_a_flag_the_stack_lacks(tmp_path: Path) -> None:
    """A flag one stack removed fails the check on that stack: the test can fail."""
    stack = read_stack("v0.3.1")
    slime, site = describe_node(stack, tmp_path / "node")
    env_file = tmp_path / "with_flag.env"
    env_file.write_text((REPO / "examples" / "gsm8k.env").read_text()
                        + "\nEXTRA_FLAGS='--megatron-to-hf-mode bridge'\n", encoding="utf-8")
    argv, _ = print_command_outside_repo(env_file, slime, site, tmp_path)
    assert "--megatron-to-hf-mode" in flags_of(argv)
    assert [f for f in flags_of(argv) if f not in stack.flags] == ["--megatron-to-hf-mode"]


def print_command_outside_repo(
    env_file: Path, slime: Path, site: Path, tmp_path: Path
) -> tuple[list[str], str]:
    config = resolve(read_env_file(env_file), {"SLIME_DIR": str(slime)}, env_file, FIXED_RUNS)
    paths = RunPaths(FIXED_REPO, tmp_path / "run", str(env_file), "bin/train")
    for name, text in render(config, paths, "sync", [], REPO / "templates").files.items():
        if name == "train.sh" or name.endswith(".py"):  # the script and its helpers beside it
            (tmp_path / name).write_text(text)
    script = tmp_path / "train.sh"
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("TOOLKIT_", "WANDB_"))}
    environ["PYTHONPATH"] = str(site)
    done = subprocess.run(["bash", str(script), "--print-command"], capture_output=True, text=True,
                          env=environ, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout), done.stderr
