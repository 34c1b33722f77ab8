#!/usr/bin/env python3
"""Benchmark: a whole training step at N concurrent episodes; it should return when its last episode does.

Usage:
    .venv/bin/python benchmarks/bench_step.py [--episodes 256] [--delay 3.0] [--calls 3]
        [--s3 moto|light] [--s3-latency 0.02,0.05] [--steps 3] [--py-spy FILE]
        [--gateway-processes 1] [--kill-engine-after SECONDS]

Real parts, unchanged: slime's call of ``generate_rollout`` (the slime stand-in's types and a
data source handing out groups of 8 copies of a prompt), the rollout's runtime with its
production factories (``default_gateway_factory``: the gateway in ``--gateway-processes``
processes of its own, driven through ``GatewayPool`` / ``GatewayProcess``; ``make_runner``: the
local transport and the S3 result watcher),
boto3. Stand-ins, each in a process of its own and speaking the real protocol over loopback:

- the engine: ``fakes.sglang_server.FakeSGLang`` (SGLang's ``/generate``) answering every call
  after ``--delay`` s with a short constant reply (the delay stands for generation);
- the agent: a light aiohttp server on the local-agent wire (``POST /invocations`` with the
  session header, immediate reply), which makes ``--calls`` chat calls in a row to the
  session's base URL and then writes its result object to S3, as ``AgentCoreRLApp`` does
  (a PutObject URL presigned by boto3, sent with aiohttp: the same call and object, signed in
  the query, without boto3's ~2 ms of CPU in a thread; here a thousand agents share one
  process, where each would have a microVM of its own);
- S3 (``--s3``): ``moto`` (default), moto's server (``fakes.s3.LocalS3(process=True)``) behind a
  small forwarding proxy that holds every S3 request ``--s3-latency`` seconds (uniform
  between the two figures; real S3 answers a GET in 20-50 ms); or ``light``, an in-memory S3
  of the four calls used (PutObject, GetObject, ListObjectsV2, CreateBucket) with the same
  latency. moto is one Python process: ~2 ms of CPU per PUT or GET and 36 ms per LIST of 256
  keys, so a thousand results written together queue for seconds behind one core (real S3
  scales out); ``light`` (one process too, ~0.15 ms of CPU a request) shows the step without
  that queue.

The ACR TPS quota is lifted (``ACR_TPS_LIMIT`` 1,000,000): at the tests' 1,000/s the pacing
alone would spread 1,024 invocations over a second. All episodes start together and end
together (``--delay`` is fixed), the common case of a group of one prompt. Step 1 starts the
gateway; the figures are medians over the steps after it (``--steps``, default 3: the mean of
two steps), each figure's on its own. Printed,
one JSON line per figure and a summary table:

- ``step``: ``generate_rollout``'s wall time; ``ideal``: ``--calls`` x ``--delay``;
- ``ramp``: step start -> the last episode's invocation reached the agent;
- ``excess`` per episode: its invocation-to-result-written time minus the ideal (p50, max),
  split into ``calls_excess`` (invocation -> the agent's last reply, minus the ideal: the
  gateway's share, with the agent's and engine's) and ``put`` (writing the result to S3);
- ``tail``: the last result written (PUT returned) -> ``generate_rollout`` returned;
- the rollout process's CPU per episode: session management (``GatewayProcess`` session
  calls, timed on the calling thread, plus the threads it runs of its own) and result reading
  (the result watcher's threads: LIST, GET, parse), and the whole process's;
- ``cpu_by_process_s``: CPU seconds of each process during a step (rollout, gateway, engine,
  agent, S3): all share this machine's two cores, so a stand-in's CPU slows the others.

``--kill-engine-after S``: two engines behind slime's router stand-in (``FakeRouter``), with
slime's fault tolerance on (``--use-fault-tolerance``, health checks 1 s apart and 1 s timeout:
the gateway retries an engine that went away for 1 + 1 + 30 s); in the last step engine 0 is
killed S seconds in and removed from the router 2 s later, as slime's health monitor does. The
step must still end with every episode's reward (the benchmark stops with an error otherwise).

``--py-spy FILE`` records the rollout process during the measured steps (``py-spy record``,
raw collapsed stacks; install py-spy from PyPI). On a machine shared with other jobs
compare ratios (step / ideal), not seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "python"
sys.path[:0] = [str(ROOT / "python"), str(TESTS), str(TESTS / "slime_standin")]

from bench_gateway import cpu_seconds, serve_constant_reply  # noqa: E402  (benchmarks/ is on the path as the script's folder)

GROUP = 8  # episodes per prompt group
HEALTH_CHECK_S = 1.0  # --kill-engine-after: slime's health check interval and timeout
#: (module, class, method) whose time on the calling thread is session management
SESSION_CALLS = [
    ("agentcore_slime.gateway.process", "GatewayProcess", name)
    for name in ("create_session", "traces", "delete_session", "abort_session", "finish_session")
]
#: thread-name prefixes whose CPU is session management / result reading
SESSION_THREADS = ("agentcore-gateway-channel",)
RESULT_THREADS = ("agentcore-s3",)


# ----------------------------------------------------------------------------- engine process
def _engine_main(model_dir: str, delay: float, ready: Any, stop: Any) -> None:
    serve_constant_reply(model_dir, "The answer is 4.", delay, ready, stop)


def _router_main(worker_urls: list[str], ready: Any, stop: Any) -> None:
    """slime's router stand-in (fakes.sglang_server.FakeRouter) in front of the engines."""
    from types import SimpleNamespace

    from fakes.sglang_server import FakeRouter

    router = FakeRouter([SimpleNamespace(url=url) for url in worker_urls])  # type: ignore[list-item]
    ready.put(router.start())
    stop.wait()
    router.stop()


def _kill_engine_later(proc: Any, router_url: str, after: float, removed_after: float) -> threading.Thread:
    """Kill engine 0 ``after`` s from now, and remove it from the router ``removed_after`` s
    later, as slime's health monitor does (interval + timeout)."""
    import httpx

    def kill() -> None:
        time.sleep(after)
        proc.kill()
        time.sleep(removed_after)
        httpx.delete(f"{router_url}/workers/w0", timeout=10)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


# ----------------------------------------------------------------------------- agent process
def _agent_main(calls: int, s3_env: dict[str, str], ready: Any, stop: Any) -> None:
    """The light agent: immediate reply, ``calls`` chat calls, then its result PUT to S3."""
    os.environ.update(s3_env)
    import aiohttp
    import boto3
    from aiohttp import web
    from botocore.config import Config

    s3 = boto3.client("s3", config=Config(max_pool_connections=128))
    episodes: list[dict[str, float]] = []
    tasks: set[asyncio.Task[None]] = set()
    state: dict[str, Any] = {}

    async def episode(payload: dict[str, Any], sid: str) -> None:
        rollout = payload["_rollout"]
        times = {"invoked": time.time()}
        messages = [{"role": "user", "content": f"What is 2+2? ({payload.get('q')})"}]
        ok = True
        for number in range(calls):
            body = {"model": rollout["model_id"], "messages": messages, "max_tokens": 16}
            sent = time.time()
            async with state["http"].post(rollout["base_url"] + "/chat/completions", json=body) as reply:
                answer = await reply.json()
            times[f"call_{number}"] = time.time() - sent
            if number == 0:
                times["first_call"] = time.time()
            if "choices" not in answer:
                ok = False
                break
            messages += [answer["choices"][0]["message"], {"role": "user", "content": "Are you sure?"}]
        times["calls_done"] = time.time()
        key = f"{rollout['exp_id']}/{rollout['input_id']}/{sid}.json"
        result = {"rewards": 1.0 if ok else 0.0, "status_code": 200, "result_key": key}
        # PutObject as a URL presigned by boto3, sent on the agent's loop: the same call and
        # object (the signature in the query, no checksum header), without put_object's ~2 ms of
        # CPU in a thread: here a thousand agents share one process and two cores with the node's
        # own work, where each would have a microVM
        url = s3.generate_presigned_url(
            "put_object", Params={"Bucket": rollout["s3_bucket"], "Key": key}, ExpiresIn=600
        )
        async with state["http"].put(url, data=json.dumps(result).encode()) as reply:
            if reply.status != 200:
                raise RuntimeError(f"PUT {key}: HTTP {reply.status}: {await reply.text()}")
        times["written"] = time.time()
        episodes.append(times)

    async def invocations(request: web.Request) -> web.Response:
        payload = await request.json()
        sid = request.headers["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"]
        task = asyncio.create_task(episode(payload, sid))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return web.json_response({"status": "started"})

    async def stats(request: web.Request) -> web.Response:
        taken = list(episodes)
        episodes.clear()
        return web.json_response(taken)

    async def main() -> None:
        state["http"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600)
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/invocations", invocations)
        app.router.add_get("/stats", stats)
        await _serve_until_stopped(app, ready, stop)
        await state["http"].close()

    asyncio.run(main())


async def _serve_until_stopped(app: Any, ready: Any, stop: Any) -> None:
    """Serve ``app`` on a free loopback port (its URL put on ``ready``) until ``stop`` is set."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    ready.put(f"http://127.0.0.1:{port}")
    while not stop.is_set():
        await asyncio.sleep(0.2)
    await runner.cleanup()


# ----------------------------------------------------------------------------- S3 latency proxy
def _proxy_main(target: str, low: float, high: float, ready: Any, stop: Any) -> None:
    """Forwards every request to moto after ``uniform(low, high)`` seconds (S3's own latency)."""
    import aiohttp
    from aiohttp import web

    hop = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
    state: dict[str, Any] = {}

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(random.uniform(low, high))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in hop}
        async with state["http"].request(
            request.method, target + request.path_qs, headers=headers, data=body
        ) as reply:
            data = await reply.read()
            out = {k: v for k, v in reply.headers.items() if k.lower() not in hop}
            return web.Response(status=reply.status, body=data, headers=out)

    async def main() -> None:
        state["http"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", forward)
        await _serve_until_stopped(app, ready, stop)
        await state["http"].close()

    asyncio.run(main())


# ----------------------------------------------------------------------------- light S3
_S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _s3_error(status: int, code: str) -> Any:
    from aiohttp import web

    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{code}</Message></Error>'
    )
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


def _unchunk(body: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body (``size;chunk-signature=..\r\ndata\r\n``..., then trailers)."""
    out, at = bytearray(), 0
    while True:
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[line_end + 2 : line_end + 2 + size]
        at = line_end + 2 + size + 2


def _light_s3_main(low: float, high: float, ready: Any, stop: Any) -> None:
    """An in-memory S3 (the calls the agent and the rollout make: PutObject, GetObject,
    ListObjectsV2, CreateBucket; path-style, auth not checked, as moto does not check it either)
    answering after ``uniform(low, high)`` s. Real S3 scales out; moto's single process queues
    a thousand requests behind one core on this machine (2 ms of CPU per PUT or GET, 36 ms per
    LIST of 256 keys, ``--s3 moto``). This one is one process too, at ~0.15 ms a request."""
    import bisect
    import html
    import urllib.parse
    from email.utils import formatdate

    from aiohttp import web

    buckets: dict[str, tuple[dict[str, bytes], list[str]]] = {}

    def list_v2(name: str, query: Any) -> Any:
        objects, keys = buckets[name]
        prefix = query.get("prefix", "")
        after = max(query.get("start-after", ""), query.get("continuation-token", ""))
        limit = min(int(query.get("max-keys", "1000")), 1000)
        encode = query.get("encoding-type") == "url"

        def shown(text: str) -> str:  # as S3 spells keys and prefixes in the listing
            return urllib.parse.quote_plus(text, safe="/") if encode else html.escape(text)

        at = max(bisect.bisect_right(keys, after), bisect.bisect_left(keys, prefix))
        found = []
        while at < len(keys) and keys[at].startswith(prefix) and len(found) <= limit:
            found.append(keys[at])
            at += 1
        truncated = len(found) > limit
        found = found[:limit]
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        parts = [f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_S3_NS}">',
                 f"<Name>{name}</Name><Prefix>{shown(prefix)}</Prefix><KeyCount>{len(found)}</KeyCount>",
                 f"<MaxKeys>{limit}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>"]
        if encode:
            parts.append("<EncodingType>url</EncodingType>")
        for key in found:
            parts.append(f"<Contents><Key>{shown(key)}</Key><LastModified>{now}</LastModified>"
                         f'<ETag>"0"</ETag><Size>{len(objects[key])}</Size><StorageClass>STANDARD</StorageClass></Contents>')
        if truncated and found:
            parts.append(f"<NextContinuationToken>{html.escape(found[-1])}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return web.Response(body="".join(parts).encode(), content_type="application/xml")

    async def handle(request: web.Request) -> Any:
        await asyncio.sleep(random.uniform(low, high))
        name, _, key = request.path.lstrip("/").partition("/")  # aiohttp has decoded the path once
        if request.method == "PUT" and not key:
            buckets.setdefault(name, ({}, []))
            return web.Response(status=200)
        if name not in buckets:
            return _s3_error(404, "NoSuchBucket")
        objects, keys = buckets[name]
        if request.method == "PUT":
            body = await request.read()
            if "aws-chunked" in request.headers.get("Content-Encoding", ""):
                body = _unchunk(body)
            if key not in objects:
                bisect.insort(keys, key)
            objects[key] = body
            return web.Response(status=200, headers={"ETag": '"0"'})
        if request.method in ("GET", "HEAD") and not key:
            return list_v2(name, request.query) if request.query.get("list-type") == "2" else web.Response()
        if request.method in ("GET", "HEAD"):
            if key not in objects:
                return _s3_error(404, "NoSuchKey")
            headers = {"ETag": '"0"', "Last-Modified": formatdate(usegmt=True)}
            return web.Response(body=objects[key], headers=headers, content_type="application/octet-stream")
        return _s3_error(405, "MethodNotAllowed")

    async def main() -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", handle)
        await _serve_until_stopped(app, ready, stop)

    asyncio.run(main())


def _start(target: Callable[..., None], *args: Any) -> tuple[Any, str, Any]:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=target, args=(*args, ready, stop), daemon=True)
    proc.start()
    return proc, str(ready.get(timeout=120)), stop


# ----------------------------------------------------------------------------- CPU accounting
class CpuMeter:
    """CPU of this process: the session calls (on their calling threads) and named threads."""

    def __init__(self) -> None:
        self.session_seconds = 0.0
        self._lock = threading.Lock()
        for module_name, class_name, method in SESSION_CALLS:
            module = __import__(module_name, fromlist=[class_name])
            cls = getattr(module, class_name)
            if hasattr(cls, method):
                setattr(cls, method, self._timed(getattr(cls, method)))

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            begin = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - begin
                with self._lock:
                    self.session_seconds += spent

        return timed

    @staticmethod
    def threads() -> dict[str, float]:
        """CPU seconds by thread-name prefix (the name up to its last ``_``/``-<digits>``)."""
        out: dict[str, float] = {}
        for thread in threading.enumerate():
            if thread.ident is None:
                continue
            try:
                seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except (OSError, ProcessLookupError):
                continue
            out[thread.name] = out.get(thread.name, 0.0) + seconds
        return out

    def snapshot(self) -> tuple[float, float, dict[str, float]]:
        return time.process_time(), self.session_seconds, self.threads()


def _by_prefix(before: dict[str, float], after: dict[str, float], prefixes: tuple[str, ...]) -> float:
    return sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(prefixes))


# ----------------------------------------------------------------------------- the step
def _args(
    agent_url: str, bucket: str, model_dir: str, engine_url: str, episodes: int, gateway_processes: int
) -> Any:
    from fakes.standins import make_args

    return make_args(
        gateway_processes=gateway_processes,
        agent_url=agent_url,
        s3_bucket=bucket,
        exp_id="bench-step",
        hf_checkpoint=model_dir,
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(engine_url.rsplit(":", 1)[1]),
        gateway_host="127.0.0.1",
        acr_timeout=600,
        acr_tps_limit=1_000_000,  # the ACR TPS quota lifted: the pacing is not what is measured
        max_concurrent=episodes,
        result_poll_interval=0.25,  # the production default
        rollout_batch_size=episodes // GROUP,
        n_samples_per_prompt=GROUP,
        rollout_max_response_len=64,
        custom_config_path=None,
    )


def _start_s3(
    options: argparse.Namespace, servers: contextlib.ExitStack, procs: list[Any], stops: list[Any],
    roles: dict[str, int],
) -> tuple[str, dict[str, str], str]:
    """The S3 stand-in (``--s3``): its URL, the environment pointing boto3 at it, the bucket."""
    from fakes.s3 import LocalS3

    low, high = options.s3_latency
    if options.s3 == "light":
        proc, url, stop = _start(_light_s3_main, low, high)
        procs.append(proc)
        stops.append(stop)
        roles["s3 (light)"] = proc.pid
        env = {**LocalS3().env(), "AWS_ENDPOINT_URL_S3": url}
        bucket = "bench-step-results"
        import boto3

        client = boto3.client(
            "s3", endpoint_url=url, region_name=env["AWS_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        client.create_bucket(
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": env["AWS_REGION"]}
        )
        return url, env, bucket
    local_s3 = servers.enter_context(LocalS3(process=True))
    roles["moto"] = local_s3._server.pid
    url = local_s3.url
    if high > 0:
        proc, url, stop = _start(_proxy_main, local_s3.url, low, high)
        procs.append(proc)
        stops.append(stop)
        roles["s3 proxy"] = proc.pid
    return url, {**local_s3.env(), "AWS_ENDPOINT_URL_S3": url}, local_s3.create_bucket()


def run(options: argparse.Namespace) -> dict[str, Any]:
    import httpx
    from agentcore_slime import rollout
    from agentcore_slime.rollout import runtime
    from fakes.data_source import ListDataSource
    from fakes.toy_tokenizer import build_toy_tokenizer

    meter = CpuMeter()
    workdir = Path(tempfile.mkdtemp(prefix="bench-step-"))
    model_dir = str(build_toy_tokenizer(workdir / "toy-model"))
    stops: list[Any] = []
    procs: list[Any] = []
    spy: subprocess.Popen[bytes] | None = None
    try:
        with contextlib.ExitStack() as servers:
            roles = {"rollout": os.getpid()}
            s3_url, s3_env, bucket = _start_s3(options, servers, procs, stops, roles)
            os.environ.update(s3_env)
            engines = []
            for i in range(2 if options.kill_engine_after else 1):
                proc, engine_url, stop = _start(_engine_main, model_dir, options.delay)
                procs.append(proc)
                stops.append(stop)
                roles[f"engine-{i}" if i else "engine"] = proc.pid
                engines.append((proc, engine_url))
            if options.kill_engine_after:  # two engines behind the router stand-in
                proc, engine_url, stop = _start(_router_main, [url for _, url in engines])
                procs.append(proc)
                stops.append(stop)
                roles["router"] = proc.pid
            proc, agent_url, stop = _start(_agent_main, options.calls, s3_env)
            procs.append(proc)
            stops.append(stop)
            roles["agent"] = proc.pid

            pool = options.gateway_processes
            args = _args(agent_url, bucket, model_dir, engine_url, options.episodes, pool)
            if options.kill_engine_after:  # slime's fault tolerance, its checks 1 s apart
                args.use_fault_tolerance = True
                args.rollout_health_check_interval = args.rollout_health_check_timeout = HEALTH_CHECK_S
            rows = [{"prompt": f"q{i}", "metadata": {"q": i}} for i in range(options.episodes // GROUP)]
            source = ListDataSource(rows, GROUP)
            state = runtime._STATE
            state.reset()
            state.gateway_factory = runtime.default_gateway_factory
            figures: dict[str, Any] = {}
            try:
                measured: list[dict[str, Any]] = []
                for step in range(options.steps):
                    if step == 1 and options.py_spy:  # the measured steps only
                        spy = subprocess.Popen(
                            ["py-spy", "record", "-p", str(os.getpid()), "--format", "raw", "-r", "200",
                             "-o", options.py_spy, "--nonblocking", "--threads", "--gil"],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        )
                        time.sleep(1.0)
                    members = getattr(state.runtime.gateway, "members", []) if state.runtime else []
                    roles.update({f"gateway-{i}": member.pid or 0 for i, member in enumerate(members)})
                    if options.kill_engine_after and step == options.steps - 1:  # the last step
                        dead, removed_after = engines[0][0], 2 * HEALTH_CHECK_S
                        _kill_engine_later(dead, engine_url, options.kill_engine_after, removed_after)
                    processes0 = {role: cpu_seconds(pid) for role, pid in roles.items() if pid}
                    before = meter.snapshot()
                    started = time.time()
                    output = rollout.generate_rollout(args, step, source)
                    returned = time.time()
                    after = meter.snapshot()
                    processes = {r: cpu_seconds(roles[r]) - cpu for r, cpu in processes0.items()}
                    samples = [s for group in output.samples for s in group]
                    episodes = httpx.get(agent_url + "/stats", timeout=60).json()
                    if len(episodes) != options.episodes or len(samples) < options.episodes:
                        raise RuntimeError(f"step {step}: {len(episodes)} episodes, {len(samples)} samples")
                    if not all(s.reward == 1.0 for s in samples):
                        rewards = [s.reward for s in samples][:8]
                        raise RuntimeError(f"step {step}: an episode failed (rewards {rewards})")
                    if step > 0:
                        measured.append(
                            _step_figures(options, episodes, started, returned, before, after, processes)
                        )
                figures = _medians(measured)
            finally:
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
                    spy.wait(30)
                state.reset()
    finally:
        for proc, stop in zip(procs, stops, strict=True):
            if proc.is_alive():  # a killed engine died waiting on its event: setting it would hang
                stop.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


def _step_figures(
    options: argparse.Namespace,
    episodes: list[dict[str, float]],
    started: float,
    returned: float,
    before: tuple[float, float, dict[str, float]],
    after: tuple[float, float, dict[str, float]],
    processes: dict[str, float],
) -> dict[str, Any]:
    """The figures of one step from the agent's episode times and the CPU meter's snapshots."""
    (cpu0, session0, threads0), (cpu1, session1, threads1) = before, after
    ideal = options.calls * options.delay
    excess = [e["written"] - e["invoked"] - ideal for e in episodes]
    calls = [e["calls_done"] - e["invoked"] - ideal for e in episodes]
    puts = [e["written"] - e["calls_done"] for e in episodes]
    n = options.episodes
    busiest = sorted(((v - threads0.get(k, 0.0), k) for k, v in threads1.items()), reverse=True)[:6]
    return {
        "step": returned - started,
        "ideal": ideal,
        "ratio": (returned - started) / ideal,
        "ramp": max(e["invoked"] for e in episodes) - started,
        "excess_p50": statistics.median(excess),
        "excess_max": max(excess),
        "calls_excess_p50": statistics.median(calls),
        "calls_excess_max": max(calls),
        "put_p50": statistics.median(puts),
        "put_max": max(puts),
        "tail": returned - max(e["written"] for e in episodes),
        "cpu_session_ms": 1000 * (session1 - session0 + _by_prefix(threads0, threads1, SESSION_THREADS)) / n,
        "cpu_results_ms": 1000 * _by_prefix(threads0, threads1, RESULT_THREADS) / n,
        "cpu_process_ms": 1000 * (cpu1 - cpu0) / n,
        "threads": {k: v for v, k in busiest},
        "processes": processes,
    }


def _medians(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the measured steps (CPU by thread and process too)."""
    out: dict[str, Any] = {}
    for name, value in steps[0].items():
        if isinstance(value, dict):
            names = {k for s in steps for k in s[name]}
            medians = {k: round(statistics.median(s[name].get(k, 0.0) for s in steps), 3) for k in names}
            out[name] = dict(sorted(medians.items(), key=lambda item: -item[1]))
        else:
            out[name] = statistics.median(s[name] for s in steps)
    return out


def _latency(text: str) -> tuple[float, float]:
    parts = [float(p) for p in text.split(",")]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or not 0 <= parts[0] <= parts[1]:
        raise argparse.ArgumentTypeError("--s3-latency: LOW,HIGH seconds (e.g. 0.02,0.05), or 0")
    return parts[0], parts[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--episodes", type=int, default=256, help=f"episodes per step (a multiple of {GROUP})"
    )
    parser.add_argument("--delay", type=float, default=3.0, help="seconds the engine takes per call")
    parser.add_argument("--calls", type=int, default=3, help="model calls per episode")
    parser.add_argument(
        "--s3-latency", type=_latency, default=(0.02, 0.05), help="LOW,HIGH s per S3 request; 0: none"
    )
    parser.add_argument(
        "--s3", choices=("moto", "light"), default="moto",
        help="the S3 stand-in: moto's server (one process) or a light in-memory one that, like S3, "
        "does not queue requests behind one core",
    )
    parser.add_argument(
        "--steps", type=int, default=3,
        help="steps to run: the first starts the gateway, the figures are medians over the others",
    )
    parser.add_argument("--py-spy", default="", help="record the measured step with py-spy into this file")
    parser.add_argument(
        "--gateway-processes", type=int, default=1, help="gateway processes (GATEWAY_PROCESSES; 0 = auto)"
    )
    parser.add_argument(
        "--kill-engine-after", type=float, default=0.0,
        help="two engines behind a router stand-in, with slime's fault tolerance; in the last step "
        "engine 0 is killed this many seconds in (and removed from the router 2 s later)",
    )
    options = parser.parse_args(argv)
    if options.steps < 2:
        parser.error("--steps must be at least 2 (the first step starts the gateway and is not measured)")
    if options.episodes < GROUP or options.episodes % GROUP:
        parser.error(f"--episodes must be a positive multiple of {GROUP}")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    figures = run(options)
    threads = figures.pop("threads")
    processes = figures.pop("processes")
    for name, value in figures.items():
        print(json.dumps({"figure": name, "episodes": options.episodes, "value": round(value, 4)}))
    print(json.dumps({"figure": "busiest_threads_cpu_s", "episodes": options.episodes, "value": threads}))
    print(json.dumps({"figure": "cpu_by_process_s", "episodes": options.episodes, "value": processes}))
    print(
        f"| {options.episodes} | {options.s3} | {figures['step']:.2f} s | {figures['ratio']:.3f}x | "
        f"{figures['ramp']:.2f} s | "
        f"{figures['calls_excess_p50']:.2f} / {figures['calls_excess_max']:.2f} s | "
        f"{figures['put_p50']:.2f} / {figures['put_max']:.2f} s | {figures['tail']:.2f} s | "
        f"{figures['cpu_session_ms']:.2f} ms | {figures['cpu_results_ms']:.2f} ms | "
        f"{figures['cpu_process_ms']:.2f} ms |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
