"""Stand-in for ``python -m sglang.launch_server``: the scripted SGLang protocol on ``--port``.

Serves :class:`fakes.sglang_server.FakeSGLang`'s routes (``/health``, ``/generate``,
``/model_info``, ``/v1/models``, ...) on ``--host``/``--port`` like the real server, and starts
one child process the way SGLang starts its scheduler and detokenizer processes, so tests can
check that the whole process group is stopped. Behaviour from the environment:

- ``FAKE_SGLANG_MODE``: ``healthy`` (default); ``never_healthy`` (logs "loading" lines, never
  listens); ``dies`` (serves, then exits with status 3 after ``FAKE_SGLANG_DIE_AFTER`` seconds,
  default 2, or once the file ``FAKE_SGLANG_DIE_WHEN`` names exists); ``ignore_term`` (serves;
  it and its child ignore SIGTERM).
- ``FAKE_SGLANG_PIDS``: a file the server and its child append their PIDs to.
- ``FAKE_SGLANG_LOGGED``: a file ``never_healthy`` touches once its first loading line is logged.
- ``FAKE_SGLANG_ARGV``: a file the server writes its argv to (one word per line).
- ``FAKE_SGLANG_REQUESTS``: a file each ``POST /generate`` appends ``<port> <X-SMG-Routing-Key>``
  to (which engine served which session, behind a router).
- ``FAKE_SGLANG_DIE_ON_GPU`` / ``FAKE_SGLANG_DIE_AFTER_REQUESTS``: the engine started with that
  ``--base-gpu-id`` exits with status 3 (its scheduler crashed) once N ``/generate`` calls have
  been served by all engines together (counted in ``FAKE_SGLANG_REQUESTS``, which it then
  needs), or when its own Nth arrives. Counting every engine's calls makes the death certain:
  how many sessions reach one engine depends on the random session ids' digests.

``--api-key`` (or ``api-key`` in the YAML of ``--config``, as SGLang 0.5.13 reads it) turns on
SGLang's key check (:func:`require_api_key`).
- ``FAKE_SGLANG_SCRIPT``: a JSON file ``{question: {"expression": ..., "plan": "right"|"wrong"}}``
  for the math policy (the example math agent's conversation: a calculator call, then the
  boxed answer, off by one for "wrong"); it needs the tokenizer in ``--model-path``. Without it
  every request gets a fixed three-token reply.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from fakes.math_policy import math_policy
from fakes.sglang_server import Completion, FakeSGLang

#: the "scheduler" child: sleeps; with argv[1] == "ignore" it ignores SIGTERM like its parent
CHILD = (
    "import signal, sys, time\n"
    "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(600)"
)


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--context-length", type=int, default=32768)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--config", default=None)
    parser.add_argument("--base-gpu-id", type=int, default=0)
    args, _ = parser.parse_known_args(argv)
    if args.config:  # SGLang 0.5.13 prepare_server_args: a YAML of option: value, below the CLI
        config = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
        if args.api_key is None:
            args.api_key = config.get("api-key", config.get("api_key"))
    return args


def require_api_key(app: web.Application, api_key: str) -> None:
    """SGLang's --api-key rule (0.5.13 ``srt/utils/auth.py`` ``decide_request_auth``, normal
    routes): OPTIONS, /health* and /metrics* are open; everything else needs
    ``Authorization: Bearer <key>`` (or ``x-api-key``), else 401 ``{"error": "Unauthorized"}``."""

    @web.middleware
    async def authentication(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "OPTIONS" or request.path.startswith(("/health", "/metrics")):
            return await handler(request)  # type: ignore[no-any-return]
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        bearer = scheme.lower() == "bearer" and secrets.compare_digest(token, api_key)
        header = secrets.compare_digest(request.headers.get("x-api-key", ""), api_key)
        if not (bearer or header):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)  # type: ignore[no-any-return]

    app.middlewares.append(authentication)


def record_requests(app: web.Application, port: int, log: str, die_after: int | None) -> None:
    """Append ``<port> <routing key>`` per /generate to ``log``; with ``die_after``, exit 3 once
    ``log`` holds that many calls (any engine's) or this engine's own ``die_after``-th arrives."""
    served = [0]

    @web.middleware
    async def recording(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/generate":
            served[0] += 1
            if die_after is not None and served[0] >= die_after:
                _die()
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{port} {request.headers.get('X-SMG-Routing-Key', '-')}\n")
        return await handler(request)  # type: ignore[no-any-return]

    async def die_when_served(_app: web.Application) -> None:
        async def watch() -> None:
            while _served_in(log) < (die_after or 0):
                await asyncio.sleep(0.02)
            _die()

        app["die_watch"] = asyncio.create_task(watch())

    app.middlewares.append(recording)
    if die_after is not None and log != os.devnull:
        app.on_startup.append(die_when_served)


def _served_in(log: str) -> int:
    try:
        with open(log, encoding="utf-8") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


def fixed_policy(input_ids: list[int], sampling_params: dict[str, Any]) -> Completion:
    return Completion([11, 12, 13], {"type": "stop", "matched": 13})


def _record(args: argparse.Namespace, argv: list[str], child: int) -> None:
    if os.environ.get("FAKE_SGLANG_PIDS"):
        with open(os.environ["FAKE_SGLANG_PIDS"], "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n{child}\n")
    if os.environ.get("FAKE_SGLANG_ARGV"):
        Path(os.environ["FAKE_SGLANG_ARGV"]).write_text("".join(f"{w}\n" for w in argv), encoding="utf-8")


def _rename() -> None:
    """Re-exec as ``python .../sglang/launch_server.py`` (same PID), once.

    The toolkit's stale-process cleanup matches ``sglang.launch_server`` on the command line; on
    a shared test machine another test's *real* cleanup (same user) would stop this stand-in
    mid-test. The rendered script's command is unchanged; only the running stand-in's
    ``/proc/<pid>/cmdline`` loses the dotted name.
    """
    if os.environ.get("FAKE_SGLANG_RENAMED"):
        return
    os.environ["FAKE_SGLANG_RENAMED"] = "1"
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]])


def main(argv: list[str]) -> int:
    _rename()
    args = _args(argv)
    mode = os.environ.get("FAKE_SGLANG_MODE", "healthy")
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", CHILD, "ignore" if mode == "ignore_term" else "-"])
    _record(args, argv, child.pid)
    print(f"fake sglang: loading {args.model_path} with tp {args.tp_size}", flush=True)
    if mode == "never_healthy":
        while True:
            print("fake sglang: still loading weights ...", flush=True)
            if os.environ.get("FAKE_SGLANG_LOGGED"):  # the line is in the log (tests wait for it)
                Path(os.environ["FAKE_SGLANG_LOGGED"]).touch()
            time.sleep(1)
    script_path = os.environ.get("FAKE_SGLANG_SCRIPT")
    policy = fixed_policy
    if script_path:
        policy = math_policy(args.model_path, json.loads(Path(script_path).read_text(encoding="utf-8")))
    engine = FakeSGLang(policy, context_length=args.context_length)
    if args.api_key:
        require_api_key(engine._app, args.api_key)
    dies = os.environ.get("FAKE_SGLANG_DIE_ON_GPU") == str(args.base_gpu_id)
    if os.environ.get("FAKE_SGLANG_REQUESTS") or dies:
        die_after = int(os.environ.get("FAKE_SGLANG_DIE_AFTER_REQUESTS", "1")) if dies else None
        record_requests(engine._app, args.port, os.environ.get("FAKE_SGLANG_REQUESTS", os.devnull), die_after)
    loop = asyncio.new_event_loop()
    if mode == "dies" and os.environ.get("FAKE_SGLANG_DIE_WHEN"):
        _die_when(loop, Path(os.environ["FAKE_SGLANG_DIE_WHEN"]))
    elif mode == "dies":
        loop.call_later(float(os.environ.get("FAKE_SGLANG_DIE_AFTER", "2")), _die)
    print(f"fake sglang: serving on {args.host}:{args.port}", flush=True)
    web.run_app(engine._app, host=args.host, port=args.port, handle_signals=False, print=None,
                access_log=None, loop=loop)
    return 0


def _die_when(loop: asyncio.AbstractEventLoop, path: Path) -> None:
    """_die once ``path`` exists (checked every 0.1 s): an event, however slow the machine."""
    if path.exists():
        _die()
    loop.call_later(0.1, _die_when, loop, path)


def _die() -> None:
    print("fake sglang: scheduler crashed (scripted): exiting with status 3", flush=True)
    os._exit(3)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
