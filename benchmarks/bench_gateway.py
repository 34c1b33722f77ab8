"""Benchmark the gateway at scale: latency it adds, CPU per process, GC pauses, memory per token.

Usage:
    .venv/bin/python benchmarks/bench_gateway.py [--sessions 256,1024] [--calls 8]
        [--engine-delay 2.0] [--system-tokens 8000] [--system-prompts shared|distinct]
        [--reply-tokens 200] [--long-prompt-tokens 32000] [--turns 64] [--repeats 3]
        [--part all|latency|prompt|throughput] [--protocol chat,messages,responses,converse]
        [--processes 1] [--throughput-processes 1,2,4]

Part ``latency``: three processes, as in training: a scripted SGLang engine
(tests/python/fakes/sglang_server.py; it answers after ``--engine-delay`` s, standing for
generation, with a tool call and ``--reply-tokens`` of text), the gateway (``GatewayProcess``,
its own child process, started as the rollout starts it; sessions go through its loopback
admin routes), and a load client driving N concurrent sessions (for each N in ``--sessions``)
of ``--calls`` sequential tool turns in cumulative mode: a first turn with a
``--system-tokens`` system prompt (one for every session, as one agent has, or a different
one each with ``--system-prompts distinct``) and a task of its own, then per turn the reply
and a tool result of a few hundred tokens. The same number of ``/generate`` requests, with a
prompt as long as a mid-conversation gateway prompt, go straight to the engine as the
baseline. Then, at the smallest N, the same load again while another client sends first
turns of ``--long-prompt-tokens`` tokens (a long system prompt of their own and tool
schemas), one after the other: how much the other sessions' p99 moves while they render.

Each load runs ``--repeats`` times (a gateway pass, then its direct pass); latency
percentiles are taken over the pooled samples of all repeats, and each repeat's own added
p50 / p99 (or p99 shift) is listed beside them as ``runs``: on this shared 2-core machine one
pass's p99 moves by several ms from run to run.

One JSON line per figure: ``{"figure": ..., "sessions": N, "value": ..., "unit": ...}``.
Figures: added latency p50 / p99 (gateway minus direct, as the agent sees it), CPU per call
of each process (gateway, engine stand-in, client; the gateway's also per first turn, from a
pass of first turns only, and per later turn), the gateway's longest garbage collection
pause (CPU time of the collecting thread, and wall time), bytes of session state per held
token (``/admin/stats?deep=1``: everything reachable from the sessions, counted once, over
the ids their traces hold; RSS growth per held token too, which also counts allocator
high-water marks) and RSS before the sessions, while held and after every session was deleted.
Targets (issue 14): +p50 <= 2 ms, +p99 <= 10 ms at 256 sessions, +p99 <= 25 ms at 1,024;
gateway CPU <= 0.7 ms per call; no GC pause over 20 ms; <= 16 bytes per held token; a 32k
first turn moves p99 by <= 10 ms.
On a shared 2-core machine the three processes share the cores: figures vary between runs.

``--protocol`` (comma-separated; default ``chat``): the sessions speak OpenAI chat
completions (``chat``), Anthropic Messages (``messages``), OpenAI Responses (``responses``)
or Bedrock Converse (``converse``): the same conversations in each protocol's spelling,
measured one protocol after the other in one run (figures tagged ``protocol``; the long
first-turn load runs with the first protocol listed). Targets (issue 25): each protocol's
gateway CPU per call <= 1.2x chat's, its added p99 at 256 sessions <= chat's + 2 ms.

Part ``prompt``: time to build the prompt ids of turn N (normalize the messages + bridge
or full render) in cumulative mode for a tool conversation growing to ``--turns`` turns,
with the toy Qwen2.5-like tokenizer (chat-template path). Target: turn 64 <= 3x turn 1.

``--processes N``: the gateway as a pool of N processes (``GATEWAY_PROCESSES``; sessions spread
over them), CPU and RSS summed over them.

Part ``throughput``: calls per second at saturation, for each pool size in
``--throughput-processes``: an engine stand-in that answers at once (``--engine-delay`` is not
used), as many sessions as ``--sessions``' smallest, each making ``--calls`` tool turns back to
back, driven by ``--clients`` load processes; figures ``throughput_calls_per_s`` and the
gateway's CPU per call. The calls per second grow with processes only while idle cores are left
for them: on a 2-core machine the load clients and the engine take the other core.

Everything is on loopback; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "python")]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS
]
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]
CONVERSE_TOOLS = [
    {
        "toolSpec": {
            "name": t["name"],
            "description": t["description"],
            "inputSchema": {"json": t["input_schema"]},
        }
    }
    for t in ANTHROPIC_TOOLS
]
PROTOCOLS = ("chat", "messages", "responses", "converse")


class Conversation:
    """One session's tool conversation, spelled in its protocol (the load client's side).

    :param protocol: one of :data:`PROTOCOLS`.
    :param base: the session's OpenAI base URL (``.../sessions/<sid>/v1``).
    """

    def __init__(self, protocol: str, base: str, system: str, task: str) -> None:
        self.protocol = protocol
        root = base.removesuffix("/v1")
        self.url = {
            "chat": f"{base}/chat/completions",
            "messages": f"{root}/v1/messages",
            "responses": f"{base}/responses",
            "converse": f"{root}/model/m/converse",
        }[protocol]
        self.system = system
        self.turns: list[dict[str, Any]]
        if protocol == "chat":
            self.turns = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        elif protocol == "converse":
            self.turns = [{"role": "user", "content": [{"text": task}]}]
        else:
            self.turns = [{"role": "user", "content": task}]

    def body(self) -> dict[str, Any]:
        if self.protocol == "chat":
            return {"model": "m", "messages": self.turns, "tools": TOOLS}
        if self.protocol == "messages":
            return {
                "model": "m",
                "max_tokens": 4096,
                "system": self.system,
                "messages": self.turns,
                "tools": ANTHROPIC_TOOLS,
            }
        if self.protocol == "responses":
            return {"model": "m", "instructions": self.system, "input": self.turns, "tools": RESPONSES_TOOLS}
        return {
            "system": [{"text": self.system}],
            "messages": self.turns,
            "toolConfig": {"tools": CONVERSE_TOOLS},
        }

    def add(self, reply: dict[str, Any], result: str) -> None:
        """The reply (a tool call) and the tool's result, as the next turn."""
        if self.protocol == "chat":
            message = reply["choices"][0]["message"]
            result_turn = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": result}
            self.turns += [message, result_turn]
        elif self.protocol == "messages":
            use = next(b for b in reply["content"] if b["type"] == "tool_use")
            answer = {"type": "tool_result", "tool_use_id": use["id"], "content": result}
            self.turns += [
                {"role": "assistant", "content": reply["content"]},
                {"role": "user", "content": [answer]},
            ]
        elif self.protocol == "responses":
            call = next(i for i in reply["output"] if i["type"] == "function_call")
            self.turns += [
                *reply["output"],
                {"type": "function_call_output", "call_id": call["call_id"], "output": result},
            ]
        else:
            message = reply["output"]["message"]
            use = next(b["toolUse"] for b in message["content"] if "toolUse" in b)
            answer = {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": result}]}}
            self.turns += [message, {"role": "user", "content": [answer]}]


# the load client writes and reads JSON with orjson: its CPU is not what is measured
JSON_HEADERS = {"Content-Type": "application/json"}
WORDS = (
    "alpha tool number result the value compute agent search table answer check".split()
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def shift_ms(after: list[float], before: list[float], q: float) -> float:
    """How far the q-th percentile moved, in ms (latencies in seconds)."""
    return (percentile(after, q) - percentile(before, q)) * 1e3


def text_of(tokens: int, seed: int) -> str:
    """Filler text of about ``tokens`` toy-tokenizer tokens (~2.8 tokens a word)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(int(tokens / 2.8)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def emit(figure: str, value: float, unit: str, **extra: Any) -> None:
    print(
        json.dumps({"figure": figure, "value": round(value, 3), "unit": unit, **extra}),
        flush=True,
    )


# ----------------------------------------------------------------------------- engine process
def _engine_main(
    model_dir: str, delay: float, reply_tokens: int, ready: Any, stop: Any
) -> None:
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    serve_constant_reply(model_dir, text_of(reply_tokens, 1) + "\n" + call, delay, ready, stop)


def serve_constant_reply(model_dir: str, text: str, delay: float, ready: Any, stop: Any) -> None:
    """The engine stand-in: ``text`` and ``<|im_end|>`` for every ``/generate``, after ``delay`` s
    (a constant reply: the stand-in spends no CPU on the prompt; the delay stands for
    generation). Its URL goes on ``ready``; it serves until ``stop`` is set."""
    from fakes.sglang_server import Completion, FakeSGLang
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    stop_id = tok.convert_tokens_to_ids("<|im_end|>")
    ids = [*tok.encode(text, add_special_tokens=False), stop_id]
    fake = FakeSGLang(
        lambda prompt_ids, params: Completion(ids, {"type": "stop", "matched": stop_id}),
        delay=delay,
        context_length=131072,
        keep_requests=False,
    )
    ready.put(fake.start())
    stop.wait()
    fake.stop()


# ----------------------------------------------------------------------------- gateway process
class BenchGateway:
    """The gateway as the rollout runs it: ``GatewayProcess``, a child process of its own,
    driven through the same seam (sessions over its loopback admin routes); figures from its
    ``/admin/stats`` route."""

    def __init__(self, model_dir: str, engine_url: str, processes: int = 1) -> None:
        from agentcore_slime.gateway import GatewayConfig
        from agentcore_slime.gateway.pool import GatewayPool

        self.gateway = GatewayPool(
            GatewayConfig(model_dir, host="127.0.0.1", port=0, cumulative_token_mode=True), processes
        )
        self.gateway.start(engine_url)
        self.sessions: list[str] = []
        self.pids = [member.pid for member in self.gateway.members if member.pid is not None]

    def cpu(self) -> float:
        """CPU seconds of every gateway process."""
        return sum(cpu_seconds(pid) for pid in self.pids)

    def rss(self) -> int:
        return sum(rss_bytes(pid) for pid in self.pids)

    def create_sessions(self, prefix: str, n: int) -> list[str]:
        sids = [f"{prefix}-{i}" for i in range(n)]
        self.sessions += sids
        return [self.gateway.create_session(sid, {"max_new_tokens": 1024}) for sid in sids]

    def stats(self, deep: bool = False) -> dict[str, Any]:
        return self.gateway.stats(deep)

    def delete_all(self) -> None:
        for sid in self.sessions:
            self.gateway.delete_session(sid)
        self.sessions = []
        time.sleep(1.0)  # the gateway gives freed heap back to the system once idle

    def trace_prompt(self, sid: str, index: int) -> list[int]:
        traces = self.gateway.traces(sid)
        return list(traces[min(index, len(traces) - 1)].prompt_token_ids)

    def stop(self) -> None:
        self.gateway.shutdown()


# ----------------------------------------------------------------------------- load process
async def _direct_session(
    url: str, calls: int, prompt_ids: list[int], out: list[float], stagger: float
) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        await asyncio.sleep(random.uniform(0, stagger))
        for _ in range(calls):
            body = {
                "input_ids": prompt_ids,
                "return_logprob": True,
                "sampling_params": {"max_new_tokens": 1024},
            }
            start = time.perf_counter()
            async with http.post(f"{url}/generate", data=orjson.dumps(body), headers=JSON_HEADERS) as resp:
                await resp.read()
            out.append(time.perf_counter() - start)


async def _gateway_session(
    base: str,
    calls: int,
    out: list[float],
    stagger: float,
    system: str,
    tool_text: str,
    task: str = "Add some numbers for me.",
    protocol: str = "chat",
) -> None:
    import aiohttp

    conversation = Conversation(protocol, base, system, task)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await asyncio.sleep(random.uniform(0, stagger))
        for turn in range(calls):
            body = conversation.body()
            start = time.perf_counter()
            async with http.post(conversation.url, data=orjson.dumps(body), headers=JSON_HEADERS) as resp:
                reply = orjson.loads(await resp.read())
            out.append(time.perf_counter() - start)
            conversation.add(reply, f"{turn} {tool_text}")


async def _long_first_turns(bases: list[str], long_system: str, stop_after: float, protocol: str) -> None:
    """First turns with a very long system prompt, one after the other, for ``stop_after`` s."""
    end = time.perf_counter() + stop_after
    for i, base in enumerate(bases):
        if time.perf_counter() > end:
            return
        await _gateway_session(base, 1, [], 0.0, long_system + f" {i}", "", protocol=protocol)


def _load_main(job: dict[str, Any], result: Any) -> None:
    latencies: list[float] = []
    system = text_of(job["system_tokens"], 2)
    tool_text = text_of(job["tool_tokens"], 3)

    async def run() -> None:
        stagger = job["stagger"]
        if job["mode"] == "direct":
            jobs = [
                _direct_session(
                    job["url"], job["calls"], job["prompt_ids"], latencies, stagger
                )
                for _ in range(job["sessions"])
            ]
        else:
            distinct = job["system_prompts"] == "distinct"
            jobs = [
                _gateway_session(
                    base,
                    job["calls"],
                    latencies,
                    stagger,
                    system + f" {i}" if distinct else system,
                    tool_text,
                    task=f"Add some numbers for me, task {i}.",
                    protocol=job["protocol"],
                )
                for i, base in enumerate(job["bases"])
            ]
        if job.get("long_bases"):
            long_system = text_of(job["long_tokens"], 4)
            jobs.append(_long_first_turns(job["long_bases"], long_system, job["long_for"], job["protocol"]))
        await asyncio.gather(*jobs)

    asyncio.run(run())
    result.put((latencies, time.process_time()))


def _drive(job: dict[str, Any]) -> tuple[list[float], float]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_load_main, args=(job, queue))
    proc.start()
    latencies, client_cpu = queue.get(timeout=1800)
    proc.join(60)
    return latencies, client_cpu


def _pass(
    gw: BenchGateway, engine_pid: int, job: dict[str, Any]
) -> tuple[list[float], dict[str, float]]:
    """One load pass; latencies and CPU seconds per process."""
    before = {"gateway": gw.cpu(), "engine": cpu_seconds(engine_pid)}
    latencies, client_cpu = _drive(job)
    cpu = {
        "gateway": gw.cpu() - before["gateway"],
        "engine": cpu_seconds(engine_pid) - before["engine"],
        "client": client_cpu,
    }
    return latencies, cpu


def bench_latency(model_dir: str, args: argparse.Namespace) -> None:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    engine = ctx.Process(
        target=_engine_main,
        args=(model_dir, args.engine_delay, args.reply_tokens, ready, stop),
    )
    engine.start()
    url = ready.get(timeout=180)
    gw = BenchGateway(model_dir, url, args.processes)
    load = {
        "calls": args.calls,
        "system_tokens": args.system_tokens,
        "tool_tokens": args.tool_tokens,
        "system_prompts": args.system_prompts,
    }
    try:
        for protocol in args.protocols:
            load["protocol"] = protocol
            warm = gw.create_sessions(f"warm-{protocol}", 2)
            _drive({**load, "mode": "gateway", "bases": warm, "calls": 2, "stagger": 0.0})
            gw.delete_all()
            gw.stats()
            for n in args.sessions:
                _measure(gw, engine.pid, url, n, args, load)
        load["protocol"] = args.protocols[0]
        _measure_long_prompt(gw, engine.pid, min(args.sessions), args, load)
    finally:
        gw.stop()
        stop.set()
        engine.join(30)


def bench_throughput(model_dir: str, args: argparse.Namespace) -> None:
    """Calls per second at saturation for each pool size: an engine that answers at once,
    ``min(--sessions)`` sessions of ``--calls`` back-to-back tool turns from ``--clients`` load
    processes."""
    from concurrent.futures import ThreadPoolExecutor

    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    engine = ctx.Process(target=_engine_main, args=(model_dir, 0.0, args.reply_tokens, ready, stop))
    engine.start()
    url = ready.get(timeout=180)
    n = min(args.sessions)
    load = {
        "mode": "gateway",
        "calls": args.calls,
        "stagger": 0.0,
        "system_tokens": args.system_tokens,
        "tool_tokens": args.tool_tokens,
        "system_prompts": args.system_prompts,
        "protocol": args.protocols[0],
    }
    try:
        for processes in args.throughput_processes:
            gw = BenchGateway(model_dir, url, processes)
            try:
                _drive({**load, "bases": gw.create_sessions("warm", 2 * processes), "calls": 2})
                gw.delete_all()
                for repeat in range(args.repeats):
                    bases = gw.create_sessions(f"t{processes}r{repeat}", n)
                    slices = [bases[i :: args.clients] for i in range(args.clients)]
                    cpu_before, started = gw.cpu(), time.perf_counter()
                    with ThreadPoolExecutor(args.clients) as pool:
                        done = list(pool.map(lambda part: _drive({**load, "bases": part}), slices))
                    wall = time.perf_counter() - started
                    calls = sum(len(latencies) for latencies, _ in done)
                    tags = {"processes": processes, "sessions": n, "repeat": repeat}
                    emit("throughput_calls_per_s", calls / wall, "calls/s", **tags)
                    cpu_ms = (gw.cpu() - cpu_before) * 1000 / calls
                    emit("throughput_gateway_cpu_per_call", cpu_ms, "ms", **tags)
                    gw.delete_all()
            finally:
                gw.stop()
    finally:
        stop.set()
        engine.join(30)


def _first_turn_cpu(gw: BenchGateway, engine_pid: int, n: int, args: argparse.Namespace, load: dict) -> float:
    """Gateway CPU seconds per first turn: n sessions of one call each."""
    bases = gw.create_sessions(f"first{n}", n)
    latencies, cpu = _pass(
        gw, engine_pid, {**load, "mode": "gateway", "bases": bases, "calls": 1, "stagger": args.engine_delay}
    )
    gw.delete_all()
    gw.stats()  # its pauses are not the measured pass's
    return cpu["gateway"] / max(1, len(latencies))


def _measure(
    gw: BenchGateway,
    engine_pid: int,
    url: str,
    n: int,
    args: argparse.Namespace,
    load: dict,
) -> None:
    """``args.repeats`` gateway passes, each followed by a direct pass; latency figures from
    the pooled samples (one pass's p99 moves by several ms from run to run), with each
    repeat's added latency beside them."""
    first_cpu = _first_turn_cpu(gw, engine_pid, n, args, load)
    through: list[float] = []
    direct: list[float] = []
    cpu = {"gateway": 0.0, "engine": 0.0, "client": 0.0}
    added: list[tuple[float, float]] = []
    per_pass: list[dict[str, Any]] = []  # /admin/stats after each pass (GC; memory after the first)
    rss = {"before": gw.rss()}
    for repeat in range(args.repeats):
        bases = gw.create_sessions(f"s{n}r{repeat}", n)
        gw.stats()  # the pauses counted are the pass's (not the idle collection after a delete)
        ours, spent = _pass(
            gw, engine_pid, {**load, "mode": "gateway", "bases": bases, "stagger": args.engine_delay}
        )
        for process, seconds in spent.items():
            cpu[process] += seconds
        per_pass.append(gw.stats(deep=repeat == 0))  # memory: the first pass's (the deep walk is slow)
        if repeat == 0:
            rss["held"] = gw.rss()
            prompt_ids = gw.trace_prompt(f"s{n}r0-1", args.calls // 2)
        gw.delete_all()
        rss.setdefault("after", gw.rss())
        theirs, _ = _drive(
            {
                **load,
                "mode": "direct",
                "url": url,
                "sessions": n,
                "prompt_ids": prompt_ids,
                "stagger": args.engine_delay,
            }
        )
        through += ours
        direct += theirs
        added.append((shift_ms(ours, theirs, 50), shift_ms(ours, theirs, 99)))
    calls = len(through)
    tag = {"sessions": n, "protocol": load["protocol"]}
    emit("calls", calls, "calls", repeats=args.repeats, **tag)
    emit("direct_p50", percentile(direct, 50) * 1e3, "ms", **tag)
    emit("direct_p99", percentile(direct, 99) * 1e3, "ms", **tag)
    emit("gateway_p50", percentile(through, 50) * 1e3, "ms", **tag)
    emit("gateway_p99", percentile(through, 99) * 1e3, "ms", **tag)
    emit("added_p50", shift_ms(through, direct, 50), "ms", runs=[round(a[0], 3) for a in added], **tag)
    emit("added_p99", shift_ms(through, direct, 99), "ms", runs=[round(a[1], 3) for a in added], **tag)
    for process, seconds in cpu.items():
        emit(f"{process}_cpu_per_call", seconds / calls * 1e3, "ms", **tag)
    later = calls - n * args.repeats  # every session's first turn is a full render; the others extend it
    emit("gateway_cpu_per_first_turn", first_cpu * 1e3, "ms", **tag)
    later_cpu = cpu["gateway"] - n * args.repeats * first_cpu
    emit("gateway_cpu_per_later_turn", later_cpu / max(1, later) * 1e3, "ms", **tag)
    worst = max(per_pass, key=lambda p: p["gc_max_pause_cpu_ms"])
    emit(
        "gateway_max_gc_pause",
        worst["gc_max_pause_cpu_ms"],
        "ms CPU",
        collections=sum(p["gc_collections"] for p in per_pass),
        generation=worst["gc_max_pause_generation"],
        freed=worst["gc_max_pause_collected"],
        tracked_after=worst["gc_tracked_objects"],
        **tag,
    )
    emit("gateway_max_gc_pause_wall", max(p["gc_max_pause_wall_ms"] for p in per_pass), "ms", **tag)
    held = per_pass[0]["held_tokens"]
    emit("held_tokens", held, "tokens", **tag)
    emit("bytes_per_held_token", per_pass[0]["session_bytes"] / max(1, held), "bytes", **tag)
    emit("rss_growth_per_held_token", (rss["held"] - rss["before"]) / max(1, held), "bytes", **tag)
    emit("gateway_rss_before", rss["before"] / 2**20, "MiB", **tag)
    emit("gateway_rss_held", rss["held"] / 2**20, "MiB", **tag)
    emit("gateway_rss_after_delete", rss["after"] / 2**20, "MiB", **tag)


def _measure_long_prompt(
    gw: BenchGateway, engine_pid: int, n: int, args: argparse.Namespace, load: dict
) -> None:
    """The same load twice per repeat, the second time with long first turns rendering
    meanwhile; p99 of the pooled samples of each kind."""
    job = {**load, "mode": "gateway", "stagger": args.engine_delay}
    quiet: list[float] = []
    busy: list[float] = []
    shifts = []
    for repeat in range(args.repeats):
        alone, _ = _pass(gw, engine_pid, {**job, "bases": gw.create_sessions(f"quiet{repeat}", n)})
        gw.delete_all()
        longs = gw.create_sessions(f"long{repeat}", 64)
        beside, _ = _pass(
            gw,
            engine_pid,
            {
                **job,
                "bases": gw.create_sessions(f"busy{repeat}", n),
                "long_bases": longs,
                "long_tokens": args.long_prompt_tokens,
                "long_for": args.calls * args.engine_delay,
            },
        )
        gw.delete_all()
        quiet += alone
        busy += beside
        shifts.append(round(shift_ms(beside, alone, 99), 3))
    tag = {"sessions": n, "long_prompt_tokens": args.long_prompt_tokens, "protocol": load["protocol"]}
    emit("p99_without_long_prompts", percentile(quiet, 99) * 1e3, "ms", **tag)
    emit("p99_with_long_prompts", percentile(busy, 99) * 1e3, "ms", **tag)
    emit("long_prompt_p99_shift", shift_ms(busy, quiet, 99), "ms", runs=shifts, **tag)


# ----------------------------------------------------------------------------- prompt building
def bench_prompt(model_dir: str, turns: int, repeats: int = 30) -> dict[str, float]:
    from agentcore_slime.gateway.conversation import ChainState, normalize_messages, tools_key
    from agentcore_slime.gateway.family import choose_renderer, load_tokenizer
    from agentcore_slime.gateway.rendering import PromptBuilder

    tok = load_tokenizer(model_dir)
    renderer, choice = choose_renderer(
        model_dir, tok, "auto", tool_call_parser="qwen", reasoning_parser=None
    )
    builder = PromptBuilder(renderer, tok, choice.family)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Add some numbers for me."}
    ]
    chain = None
    per_turn: dict[int, float] = {}
    for turn in range(1, turns + 1):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            normalized = normalize_messages(messages)
            prompt = builder.build(normalized, TOOLS, chain, True)
            samples.append(time.perf_counter() - start)
        assert prompt.token_mode == ("rendered" if turn == 1 else "bridged"), (
            prompt.chain_break
        )
        per_turn[turn] = statistics.median(samples) * 1e3
        args = {"a": turn, "b": turn + 1}
        text = f"<tool_call>\n{json.dumps({'name': 'add', 'arguments': args})}\n</tool_call>"
        completion = [
            *tok.encode(text, add_special_tokens=False),
            tok.convert_tokens_to_ids("<|im_end|>"),
        ]
        reply = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": "add", "arguments": json.dumps(args)},
                }
            ],
        }
        chain = ChainState(
            array("i", [*prompt.token_ids, *completion]),
            len(prompt.token_ids),
            normalized,
            reply,
            tools_key(TOOLS),
        )
        messages = [
            *messages,
            reply,
            {
                "role": "tool",
                "tool_call_id": f"call_{turn}",
                "content": str(2 * turn + 1),
            },
        ]
    report = {
        f"turn_{t}_ms": per_turn[t]
        for t in sorted({1, 2, 8, 16, 32, turns})
        if t in per_turn
    }
    report["prompt_tokens_last_turn"] = float(len(prompt.token_ids))
    report["ratio_last_over_first"] = per_turn[turns] / per_turn[1]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sessions",
        default="256,1024",
        help="comma-separated concurrent session counts",
    )
    parser.add_argument(
        "--calls", type=int, default=8, help="sequential tool turns per session"
    )
    parser.add_argument(
        "--engine-delay", type=float, default=2.0, help="seconds the engine 'generates'"
    )
    parser.add_argument(
        "--system-tokens", type=int, default=8000, help="first turn's system prompt"
    )
    parser.add_argument("--tool-tokens", type=int, default=200, help="each tool result")
    parser.add_argument(
        "--reply-tokens", type=int, default=200, help="text before each tool call"
    )
    parser.add_argument(
        "--system-prompts",
        choices=("shared", "distinct"),
        default="shared",
        help="one system prompt for every session (one agent), or a different one each "
        "(first turns cannot reuse each other's encoding)",
    )
    parser.add_argument("--long-prompt-tokens", type=int, default=32000)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="load passes per figure (latency percentiles are taken over all of them)",
    )
    parser.add_argument("--turns", type=int, default=64)
    parser.add_argument("--part", choices=("all", "latency", "prompt", "throughput"), default="all")
    parser.add_argument("--processes", type=int, default=1, help="gateway processes (GATEWAY_PROCESSES)")
    parser.add_argument(
        "--throughput-processes", default="1,2", help="comma-separated pool sizes for --part throughput"
    )
    parser.add_argument("--clients", type=int, default=2, help="load processes for --part throughput")
    parser.add_argument(
        "--protocol",
        default="chat",
        help=f"comma-separated protocols the sessions speak, measured in turn: {', '.join(PROTOCOLS)}",
    )
    args = parser.parse_args(argv)
    args.protocols = [p.strip() for p in args.protocol.split(",") if p.strip()]
    unknown = [p for p in args.protocols if p not in PROTOCOLS]
    if unknown or not args.protocols:
        parser.error(f"--protocol {args.protocol!r}: each must be one of {', '.join(PROTOCOLS)}")
    try:
        args.sessions = [int(n) for n in args.sessions.split(",")]
    except ValueError:
        parser.error("--sessions must be comma-separated integers, e.g. 256,1024")
    if min(args.sessions) < 2 or args.calls < 2 or args.turns < 2:
        parser.error("--sessions, --calls and --turns must be >= 2")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    try:
        args.throughput_processes = [int(n) for n in args.throughput_processes.split(",")]
    except ValueError:
        parser.error("--throughput-processes must be comma-separated integers, e.g. 1,2,4")
    if args.processes < 1 or args.clients < 1 or min(args.throughput_processes) < 1:
        parser.error("--processes, --clients and --throughput-processes must be >= 1")

    from fakes.toy_tokenizer import build_toy_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_toy_tokenizer(Path(tmp) / "toy"))
        if args.part in ("all", "prompt"):
            for key, value in bench_prompt(model_dir, args.turns).items():
                emit(f"prompt_{key}", value, "ms" if key.endswith("_ms") else "")
        if args.part in ("all", "latency"):
            bench_latency(model_dir, args)
        if args.part == "throughput":
            bench_throughput(model_dir, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
