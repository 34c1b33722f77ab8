"""Waiting for an event in a test, never for a time: poll a condition until it holds.

The ceiling only catches a hang (a machine under load takes longer, never this long); a test
that needs something to have happened waits for it here instead of sleeping a guessed time.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

#: how long a condition may take to come true before the test counts it as never
HANG_S = 120.0


def until(condition: Callable[[], object], what: str, ceiling: float = HANG_S) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` if it is not within ``ceiling`` s.

    :param condition: checked every 20 ms.
    :param what: the event, for the failure message.
    :param ceiling: seconds before the event counts as never coming (a hang).
    """
    deadline = time.monotonic() + ceiling
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {ceiling:.0f} s"
        time.sleep(0.02)


def _every_thread_stopped(pid: int) -> bool:
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return all(state in ("T", "t") for state in states)


def stop_process(pid: int) -> None:
    """SIGSTOP ``pid`` and return once every thread of it has stopped.

    ``kill`` returns before the stop takes hold: one thread takes the signal when it next runs
    and only then stops the others, so on a loaded machine the rest go on serving meanwhile
    (measured beside ``stress --cpu 4``: 187 of 200 kills found a thread still running).
    """
    os.kill(pid, signal.SIGSTOP)
    until(lambda: _every_thread_stopped(pid), f"every thread of pid {pid} stopped")
