"""The batched channel to one gateway child: session operations (create, traces, finish =
traces and delete, delete) wait in a queue; a few threads each send whatever is waiting as one
``POST /admin/batch``, so a thousand episodes starting or ending together cost a handful of
round trips, not one request each. Each operation keeps its own outcome.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from . import trace_wire

BATCH_OPS = 128  # session operations per admin batch request at most
CHANNEL_THREADS = 4  # batch requests in flight to one child at most
Reply = tuple[dict[str, Any], bytes | None]  # one operation's result in a batch reply, its trace bytes


@dataclass
class Op:
    """One session operation waiting in a channel; its future gets the child's result and bytes."""

    kind: str  # create | traces | finish | delete
    session_id: str
    sampling_params: dict[str, Any] | None = None
    future: Future[Reply] = field(default_factory=Future)

    def body(self) -> dict[str, Any]:
        op: dict[str, Any] = {"op": self.kind, "session_id": self.session_id}
        if self.kind == "create":
            op["sampling_params"] = self.sampling_params
        return op


class Channel:
    """Batches one child's session operations: :data:`CHANNEL_THREADS` threads each take what is
    waiting (up to :data:`BATCH_OPS`) and send it as one ``POST /admin/batch``. A request that
    fails (the child died, did not answer) fails every operation of its batch with that error.

    :param send: sends one batch, returns the reply's bytes (raises as ``GatewayProcess._call``).
    """

    def __init__(self, name: str, send: Callable[[list[dict[str, Any]]], bytes]) -> None:
        self._send = send
        self._queue: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        self._closed = False
        self._count = threading.Lock()
        self.requests = 0  # batch requests sent
        self._threads = [
            threading.Thread(target=self._run, name=f"agentcore-gateway-channel-{name}-{n}", daemon=True)
            for n in range(CHANNEL_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, op: Op) -> Op:
        if self._closed:
            op.future.set_exception(RuntimeError("the gateway process's channel is closed"))
        else:
            self._queue.put(op)
        return op

    def close(self, error: BaseException) -> None:
        """Stop the threads; operations still waiting fail with ``error``."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                return
            if op is not None and not op.future.done():
                op.future.set_exception(error)

    def _take(self) -> list[Op] | None:
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        while len(batch) < BATCH_OPS:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                break
            if op is None:
                self._queue.put(None)  # another thread's stop: leave it for the next take
                break
            batch.append(op)
        return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            with self._count:
                self.requests += 1
            try:
                replies = trace_wire.decode_batch(self._send([op.body() for op in batch]))
                if len(replies) != len(batch):
                    raise RuntimeError(
                        f"the gateway process answered {len(replies)} of {len(batch)} operations"
                    )
            except BaseException as err:  # every waiter gets the reason, whatever it is
                for op in batch:
                    op.future.set_exception(err)
                continue
            for op, reply in zip(batch, replies, strict=True):
                op.future.set_result(reply)
