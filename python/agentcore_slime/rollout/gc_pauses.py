"""No full garbage collection pauses a step: the rollout's policy for slime's rollout actor.

The rollout runs inside slime's rollout actor, whose heap holds the data set, the modules
and boto3's service models: ~200,000 objects the collector tracks before the first step,
more with a large data set. A full (generation-2) collection walks all of them, and finds
almost nothing, since a step's objects are freed by reference counting. Measured with
``benchmarks/bench_step.py --episodes 1024 --s3 light``: three full collections in a step,
0.46 s in all and pauses of up to 160 ms on the rollout's loop, most at the step's end where
the results pile up (the tail), a third of the process's CPU.

So, as the gateway process does (gateway/memory.py): what exists when the first step starts
is frozen (``gc.freeze``; cycles among those objects are never collected, so only long-lived
state should be there then), and while a step runs no automatic full collection starts;
young and middle collections go on. Both are process-wide: while a step runs, slime's thread
waits in ``generate_rollout``, and Ray's threads allocate little. A step starts with a full
collection when one came due during the previous step (Python counts the middle collections
since the last one), so the cycles a step leaves behind wait at most one step, and the
pause falls before any episode starts. The thresholds are restored when the last step running
returns.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from agentcore_slime.gateway.memory import FULL_COLLECTIONS_DEFERRED, freeze_long_lived

_lock = threading.Lock()
_frozen = False
_steps = 0  # steps running now (an eval step may overlap a training step in async mode)
_full_threshold = 0  # the generation-2 threshold to restore when the last step returns


def _freeze_once() -> None:
    """Freeze what exists (the first step only; under ``_lock``)."""
    global _frozen
    if not _frozen:
        freeze_long_lived()
        _frozen = True


def _defer() -> None:
    """The first step running: a full collection now if one is due, then none until it returns."""
    global _full_threshold
    young, middle, _full_threshold = gc.get_threshold()
    if gc.get_count()[2] > _full_threshold:  # one came due while full collections waited
        gc.collect()
    gc.set_threshold(young, middle, FULL_COLLECTIONS_DEFERRED)


def _restore() -> None:
    young, middle, full = gc.get_threshold()
    if full == FULL_COLLECTIONS_DEFERRED:  # unless someone else set it since
        gc.set_threshold(young, middle, _full_threshold)


@contextmanager
def full_collections_deferred() -> Iterator[None]:
    """Within: no automatic full collection (young and middle ones still run)."""
    global _steps
    entered = False
    try:
        with _lock:
            _freeze_once()
            if _steps == 0:
                _defer()
            _steps += 1
            entered = True
        yield
    finally:
        if entered:
            with _lock:
                _steps -= 1
                if _steps == 0:
                    _restore()
