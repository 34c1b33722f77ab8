"""What the gateway holds and gives back: garbage-collection pauses, session bytes, freed heap.

The gateway serves every model call of a training step from one process; these are the
figures ``GET /admin/stats`` reports and the benchmark checks (bytes per held token, the
longest GC pause), and the call that returns a finished step's memory to the system.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import time
from array import array
from typing import Any


class GcWatch:
    """The longest garbage-collection pauses since the last :meth:`take`, in CPU time of the
    collecting thread (the collector's own work) and in wall time (which also counts the
    moments the OS ran something else)."""

    def __init__(self) -> None:
        self._started = (0.0, 0.0)
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.collections = 0
        self.max_cpu_ms = 0.0
        self.max_wall_ms = 0.0
        self.max_generation = -1  # the generation the longest collection collected
        self.max_collected = 0  # and how many unreachable objects it freed

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = (time.thread_time(), time.perf_counter())
            return
        cpu = (time.thread_time() - self._started[0]) * 1e3
        wall = (time.perf_counter() - self._started[1]) * 1e3
        with self._lock:
            self.collections += 1
            if cpu > self.max_cpu_ms:
                self.max_cpu_ms = cpu
                self.max_generation = int(info.get("generation", -1))
                self.max_collected = int(info.get("collected", 0))
            self.max_wall_ms = max(self.max_wall_ms, wall)

    def take(self) -> dict[str, Any]:
        with self._lock:
            out = {
                "gc_collections": self.collections,
                "gc_max_pause_cpu_ms": round(self.max_cpu_ms, 3),
                "gc_max_pause_wall_ms": round(self.max_wall_ms, 3),
                "gc_max_pause_generation": self.max_generation,
                "gc_max_pause_collected": self.max_collected,
                "gc_tracked_objects": len(gc.get_objects()),
                "gc_thresholds": list(gc.get_threshold()),
            }
            self._reset()
        return out


def deep_size(root: Any, skip: tuple[type, ...] = ()) -> int:
    """Bytes of everything reachable from ``root`` through containers and instance fields,
    each object counted once (``sys.getsizeof``); objects of the ``skip`` types are left out."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    leaves = (str, bytes, int, float, bool, type(None), array)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, leaves):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, name) for name in obj.__slots__ if hasattr(obj, name))
    return total


FULL_COLLECTIONS_DEFERRED = 10**9  # a generation-2 threshold automatic collections never reach
# Young (generation-0) collections per middle (generation-1) one; Python's default is 10. A
# middle collection walks what every young collection since the last one kept: calls in
# flight and what each call added to its session (its messages, the reply, the chain). With
# 256 sessions that was ~30k objects and pauses of 15-21 ms; a middle collection every 3
# young ones walks a third as many at a time (10-11 ms), and each object as often as before.
YOUNG_COLLECTIONS_PER_MIDDLE = 3


def defer_full_collections() -> None:
    """Leave full (generation 2) collections to :func:`release_memory`, called when the gateway
    has no sessions (between steps).

    A full collection walks every tracked object: with a thousand sessions (their messages,
    connections, chain states) that is 100+ ms in which no call is served, and it finds
    almost nothing, since the gateway's state is freed by reference counting. Young
    collections keep running (middle ones more often, in shorter pauses:
    :data:`YOUNG_COLLECTIONS_PER_MIDDLE`); cycles that outlive them wait for the next idle
    moment. For the gateway's own process only: the policy is process-wide.
    """
    young, _, _ = gc.get_threshold()
    gc.set_threshold(young, YOUNG_COLLECTIONS_PER_MIDDLE, FULL_COLLECTIONS_DEFERRED)


def freeze_long_lived() -> None:
    """Collect, then move what is left out of the collector's generations (``gc.freeze``): the
    modules, models and start-up state of a long-lived process, which full collections would
    otherwise walk every time (hundreds of thousands of objects, 100+ ms pauses). Cycles among
    frozen objects are never collected: call it once, when what exists is there to stay."""
    gc.collect()
    gc.freeze()


def release_memory() -> None:
    """Collect garbage cycles and return free heap pages to the system (glibc's
    ``malloc_trim``; a no-op elsewhere). Called when the gateway has no sessions, so the
    full collection has little to walk and nobody to keep waiting; ctypes releases the GIL
    for the trim.
    """
    gc.collect()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
