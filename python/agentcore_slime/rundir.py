"""Write the run directory ``runs/<EXP_ID>/`` without ever writing through a link or over a user's file.

Every file is written as a new temporary file in the run directory, created with ``O_EXCL``
(so nothing existing is opened for writing), then renamed over its name; ``rename`` replaces
a name, never the file a symlink points to. A name that already is a symlink, a directory or
anything but a regular file is refused before the first write, with a clear error: the user's
file it points to stays untouched and so does the link. A file the user edited since we
rendered it is first copied to ``<name>.edited-<UTC time>[-N]``, created with ``O_EXCL`` too,
so an edited copy is never replaced, not even by two re-renders within one second.

The run directory itself may be a link the user made (to a bigger disk, say); the names
inside it may not.

One bin/train at a time per run directory, and none beside a live run: ``.run.lock`` in the
run directory is a kernel lock (flock, as templates/lib/lock.sh takes the node's locks) that
bin/train takes before it reads the run's record or writes a file (``--render-only`` too) and
that a real run hands on to its train.sh, which holds it until the run has stopped. A bin/train
that finds it held by a render waits for it; one that finds a live run is refused, its files
untouched. The file is never unlinked (unlink and re-create would let two holders lock different
inodes).

Other users of the node read nothing of a run: the run directory is mode 0700 and every file
we write in it 0600 (0700 for scripts), whatever the umask. It holds live gateway session ids,
agent traces and settings (train.log, metrics.jsonl, episodes/, eval/), and a directory only
its owner can enter also means no one else can plant a link or a file where the run's shell
code writes with ``>>`` (train.log). An earlier run's directory and files are tightened when
reused, never replaced; a directory owned by another user is refused.

The runs directory (``TOOLKIT_RUNS_DIR``, the run directory's parent) and its own parent are
refused when another user can write them without the sticky bit (as the runtime directory is,
templates/lib/lock.sh): whoever can write a directory can rename what is in it, and put her own
``runs/<EXP_ID>/train.sh`` where the printed ``bash runs/<EXP_ID>/train.sh`` finds it. A runs
directory the toolkit creates is created not writable by others.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import hashlib
import itertools
import json
import os
import pwd
import stat
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from .settings.errors import ConfigError

PROG = "bin/train"
#: file in the run directory recording the checksum of every file we rendered
CHECKSUMS = ".rendered.json"
#: modes of what a run writes: only its owner reads a run (see the module's docstring)
PRIVATE_FILE_MODE = 0o600
PRIVATE_SCRIPT_MODE = 0o700
PRIVATE_DIR_MODE = 0o700
#: the run directory's kernel lock (see the module's docstring)
RUN_LOCK = ".run.lock"
#: how bin/train hands the lock it holds to the train.sh it execs (the descriptor's number)
LOCK_FD_ENV = "TOOLKIT_RUN_LOCK_FD"
#: the word in the lock's first line that names a bin/train rendering (waited for, not refused)
RENDERING = "bin/train"
#: seconds a bin/train waits for another one's render of the same run directory
RENDER_WAIT = 60.0


class RunDirBusy(Exception):
    """The run directory's lock is held by a live run (or a render that did not end in time).

    :param holder: the first line the holder wrote into the lock (``PID EXP_ID WHAT``).
    """

    def __init__(self, run_dir: Path, holder: str) -> None:
        self.run_dir = run_dir
        self.holder = holder
        super().__init__(f"{run_dir} is held by {holder or 'another process'}")


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def check_run_dir(run_dir: Path, names: Iterable[str]) -> None:
    """Refuse a run directory whose files we would have to write through a link.

    :param run_dir: the run directory (it need not exist yet).
    :param names: every file name inside it that the run will write (rendered files, the
        checksum record, the log).
    :raises ConfigError: ``run_dir`` exists and is not a directory, or one of ``names`` is a
        symbolic link or not a regular file.
    """
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise ConfigError(
            f"{run_dir} exists and is not a directory (or is a link to nothing)",
            "move it away, or choose another EXP_ID or TOOLKIT_RUNS_DIR",
        )
    for name in names:
        path = run_dir / name
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # not there yet (or the run directory cannot be created: said below)
        if stat.S_ISLNK(mode):
            raise ConfigError(
                f"{path} is a symbolic link (to {os.readlink(path)}); bin/train never writes "
                "through a link it did not create",
                "remove the link or move it out of the run directory; the file it points to is untouched",
            )
        if not stat.S_ISREG(mode):
            raise ConfigError(
                f"{path} exists and is not a regular file", "move it out of the run directory"
            )


def _others_can_write(info: os.stat_result) -> bool:
    """Whether a user other than this one can rename entries of a directory with ``info``:
    writable by others, or by a group someone else is in, and not sticky."""
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_ISVTX or not mode & 0o022:
        return False
    if mode & 0o002:
        return True
    me = os.geteuid()
    try:
        group = grp.getgrgid(info.st_gid)
    except KeyError:
        return True
    members = {pwd.getpwnam(name).pw_uid for name in group.gr_mem if _known(name)}
    members |= {entry.pw_uid for entry in pwd.getpwall() if entry.pw_gid == info.st_gid}
    return bool(members - {me})


def _known(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def make_runs_dir(runs_dir: Path) -> None:
    """Create the runs directory when needed (not writable by others, whatever the umask), and
    refuse it, or its parent, when another user could replace what is in it.

    :raises ConfigError: it is another user's (not root's), or others can write it or its parent
        without the sticky bit; nothing is written then.
    """
    missing = [runs_dir, *(p for p in runs_dir.parents if not p.exists())][::-1]
    try:
        for path in missing:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                continue
            os.chmod(path, 0o755)  # mkdir's mode went through the umask
    except OSError as exc:
        raise ConfigError(
            f"cannot create the runs directory {runs_dir}: {exc.strerror or exc}",
            "choose a TOOLKIT_RUNS_DIR you can write to",
        ) from exc
    me = os.geteuid()
    for where in (runs_dir, runs_dir.resolve().parent):
        info = os.stat(where)
        if where == runs_dir and info.st_uid not in (me, 0):
            raise ConfigError(
                f"the runs directory {runs_dir} belongs to {_owner(info.st_uid)}, not to you: its "
                "owner can replace the run directories in it",
                "set TOOLKIT_RUNS_DIR to a directory of yours",
            )
        if _others_can_write(info):
            what = "the runs directory"
            if where != runs_dir:
                what = f"the parent of the runs directory {runs_dir},"
            raise ConfigError(
                f"{what} {where} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}, "
                "no sticky bit): another user could replace the run directory, and its train.sh, "
                "with her own",
                f"chmod go-w {where} (or chmod +t {where}), or set TOOLKIT_RUNS_DIR to a directory "
                "only you can write",
            )


def write_run_dir(run_dir: Path, files: dict[str, str], also_checked: Iterable[str] = ()) -> None:
    """Write the rendered files, keeping any file the user edited since we rendered it.

    A file whose content differs from what we last wrote (or that we never wrote) is copied
    to a new ``<name>.edited-<UTC time>`` and reported; nothing the user made is lost.

    :param run_dir: the run directory (created if needed).
    :param files: file name inside the run directory -> content.
    :param also_checked: names the run writes later (its log): refused as links now too.
    :raises ConfigError: see :func:`check_run_dir`; nothing is written then.
    """
    check_run_dir(run_dir, [*files, CHECKSUMS, *also_checked])
    make_runs_dir(run_dir.parent)
    try:
        private_dir(run_dir, follow=True)  # the run directory may be the user's own link
    except OSError as exc:
        raise ConfigError(
            f"cannot create the run directory {run_dir}: {exc.strerror or exc}",
            "choose a TOOLKIT_RUNS_DIR you can write to",
        ) from exc
    record = _read_record(run_dir / CHECKSUMS)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for name, text in files.items():
        target = run_dir / name
        data = text.encode("utf-8")
        current = _read_no_follow(target)
        if current is not None and _digest(current) not in (record.get(name), _digest(data)):
            kept = keep_copy(target, current, stamp)
            _say(f"{target} was edited since it was rendered: kept your copy as {kept}")
        write_atomic(target, data, PRIVATE_SCRIPT_MODE if name.endswith(".sh") else PRIVATE_FILE_MODE)
        record[name] = _digest(data)
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    write_atomic(run_dir / CHECKSUMS, text.encode("utf-8"), PRIVATE_FILE_MODE)


def lock_run_dir(run_dir: Path, info: str, wait: float) -> int:
    """Take the run directory's lock (creating the directory, mode 0700, when needed).

    A holder that is rendering (its line says ``bin/train``) is waited for, up to
    :data:`RENDER_WAIT` seconds; any other holder (a live run's train.sh) for ``wait`` seconds.

    :param run_dir: the run directory.
    :param info: the line written into the lock once held (``PID EXP_ID bin/train``).
    :param wait: seconds to retry a lock a live run holds.
    :returns: the descriptor holding the lock (close-on-exec; closing it releases the lock).
    :raises ConfigError: the lock or the directory cannot be used safely.
    :raises RunDirBusy: another process holds it.
    """
    check_run_dir(run_dir, [RUN_LOCK])
    path = run_dir / RUN_LOCK
    make_runs_dir(run_dir.parent)
    try:
        private_dir(run_dir, follow=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the run directory {run_dir}: {exc.strerror or exc}",
            "choose a TOOLKIT_RUNS_DIR you can write to; bin/train never writes through a link",
        ) from exc
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except OSError as exc:
        raise ConfigError(
            f"cannot open the run's lock {path}: {exc.strerror or exc}",
            "choose a TOOLKIT_RUNS_DIR you can write to; bin/train never writes through a link",
        ) from exc
    try:
        _check_lock_file(fd, path)
        _flock(fd, run_dir, time.monotonic(), wait)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (info + "\n").encode("utf-8"), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unlock_run_dir(fd: int) -> None:
    """Release the run directory's lock, leaving it empty (no holder to name, and a render
    leaves the run directory as the last one did).

    :param fd: the descriptor :func:`lock_run_dir` returned.
    """
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _check_lock_file(fd: int, path: Path) -> None:
    held, named = os.fstat(fd), os.lstat(path)
    mine = stat.S_ISREG(held.st_mode) and held.st_uid == os.geteuid() and held.st_nlink == 1
    if not mine or (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
        raise ConfigError(f"{path} is not a plain file of yours", "remove it (it is only a lock)")


def _flock(fd: int, run_dir: Path, start: float, wait: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = lock_holder(fd)
            waited = time.monotonic() - start
            rendering = RENDERING in holder.split()[2:3]
            if waited >= (RENDER_WAIT if rendering else wait):
                raise RunDirBusy(run_dir, holder) from None
            time.sleep(0.05)


def lock_holder(fd: int) -> str:
    """The first line of a held lock, printable characters only (``PID EXP_ID WHAT``).

    :param fd: a descriptor of the lock file.
    """
    first = os.pread(fd, 512, 0).decode("utf-8", "replace").splitlines()[:1]
    return "".join(c for c in "".join(first) if c.isprintable())


def new_results_dir(base: Path) -> Path:
    """Create a new ``base/<UTC time>[-N]`` (mode 0700; ``base`` too) and return it.

    ``mkdir`` fails when the name exists, so two evaluations started in the same second, or a
    name someone made there first, never share a directory: the next free ``-N`` is taken
    (as ``new_results_dir`` of templates/lib/common.sh, which eval.sh uses).

    :param base: the results folder, e.g. ``runs/<EXP_ID>/eval`` (a link there is refused).
    :raises OSError: ``base`` cannot be made private, or no directory can be created in it.
    """
    base.parent.mkdir(parents=True, exist_ok=True)
    private_dir(base)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for number in itertools.count(1):
        path = base / (stamp if number == 1 else f"{stamp}-{number}")
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask
        return path
    raise AssertionError("unreachable")  # pragma: no cover


def private_dir(path: Path, *, follow: bool = False) -> Path:
    """Create ``path`` mode 0700, or tighten the existing one to 0700 (its files stay as they are).

    :param path: a directory of the run (its parent exists).
    :param follow: accept a symbolic link to a directory (only the run directory itself, which
        the user may have linked to a bigger disk).
    :raises OSError: ``path`` is a link (unless ``follow``), not a directory, or another user's.
    """
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    if not follow and os.path.islink(path):
        why = "a symbolic link; the toolkit never writes through a link it did not create"
        raise OSError(errno.ELOOP, why, str(path))
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(errno.ENOTDIR, "exists and is not a directory", str(path))
    if info.st_uid != os.geteuid():
        raise OSError(
            errno.EPERM,
            f"owned by uid {info.st_uid}, not by you; the toolkit writes only into directories you own",
            str(path),
        )
    if stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:  # mkdir's mode went through the umask
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def write_atomic(target: Path, data: bytes, mode: int) -> None:
    """Replace ``target`` by a new file holding ``data``: never opens ``target`` itself.

    :param target: the file name to (re)place; a symlink there is replaced, not followed.
    :param data: the new content.
    :param mode: its permission bits.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keep_copy(target: Path, data: bytes, stamp: str) -> Path:
    """Copy ``data`` (``target``'s content) to a new ``<name>.edited-<stamp>[-N]`` file.

    The copy is created with ``O_EXCL``: an existing edited copy is never replaced; the
    first free ``-N`` suffix is taken instead.

    :param target: the edited file.
    :param data: its content, as read.
    :param stamp: the UTC time to put in the name.
    """
    mode = stat.S_IMODE(os.lstat(target).st_mode) & PRIVATE_SCRIPT_MODE  # the user's bits, no one else's
    for number in itertools.count(1):
        suffix = "" if number == 1 else f"-{number}"
        kept = target.with_name(f"{target.name}.edited-{stamp}{suffix}")
        try:
            fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return kept
    raise AssertionError("unreachable")  # pragma: no cover


def _read_no_follow(path: Path) -> bytes | None:
    """The content of ``path``, ``None`` when it does not exist; a symlink is an error (ELOOP)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _read_record(path: Path) -> dict[str, str]:
    try:
        data = _read_no_follow(path)
        record = json.loads(data) if data is not None else {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
