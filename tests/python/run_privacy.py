"""What a second local user can read of a run: the shared-node tests' eyes (issue 23, item 9).

A run directory holds live gateway session ids and agent traces (train.log, metrics.jsonl,
episodes/, eval results), so nothing in it may be readable by another user. The tests put
runs under :func:`shared_dir` (mode 0755, as a home or a shared disk often is), so only the
run's own modes stand between the files and the other user; :func:`readable_by` lists every
path under a directory that the other user can read (a file) or list (a directory).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from other_user import OtherUser

_PROBE = r"""
for path; do
  if [[ -d $path ]]; then ls -a -- "$path" >/dev/null 2>&1 && printf '%s\n' "$path"
  else cat -- "$path" >/dev/null 2>&1 && printf '%s\n' "$path"; fi
done
exit 0
"""


@contextmanager
def shared_dir(prefix: str) -> Iterator[Path]:
    """A new directory under /tmp that every user may enter and list (mode 0755); removed after."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def readable_by(user: OtherUser, root: Path) -> list[str]:
    """Every path under ``root`` (itself included, links not followed) that ``user`` can read."""
    paths = [str(root)]
    for folder, dirs, files in os.walk(root):
        paths += [os.path.join(folder, name) for name in dirs + files]
    done = user.run(["bash", "-c", _PROBE, "probe", *paths], cwd="/")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
