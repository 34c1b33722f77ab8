"""The kernel lock of templates/lib/lock.sh: hold or probe one lock file with flock(2).

Run as ``python3 -I -S lock_helper.py LOCK MODE INFO PARENT WAIT [FD]`` (standard library only).
Opens LOCK with O_NOFOLLOW|O_CLOEXEC (or adopts FD, a descriptor of LOCK it inherited, when one
is given and is that file), checks that it is a regular file of this uid with one link, the
file now at that path (lstat = fstat), then flock()s it.

``hold``: LOCK_EX, retried for WAIT seconds (a bin/eval probe holds a lock for microseconds); on
success it writes INFO into the file (through the checked descriptor), prints ``locked``, and
stays until it is killed or the script PARENT dies. ``probe``: LOCK_SH, released at once:
prints ``free``. Both print ``held <first line of the file>`` when another process holds it, or
``error <reason>``. INT/TERM/HUP are ignored: Ctrl-C must not release the lock before the
cleanup that it protects has run.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import stat
import sys
import time
from typing import NoReturn


def done(word: str, text: str = "") -> NoReturn:
    """Print the answer (``word`` and ``text``) and exit 0."""
    print(" ".join((word, text)) if text else word, flush=True)
    sys.exit(0)


def same_file(fd: int, path: str) -> bool:
    """True when descriptor ``fd`` is the file now at ``path`` (links not followed)."""
    try:
        st, lst = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (lst.st_dev, lst.st_ino)


def open_checked(path: str, given: int) -> int:
    """A descriptor of ``path``: ``given`` when it is that file, else a new one (never
    through a link); ``error`` unless it is a plain file of this uid with one link."""
    fd = given if given > 2 and same_file(given, path) else -1
    try:
        if fd < 0:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(path, flags, 0o600)
    except OSError as err:
        done("error", f"cannot open {path} without following links ({err.strerror})")
    st, lst = os.fstat(fd), os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_nlink != 1:
        done("error", f"{path} is not a plain file of yours (remove it)")
    if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
        done("error", f"{path} changed while it was opened (remove it)")
    return fd


def main(argv: list[str]) -> None:
    path, mode, info, parent, wait = argv[0], argv[1], argv[2], int(argv[3]), float(argv[4])
    given = int(argv[5]) if len(argv) > 5 else -1
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    fd = open_checked(path, given)
    kind = fcntl.LOCK_SH if mode == "probe" else fcntl.LOCK_EX
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                line = os.pread(fd, 512, 0).decode("utf-8", "replace").splitlines()[:1]
                done("held", "".join(c for c in "".join(line) if c.isprintable()))
            time.sleep(0.05)
    if mode == "probe":
        done("free")
    os.ftruncate(fd, 0)
    os.pwrite(fd, (info + "\n").encode(), 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the script that holds the lock
    if os.getppid() != parent:
        sys.exit(1)
    print("locked", flush=True)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)  # never keep the log pipe of the script open
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
