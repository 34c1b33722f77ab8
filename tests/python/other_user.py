"""A second local user, for the shared-node tests: a real uid on this machine, made for the
test and removed after it.

Other people share GPU nodes; these tests play the other person. They need root (to create
the user), which CI has: where the user cannot be created they fail rather than skip, unless
the run is not CI (``CI`` unset), where they skip with the reason.

    def test_x(other_user):
        out = other_user.run(["cat", path])          # runs as the other uid
        assert out.returncode != 0
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class OtherUser:
    """A throwaway local account: its name, uid, gid and home."""

    name: str
    uid: int
    gid: int
    home: str

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this user (setpriv: no PAM, no login shell, supplementary groups
        cleared), with a small environment of its own plus ``env``."""
        base = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": self.home,
            "USER": self.name,
            "LANG": "C.UTF-8",
        }
        base.update(env or {})
        command = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]
        return subprocess.run(
            command,
            env=base,
            cwd=cwd or self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    def popen(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: object
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as this user in the background (the caller stops it)."""
        base = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": self.home,
            "USER": self.name,
            "LANG": "C.UTF-8",
        }
        base.update(env or {})
        command = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]
        return subprocess.Popen(command, env=base, **kwargs)  # type: ignore[call-overload, no-any-return]


def _cannot(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"cannot create a second local user for this test: {reason} (CI runs as root)")
    pytest.skip(f"needs root to create a second local user: {reason}")


@contextmanager
def other_user() -> Iterator[OtherUser]:
    """Create a user with a fresh name and home; delete both (and its processes) after."""
    if os.geteuid() != 0:
        _cannot("not root")
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        _cannot("useradd or setpriv missing")
    name = "acs" + secrets.token_hex(4)
    made = subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/bash", name], capture_output=True, text=True
    )
    if made.returncode != 0:
        _cannot(f"useradd failed: {made.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield OtherUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "--remove", name], capture_output=True)
