"""The marked processes of templates/lib/processes.sh: list or signal one run's processes.

Run as ``python3 -I -S processes_helper.py list|signal UID MARKER SKIP [SIGNAL]`` (standard
library only). The live processes of UID whose environment holds MARKER as one whole entry (not
a substring: AGENTCORE_SLIME_RUN=ray-1 is not AGENTCORE_SLIME_RUN=ray-12), and all their
descendants of UID (a process that retitles itself with setproctitle, as Ray's workers and
agents and SGLang's schedulers do, overwrites the memory /proc/PID/environ shows; it is found
as the child of a marked one), never the calling script (SKIP: its PIDs). ``signal SIG`` sends
SIG through a pidfd opened before the process is checked again (same start time), so a PID
reused meanwhile is never signalled. Prints the PIDs, one per line.
"""

from __future__ import annotations

import os
import re
import signal
import sys

#: (state, parent PID, start time) of a process
Stat = tuple[bytes, int, bytes]


def process_stat(pid: int | str, uid: int) -> Stat | None:
    """(state, parent, start time) of process ``pid`` when it belongs to ``uid``, else None."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return None
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), fields[19]


def marked_tree(uid: int, marker: bytes, skip: set[int]) -> tuple[set[int], dict[int, Stat]]:
    """The PIDs that carry ``marker`` and their descendants of ``uid``, and every live process's stat."""
    found = {int(n): process_stat(n, uid) for n in os.listdir("/proc") if n.isdigit()}
    procs = {pid: st for pid, st in found.items() if st and st[0] != b"Z" and pid not in skip}
    chosen = set()
    for pid in procs:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    chosen.add(pid)
        except OSError:
            continue
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st[1], []).append(pid)
    queue = list(chosen)
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in chosen:
                chosen.add(child)
                queue.append(child)
    return chosen, procs


def send(pid: int, sig: signal.Signals, uid: int, start: bytes) -> bool:
    """Signal ``pid`` through a pidfd, only while it is the process that started at ``start``."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        now = process_stat(pid, uid)
        if now is None or now[2] != start:
            return False
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def main(argv: list[str]) -> None:
    mode, uid, marker = argv[0], int(argv[1]), os.fsencode(argv[2])
    if not re.fullmatch(rb"AGENTCORE_SLIME_RUN=[a-z]+-[0-9a-f]{16}", marker):
        sys.exit(f"not a run marker: {marker!r} (nothing signalled)")
    skip = {1, os.getpid(), os.getppid(), *(int(p) for p in argv[3].split())}
    sig = signal.Signals[f"SIG{argv[4]}"] if mode == "signal" else None
    chosen, procs = marked_tree(uid, marker, skip)
    for pid in sorted(chosen):
        if sig is not None and not send(pid, sig, uid, procs[pid][2]):
            continue
        print(pid)


if __name__ == "__main__":
    main(sys.argv[1:])
