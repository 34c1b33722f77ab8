"""No full garbage collection pauses a step: the rollout's policy for slime's rollout actor.

The rollout runs inside slime's rollout actor, whose heap holds the data set, the modules
and boto3's service models: ~200,000 objects the collector tracks before the first step,
more with a large data set. A full (generation-2) collection walks all of them, and finds
almost nothing, since a step's objects are freed by reference counting. Measured with
``benchmarks/bench_step.py --episodes 1024 --s3 light``: three full collections in a step,
0.46 s in all and pauses of up to 160 ms on the rollout's loop, most at the step's end where
the results pile up (the tail), a third of the process's CPU.

So, as the gateway process does (gateway/memory.py): what exists when the first step starts
is frozen (``gc.freeze``: long-lived, never walked again), and full collections wait while a
step runs; young and middle collections go on. slime's own thread is blocked in
``generate_rollout`` meanwhile, so the policy holds only for the rollout's work; the
thresholds are restored when the step returns, and the next full collection comes when
Python's rule asks for it, between steps.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from agentcore_slime.gateway.memory import FULL_COLLECTIONS_DEFERRED

_lock = threading.Lock()
_frozen = False
_steps = 0  # steps running now (an eval step may overlap a training step in async mode)
_full_threshold = 0  # the generation-2 threshold to restore when the last step returns


def _freeze_once() -> None:
    """Collect once, then freeze what is left (the first step only; under ``_lock``)."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


@contextmanager
def full_collections_deferred() -> Iterator[None]:
    """Within: no automatic full collection (young and middle ones still run)."""
    global _steps, _full_threshold
    with _lock:
        _freeze_once()
        if _steps == 0:
            young, middle, _full_threshold = gc.get_threshold()
            gc.set_threshold(young, middle, FULL_COLLECTIONS_DEFERRED)
        _steps += 1
    try:
        yield
    finally:
        with _lock:
            _steps -= 1
            young, middle, full = gc.get_threshold()
            if _steps == 0 and full == FULL_COLLECTIONS_DEFERRED:  # unless someone else set it since
                gc.set_threshold(young, middle, _full_threshold)
