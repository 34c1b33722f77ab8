"""Serve an aiohttp app on loopback in a thread of its own, for the stand-ins and the tests.

Every HTTP stand-in here (the ACR data plane, the SGLang engine and router, scripted agents
and LLMs) needs the same thing: an ``aiohttp.web.Application`` on 127.0.0.1 with a free port,
served from its own event loop so the test (and the code under test, with its own loops)
never waits on it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Self

from aiohttp import web


class _LoopThread:
    """An asyncio loop running in a daemon thread, for serving aiohttp apps off the test's thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class ThreadedAiohttpServer:
    """Serve an ``aiohttp.web.Application`` on 127.0.0.1:<free port> in its own thread and loop."""

    def __init__(self, app: web.Application, name: str = "aiohttp-server") -> None:
        self._app = app
        self._name = name
        self._loop: _LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    def start(self) -> str:
        """Start listening; returns the base url ``http://127.0.0.1:<port>``."""
        self._loop = _LoopThread(self._name)
        self._runner = web.AppRunner(self._app, access_log=None)
        self._loop.call(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.call(site.start())
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        if self._loop is None:
            return
        if self._runner is not None:
            self._loop.call(self._runner.cleanup())
        self._loop.close()
        self._loop = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
