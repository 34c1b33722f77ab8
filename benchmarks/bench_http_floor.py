"""The CPU floor of relaying a chat call over aiohttp, as the gateway does, with no gateway work.

Usage:
    .venv/bin/python benchmarks/bench_http_floor.py [--sessions 256] [--calls 8]
        [--request-bytes 27000] [--prompt-ids 12000] [--reply-ids 240] [--engine-delay 0.5]

Three processes, as in ``bench_gateway.py``: an engine stand-in (an aiohttp server that reads
a ``/generate`` body, waits ``--engine-delay`` s and answers with ``--reply-ids`` ids and
their logprobs), a relay (an aiohttp server that reads a chat body of ``--request-bytes``,
sends a ``/generate`` body of ``--prompt-ids`` ids, written by the gateway's own
``generate_body``, through one aiohttp client session, reads the answer with orjson
and replies with a small JSON body), and a load client of ``--sessions`` concurrent sessions
of ``--calls`` sequential calls. No rendering, no tokenizing, no parsing of the reply: the
relay's CPU per call is what the gateway's HTTP path costs before it does any work of its
own. The default sizes are those of turn 8 of the gateway benchmark's sessions.

One JSON line per figure: CPU per call of the relay and of the engine stand-in.
Everything is on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
from array import array
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "python")]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _serve(app: Any, ready: Any) -> None:
    """Serve ``app`` on a free loopback port, report the port on ``ready``, serve forever."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    ready.put(runner.addresses[0][1])
    await asyncio.Event().wait()


def _engine_main(delay: float, reply_ids: int, ready: Any) -> None:
    import orjson
    from aiohttp import web

    ids = list(range(100, 100 + reply_ids))
    answer = orjson.dumps(
        {
            "text": "x" * (2 * reply_ids),
            "output_ids": ids,
            "meta_info": {
                "finish_reason": {"type": "stop", "matched": ids[-1]},
                "output_token_logprobs": [[-0.25, i, None] for i in ids],
            },
        }
    )

    async def generate(request: web.Request) -> web.Response:
        orjson.loads(await request.read())
        await asyncio.sleep(delay)
        return web.Response(body=answer, content_type="application/json")

    app = web.Application(client_max_size=2**26)
    app.router.add_post("/generate", generate)
    asyncio.run(_serve(app, ready))


def _relay_main(engine_port: int, prompt_ids: int, ready: Any) -> None:
    import aiohttp
    import orjson
    from agentcore_slime.gateway.engine import generate_body
    from aiohttp import web

    ids = array("i", range(prompt_ids))
    url = f"http://127.0.0.1:{engine_port}/generate"
    headers = {"Content-Type": "application/json"}
    client: aiohttp.ClientSession | None = None

    async def chat(request: web.Request) -> web.Response:
        nonlocal client
        if client is None:  # made on the serving loop
            client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        orjson.loads(await request.read())
        async with client.post(url, data=generate_body("r", ids, {}), headers=headers) as resp:
            assert resp.status == 200, resp.status
            orjson.loads(await resp.read())
        return web.Response(body=b'{"choices": []}', content_type="application/json")

    app = web.Application(client_max_size=2**26)
    app.router.add_post("/chat", chat)
    asyncio.run(_serve(app, ready))


async def _load(port: int, sessions: int, calls: int, request_bytes: int) -> None:
    import aiohttp

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * request_bytes}]})
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def session() -> None:
            for _ in range(calls):
                async with http.post(f"http://127.0.0.1:{port}/chat", data=body) as resp:
                    await resp.read()
                    if resp.status != 200:  # a failed call must not count as a relayed one
                        raise RuntimeError(f"the relay answered HTTP {resp.status}")

        await asyncio.gather(*(session() for _ in range(sessions)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--request-bytes", type=int, default=27_000, help="size of each chat body")
    parser.add_argument("--prompt-ids", type=int, default=12_000, help="ids in each /generate body")
    parser.add_argument("--reply-ids", type=int, default=240, help="ids in each engine answer")
    parser.add_argument("--engine-delay", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.calls < 1:
        parser.error("--sessions and --calls must be >= 1")
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    engine = ctx.Process(target=_engine_main, args=(args.engine_delay, args.reply_ids, ready), daemon=True)
    engine.start()
    engine_port = ready.get(timeout=60)
    relay = ctx.Process(target=_relay_main, args=(engine_port, args.prompt_ids, ready), daemon=True)
    relay.start()
    port = ready.get(timeout=60)
    try:
        asyncio.run(_load(port, 16, 2, args.request_bytes))  # warm up connections
        assert relay.pid is not None and engine.pid is not None
        before = {"relay": cpu_seconds(relay.pid), "engine": cpu_seconds(engine.pid)}
        asyncio.run(_load(port, args.sessions, args.calls, args.request_bytes))
        calls = args.sessions * args.calls
        for name, pid in (("relay", relay.pid), ("engine", engine.pid)):
            per_call = (cpu_seconds(pid) - before[name]) / calls * 1e3
            print(
                json.dumps(
                    {
                        "figure": f"{name}_cpu_per_call",
                        "value": round(per_call, 3),
                        "unit": "ms",
                        "sessions": args.sessions,
                        "calls": calls,
                    }
                )
            )
    finally:
        relay.terminate()
        engine.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
