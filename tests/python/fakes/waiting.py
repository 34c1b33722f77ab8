"""Waiting for an event in a test, never for a time: poll a condition until it holds.

The ceiling only catches a hang (a machine under load takes longer, never this long); a test
that needs something to have happened waits for it here instead of sleeping a guessed time.
"""

from __future__ import annotations

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
