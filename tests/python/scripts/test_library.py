"""The library part of a rendered script (scripts/library.py): main comes first, then only the
templates/lib/*.sh functions the script can call, copied unchanged; the Python helpers they run
are written beside the script, unchanged; main's steps are numbered 1, 2, ... in every render.

What runs is tested by the bats tests (tests/bats/train*.bats, eval.bats run whole rendered
scripts) and tests/python/ray_real; these check the shape, for every golden input.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.evaluate.render import EvalRequest, render_eval
from agentcore_slime.scripts import library
from agentcore_slime.scripts.render import RunPaths, render
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.validate import check_variant, resolve
from agentcore_slime.settings.variants import VARIANTS
from fakes.renders import FIXED_REPO, FIXED_RUNS, FIXTURES, INPUTS, REPO

LIB = REPO / "templates" / "lib"
TWO_NODES = FIXTURES / "two_nodes.env"
#: the functions only a run of several nodes calls (the head's wait and watch, the worker's join)
MULTI_NODE = ("print_join_command", "wait_for_gpus", "watch_worker_nodes", "join_ray_cluster",
              "leave_cluster_after_head_ended")


def _files(env_file: Path, variant: str = "sync") -> dict[str, str]:
    rel = env_file.relative_to(REPO)
    config = resolve(read_env_file(env_file), {}, rel, FIXED_RUNS)
    check_variant(config, VARIANTS[variant])
    paths = RunPaths(FIXED_REPO, FIXED_RUNS / str(config["EXP_ID"]), str(rel), f"bin/train {rel}")
    return render(config, paths, variant, [], REPO / "templates").files


def _eval_files(env_file: Path) -> dict[str, str]:
    rel = env_file.relative_to(REPO)
    config = resolve(read_env_file(env_file), {}, rel, FIXED_RUNS)
    paths = RunPaths(FIXED_REPO, FIXED_RUNS / str(config["EXP_ID"]), str(rel), f"bin/eval {rel}")
    return render_eval(config, paths, EvalRequest(Path(str(config["MODEL_DIR"]))), REPO / "templates").files


def _scripts() -> list[tuple[str, str, dict[str, str]]]:
    """(case, script name, files) for every script the golden inputs render."""
    out = []
    for env_file in INPUTS:
        for variant in VARIANTS:
            if env_file.stem in ("full", "two_nodes") and variant != "sync":
                continue
            files = _files(env_file, variant)
            for name in (VARIANTS[variant].script, "join.sh"):
                if name in files:
                    out.append((f"{env_file.stem}-{variant}-{name}", name, files))
        out.append((f"{env_file.stem}-eval.sh", "eval.sh", _eval_files(env_file)))
    return out


SCRIPTS = _scripts()
LIB_FUNCTIONS = {
    block.name: block.text
    for path in library.library_files(LIB)
    for block in library.parse(path.read_text(encoding="utf-8"))
    if block.name
}


def _defined(script: str) -> list[str]:
    return re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\(\) \{", script, re.M)


@pytest.mark.parametrize(("case", "name", "files"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_main_first_steps_numbered_and_called_last(case: str, name: str, files: dict[str, str]) -> None:
    script = files[name]
    lines = script.splitlines()
    main = lines.index("main() {") if "main() {" in lines else lines.index("main() { # <head-address>")
    assert main < 230, f"{case}: main starts at line {main + 1}"
    end = lines.index("}", main)
    steps = [int(m.group(1)) for line in lines[main:end] if (m := re.match(r"  # (\d+)\. ", line))]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 4, steps
    assert lines[-1] == 'main "$@"' and script.count('\nmain "$@"\n') == 1


@pytest.mark.parametrize(("case", "name", "files"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_every_library_function_named_is_carried_unchanged(
    case: str, name: str, files: dict[str, str]
) -> None:
    """The closure: every library function a code line names is defined, copied unchanged."""
    script = files[name]
    defined = _defined(script)
    assert len(defined) == len(set(defined)), f"{case}: a function defined twice"
    carried = [f for f in defined if f in LIB_FUNCTIONS]
    for function in carried:
        assert LIB_FUNCTIONS[function] in script, f"{case}: {function} is not its templates/lib text"
    named = library.code_words(script) & LIB_FUNCTIONS.keys()
    assert named <= set(carried), f"{case}: named but not carried: {sorted(named - set(carried))}"
    assert set(carried) < LIB_FUNCTIONS.keys(), f"{case}: carries the whole library"


@pytest.mark.parametrize(("case", "name", "files"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_helpers_beside_the_script_are_the_sources(case: str, name: str, files: dict[str, str]) -> None:
    """Each helper a script names is written beside it, unchanged; none it does not name."""
    script = files[name]
    named = {path.name for path in LIB.glob("*.py") if path.name in script}
    assert named, f"{case}: names no helper"
    assert named <= files.keys()
    for helper in named:
        assert files[helper] == (LIB / helper).read_text(encoding="utf-8")
    assert not re.search(r"<<-?\s*'?PY", script), f"{case}: a Python heredoc"
    header = script[: script.index("set -euo pipefail")]
    assert all(helper in header for helper in named), f"{case}: the header does not name its helpers"


def test_one_node_carries_no_multi_node_or_server_code() -> None:
    train = _files(INPUTS[0])["train.sh"]
    for function in MULTI_NODE:
        assert f"\n{function}() {{" not in train, function
    assert "templates/lib/sglang.sh" not in train and "sglang_helper.py" not in train
    two = _files(TWO_NODES)
    for function in ("print_join_command", "wait_for_gpus", "watch_worker_nodes"):
        assert f"\n{function}() {{" in two["train.sh"], function
    assert "\njoin_ray_cluster() {" in two["join.sh"]
    assert "\nstart_ray_head() {" not in two["join.sh"]
    evaluation = _eval_files(INPUTS[0])["eval.sh"]
    assert "\nstart_server() {" in evaluation and "templates/lib/ray.sh" not in evaluation


def test_render_is_deterministic() -> None:
    assert _files(TWO_NODES) == _files(TWO_NODES)


def test_parse_keeps_comments_with_their_function_and_drops_the_header() -> None:
    text = (
        "# shellcheck shell=bash\n# x.sh: the header\n\n"
        "X_STATE=()\n\n"
        "# An introduction that stands alone.\n\n"
        "# f: does f.\nf() { # <a>\n  g \"$1\"\n}\n\n"
        "g() {\n  :\n}\n"
    )
    blocks = library.parse(text)
    assert [b.name for b in blocks] == [None, "f", "g"]
    assert blocks[0].text == "X_STATE=()\n"
    assert blocks[1].text == (
        "# An introduction that stands alone.\n\n# f: does f.\nf() { # <a>\n  g \"$1\"\n}\n"
    )
    assert library.code_words(blocks[1].text) >= {"f", "g"}
    assert "introduction" not in library.code_words(blocks[1].text)


def test_a_script_stops_on_a_missing_helper_and_names_a_changed_one(tmp_path: Path) -> None:
    """check_helpers runs before main: a script copied without its run directory says what to
    copy and does nothing else; a helper that is not the rendered copy is named (and used)."""
    import subprocess

    files = _files(INPUTS[0])
    for name, text in files.items():
        if name == "train.sh" or name.endswith(".py"):
            (tmp_path / name).write_text(text)
    (tmp_path / "lock_helper.py").unlink()
    missing = subprocess.run(["bash", str(tmp_path / "train.sh"), "--print-command"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 1
    assert missing.stderr == (f"train.sh: lock_helper.py is missing beside train.sh in {tmp_path} (copy the "
                              "whole run directory: the script runs the Python helpers rendered beside it)\n")
    (tmp_path / "lock_helper.py").write_text(files["lock_helper.py"] + "# an edit\n")
    changed = subprocess.run(["bash", str(tmp_path / "train.sh"), "--print-command"],
                             capture_output=True, text=True, timeout=60, check=False)
    warning = f"train.sh: warning: {tmp_path}/lock_helper.py is not the one train.sh was rendered with"
    assert warning in changed.stderr
    assert "missing" not in changed.stderr


def test_a_script_or_helper_another_user_owns_or_can_write_stops_it_before_anything_runs(
    tmp_path: Path, other_user: Any
) -> None:
    """Issue 43: the helpers are run by path later, so a script, run directory or helper that
    another user (a real second uid) owns or can write stops the script before main; the
    user's own edit of a helper still runs (its digest note stays a note)."""
    import os
    import subprocess

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    for name, text in _files(INPUTS[0]).items():
        if name == "train.sh" or name.endswith(".py"):
            (run_dir / name).write_text(text)
            (run_dir / name).chmod(0o700 if name.endswith(".sh") else 0o600)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(run_dir / "train.sh"), "--print-command"],
                              capture_output=True, text=True, timeout=60, check=False)

    helper = run_dir / "lock_helper.py"
    os.chown(helper, other_user.uid, other_user.gid)  # hers now: she decides what it runs
    theirs = run()
    assert theirs.returncode == 2 and theirs.stdout == ""
    assert f"train.sh: {helper} belongs to {other_user.name}, not to you: refusing to run" in theirs.stderr
    os.chown(helper, os.geteuid(), os.getegid())
    for path, mode in ((helper, 0o620), (run_dir / "train.sh", 0o702), (run_dir, 0o770)):
        old = path.stat().st_mode & 0o7777
        path.chmod(mode)
        writable = run()
        path.chmod(old)
        assert writable.returncode == 2 and writable.stdout == "", writable.stderr
        assert f"{path} is writable by other users (mode {mode:o})" in writable.stderr
    os.chown(run_dir / "train.sh", other_user.uid, other_user.gid)
    assert "train.sh belongs to" in run().stderr
    os.chown(run_dir / "train.sh", os.geteuid(), os.getegid())
    helper.write_text(helper.read_text() + "# my own edit\n")  # the user's edit: it runs, with a note
    mine = run()
    assert mine.returncode == 0 and "python3" in mine.stdout, mine.stderr
    assert "lock_helper.py is not the one train.sh was rendered with" in mine.stderr
