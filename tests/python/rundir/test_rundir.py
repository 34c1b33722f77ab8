"""The run directory (``launch/rundir.py``): edited files are kept and never replaced, and no
file is ever written through a link (issue 18, defects 11 and 14)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agentcore_slime import rundir
from agentcore_slime.settings.errors import ConfigError


def test_edited_files_are_kept(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    rundir.write_run_dir(run_dir, {"train.sh": "v1\n", "env": "e1\n"})
    rundir.write_run_dir(run_dir, {"train.sh": "v2\n", "env": "e2\n"})  # unedited: replaced
    assert capsys.readouterr().err == ""
    (run_dir / "train.sh").write_text("v2 + my edit\n")
    rundir.write_run_dir(run_dir, {"train.sh": "v3\n", "env": "e3\n"})
    kept = list(run_dir.glob("train.sh.edited-*"))
    assert len(kept) == 1 and kept[0].read_text() == "v2 + my edit\n"
    assert (run_dir / "train.sh").read_text() == "v3\n"
    assert os.access(run_dir / "train.sh", os.X_OK) and os.access(kept[0], os.X_OK)
    assert f"kept your copy as {kept[0]}" in capsys.readouterr().err


def test_a_file_we_never_rendered_is_kept_too(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "train.sh").write_text("hand written\n")
    rundir.write_run_dir(run_dir, {"train.sh": "v1\n"})
    assert [p.read_text() for p in run_dir.glob("train.sh.edited-*")] == ["hand written\n"]


def test_edited_copies_within_one_second_are_never_replaced(tmp_path: Path, monkeypatch) -> None:
    """Defect 14: the copy's name had one-second resolution and the rename replaced an
    existing copy. The clock is frozen so every cycle falls in the same second."""
    frozen = rundir.time.gmtime(1_800_000_000)
    monkeypatch.setattr(rundir.time, "gmtime", lambda *_: frozen)
    run_dir = tmp_path / "run"
    rundir.write_run_dir(run_dir, {"train.sh": "v0\n"})
    for cycle in range(1, 4):
        (run_dir / "train.sh").write_text(f"edit {cycle}\n")
        rundir.write_run_dir(run_dir, {"train.sh": f"v{cycle}\n"})
    kept = sorted(run_dir.glob("train.sh.edited-*"))
    assert sorted(p.read_text() for p in kept) == ["edit 1\n", "edit 2\n", "edit 3\n"]
    assert len({p.name for p in kept}) == 3


def test_keep_copy_does_not_replace_an_existing_name(tmp_path: Path) -> None:
    target = tmp_path / "train.sh"
    target.write_text("mine\n")
    taken = tmp_path / "train.sh.edited-STAMP"
    taken.write_text("an earlier copy\n")
    kept = rundir.keep_copy(target, b"mine\n", "STAMP")
    assert kept == tmp_path / "train.sh.edited-STAMP-2"
    assert taken.read_text() == "an earlier copy\n" and kept.read_text() == "mine\n"


@pytest.mark.parametrize("name", ["train.sh", "env", "toolkit.yaml", ".rendered.json", "train.log"])
def test_a_symlink_in_the_run_dir_is_refused_and_its_target_untouched(tmp_path: Path, name: str) -> None:
    """Defect 11: a link in runs/<EXP_ID>/ pointing at a user's file got it overwritten."""
    run_dir = tmp_path / "run"
    rundir.write_run_dir(run_dir, {"train.sh": "v1\n", "env": "e1\n", "toolkit.yaml": "y\n"})
    users_file = tmp_path / "precious.txt"
    users_file.write_text("the user's data\n")
    (run_dir / name).unlink(missing_ok=True)
    (run_dir / name).symlink_to(users_file)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if not p.is_symlink()}
    with pytest.raises(ConfigError, match=f"{name} is a symbolic link .*never writes through a link"):
        rundir.write_run_dir(
            run_dir, {"train.sh": "v2\n", "env": "e2\n", "toolkit.yaml": "y2\n"}, also_checked=["train.log"]
        )
    assert users_file.read_text() == "the user's data\n"
    assert (run_dir / name).is_symlink()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if not p.is_symlink()} == before


def test_a_directory_in_place_of_a_file_or_of_the_run_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run" / "env").mkdir(parents=True)
    with pytest.raises(ConfigError, match="env exists and is not a regular file"):
        rundir.write_run_dir(tmp_path / "run", {"env": "e\n"})
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        rundir.write_run_dir(tmp_path / "file", {"env": "e\n"})
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        rundir.write_run_dir(tmp_path / "dangling", {"env": "e\n"})
    with pytest.raises(ConfigError, match="cannot create the run directory"):
        rundir.write_run_dir(tmp_path / "file" / "run", {"env": "e\n"})
    assert (tmp_path / "file").read_text() == "x" and not (tmp_path / "nowhere").exists()


def test_the_run_dir_itself_may_be_a_link_the_user_made(tmp_path: Path) -> None:
    (tmp_path / "big-disk").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "big-disk")
    rundir.write_run_dir(tmp_path / "run", {"env": "e\n"})
    assert (tmp_path / "big-disk" / "env").read_text() == "e\n"


def test_no_temporary_file_is_left_behind(tmp_path: Path) -> None:
    rundir.write_run_dir(tmp_path, {"train.sh": "v\n", "env": "e\n"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".rendered.json", "env", "train.sh"]


def test_results_dirs_started_in_one_second_are_distinct_and_private(tmp_path: Path, monkeypatch) -> None:
    """Issue 23 item 7: evaluations started in the same second shared one directory; a name
    made there first (a link to someone's directory) is passed over, never written through."""
    frozen = rundir.time.gmtime(1_800_000_000)
    monkeypatch.setattr(rundir.time, "gmtime", lambda *_: frozen)
    stamp = rundir.time.strftime("%Y%m%d-%H%M%S", frozen)
    base = tmp_path / "run" / "eval"
    base.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (base / stamp).symlink_to(victim)
    old = os.umask(0)
    try:
        made = [rundir.new_results_dir(base) for _ in range(3)]
    finally:
        os.umask(old)
    assert [p.name for p in made] == [f"{stamp}-2", f"{stamp}-3", f"{stamp}-4"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in [base, *made])
    assert list(victim.iterdir()) == []


def test_a_results_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "eval").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        rundir.new_results_dir(tmp_path / "eval")
    assert list(victim.iterdir()) == []


# --------------------------------------------------------------------- the runs directory (issue 43)
def _runs(tmp_path: Path, mode: int, parent_mode: int = 0o755) -> Path:
    parent = tmp_path / "shared"
    parent.mkdir(parents=True)
    runs = parent / "runs"
    runs.mkdir()
    runs.chmod(mode)
    parent.chmod(parent_mode)
    return runs


@pytest.mark.parametrize("mode", [0o777, 0o757])
def test_a_runs_directory_others_can_write_is_refused_before_anything_is_written(
    tmp_path: Path, mode: int
) -> None:
    runs = _runs(tmp_path, mode)
    with pytest.raises(ConfigError) as refused:
        rundir.write_run_dir(runs / "exp", {"train.sh": "echo hi\n"})
    assert f"the runs directory {runs} is writable by other users (mode {mode:04o}, no sticky bit)" in str(
        refused.value
    )
    assert f"chmod go-w {runs}" in refused.value.how
    assert list(runs.iterdir()) == []  # no run directory, no lock
    with pytest.raises(ConfigError, match="writable by other users"):
        rundir.lock_run_dir(runs / "exp", "1 exp bin/train", 0)
    assert list(runs.iterdir()) == []


def test_a_sticky_runs_directory_is_used_and_a_parent_others_can_write_is_refused(tmp_path: Path) -> None:
    sticky = _runs(tmp_path, 0o1777)
    rundir.write_run_dir(sticky / "exp", {"train.sh": "echo hi\n"})  # like /tmp: others cannot rename ours
    assert (sticky / "exp" / "train.sh").exists()
    loose = _runs(tmp_path / "two", 0o755, parent_mode=0o777)
    parent = f"the parent of the runs directory {loose}, {loose.parent} is writable"
    with pytest.raises(ConfigError, match=parent):
        rundir.write_run_dir(loose / "exp", {"train.sh": "echo hi\n"})


def test_a_runs_directory_the_toolkit_creates_is_not_writable_by_others_whatever_the_umask(
    tmp_path: Path,
) -> None:
    old = os.umask(0)
    try:
        rundir.write_run_dir(tmp_path / "new" / "runs" / "exp", {"train.sh": "echo hi\n"})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "runs").stat().st_mode) == 0o755


def test_the_runs_directory_swap_by_another_user_is_refused(tmp_path: Path, other_user) -> None:
    """A runs directory others can write (0777, no sticky bit): before, a second user (a real
    uid) replaced ``runs/<EXP_ID>/`` with her own and the printed ``bash runs/<EXP_ID>/train.sh``
    ran her script. Now the runs directory is refused, her files untouched; and a runs
    directory that is hers is refused too."""
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # a place she can reach (pytest's tmp is 0700)
    shared.chmod(0o755)
    try:
        _the_swap(shared, other_user)
    finally:
        shutil.rmtree(shared)


def _the_swap(tmp_path: Path, other_user) -> None:
    runs = _runs(tmp_path, 0o777)
    made = other_user.run(
        ["bash", "-c", f'mkdir -m 777 "{runs}/exp" && echo "echo hers" >"{runs}/exp/train.sh"']
    )
    assert made.returncode == 0, made.stderr
    with pytest.raises(ConfigError, match="writable by other users"):
        rundir.write_run_dir(runs / "exp", {"train.sh": "echo mine\n"})
    assert (runs / "exp" / "train.sh").read_text() == "echo hers\n"  # not ours to touch
    hers = runs / "hers"  # a runs directory she made (in the one she can write)
    made = other_user.run(["bash", "-c", f'mkdir -m 755 "{hers}"'], cwd="/")
    assert made.returncode == 0, made.stderr
    with pytest.raises(ConfigError, match=f"the runs directory {hers} belongs to {other_user.name}"):
        rundir.write_run_dir(hers / "exp", {"train.sh": "echo mine\n"})
