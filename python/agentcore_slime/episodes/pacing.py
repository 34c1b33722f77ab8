"""Pacing of calls against the runtime's TPS quota."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """Spaces calls at least ``1/tps`` seconds apart (one shared budget per process).

    :param tps: calls per second.
    """

    def __init__(self, tps: float) -> None:
        self._interval = 1.0 / tps
        self._next = 0.0

    async def acquire(self) -> None:
        """Wait for the next free slot."""
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + self._interval
        if slot > now:
            await asyncio.sleep(slot - now)
