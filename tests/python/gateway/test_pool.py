"""A pool of gateway processes (gateway/pool.py, ``GATEWAY_PROCESSES``): each session lives on one
child, named by its base URL; every guarantee of one child holds per child; a dead child fails
only its own sessions. Real child processes (``python -m agentcore_slime.gateway``) over loopback
HTTP in front of the scripted SGLang stand-in, the toy tokenizer."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway import GatewayConfig, GatewayProcessDied
from agentcore_slime.gateway.pool import GatewayPool
from agentcore_slime.settings.config import gateway_pool_size as pool_size
from fakes.ports import free_port_run
from fakes.sglang_server import FakeSGLang, text_policy
from gateway_helpers import admin_client


@pytest.fixture
def engine(tokenizer: Any) -> Iterator[FakeSGLang]:
    with FakeSGLang(text_policy(tokenizer, lambda text: f"echo {len(text)}"), tokenizer=tokenizer) as fake:
        yield fake


@pytest.fixture
def start(model_dir: Path, engine: FakeSGLang) -> Iterator[Callable[..., GatewayPool]]:
    """``start(processes, **config_overrides)`` -> a serving pool (shut down after the test)."""
    started: list[GatewayPool] = []

    def make(processes: int, **overrides: Any) -> GatewayPool:
        config = {"host": "127.0.0.1", "port": 0, "engine_retry_backoff": 0.01, **overrides}
        pool = GatewayPool(GatewayConfig(str(model_dir), **config), processes, ready_timeout=60)
        started.append(pool)
        pool.start(engine.url)
        return pool

    yield make
    for pool in started:
        pool.shutdown()


def _call(base_url: str, text: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=30, trust_env=False)


def test_sessions_spread_over_the_children_and_each_call_is_traced_on_its_own(
    start: Callable[..., GatewayPool], engine: FakeSGLang
) -> None:
    port = free_port_run(2)
    pool = start(2, port=port)  # child i listens on GATEWAY_PORT + i
    assert pool.urls == [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
    bases = {f"s{i}": pool.create_session(f"s{i}") for i in range(8)}
    by_child = [[sid for sid, base in bases.items() if base.startswith(url)] for url in pool.urls]
    assert [len(sids) for sids in by_child] == [4, 4] and pool.sessions_per_process() == [4, 4]
    for sid, base in bases.items():
        assert _call(base, f"hello from {sid}").status_code == 200
    for sid in bases:
        [trace] = pool.traces(sid)
        assert trace.session_id == sid
        assert trace.messages == [{"role": "user", "content": f"hello from {sid}"}]
        assert trace.prompt_token_ids in [r["input_ids"] for r in engine.requests]
    stats = pool.stats()
    assert stats["sessions"] == 8 and [child["sessions"] for child in stats["processes"]] == [4, 4]
    for sid in list(bases)[:3]:
        assert len(pool.finish_session(sid)) == 1
    pool.delete_session("s3")
    assert sum(pool.sessions_per_process()) == 4
    with pytest.raises(ValueError, match="exists"):  # a second create of a live session fails ...
        pool.create_session("s4")
    assert len(pool.traces("s4")) == 1 and sum(pool.sessions_per_process()) == 4  # ... and keeps it
    with pytest.raises(KeyError):
        pool.traces("never-created")
    assert pool.create_session("new").startswith(pool.urls[0])  # the child with fewest sessions


def test_each_child_has_its_own_admin_secret_and_its_own_caps(start: Callable[..., GatewayPool]) -> None:
    pool = start(2, max_calls_per_episode=1)
    first, second = pool.members
    assert first.admin_headers != second.admin_headers
    assert first.admin_socket != second.admin_socket
    with admin_client(second, secret=False) as client:  # one child's secret opens no other child
        denied = client.get("/admin/stats", headers=first.admin_headers)
    assert denied.status_code == 403 and "wrong admin secret" in denied.text
    for sid in ("a", "b"):
        base = pool.create_session(sid)
        assert _call(base, "first").status_code == 200
        capped = _call(base, "second")  # past its cap: the final reply, not sampled nor traced
        assert capped.status_code == 200 and len(pool.traces(sid)) == 1


def test_a_dead_child_fails_only_its_sessions_and_is_restarted(start: Callable[..., GatewayPool]) -> None:
    pool = start(2)
    bases = {f"s{i}": pool.create_session(f"s{i}") for i in range(4)}
    victim = pool.members[0]
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    deadline = time.monotonic() + 120  # a ceiling only a hang reaches
    dead = [sid for sid, base in bases.items() if base.startswith(pool.urls[0])]
    alive = [sid for sid in bases if sid not in dead]
    while time.monotonic() < deadline:
        try:
            pool.traces(dead[0])
        except GatewayProcessDied:
            break
        time.sleep(0.1)
    for sid in dead:
        with pytest.raises(GatewayProcessDied, match="killed by SIGKILL"):
            pool.traces(sid)
    for sid in alive:
        assert _call(bases[sid], "still here").status_code == 200 and len(pool.traces(sid)) == 1
    for sid in dead:  # their episodes end (the rollout deletes what it could not finish)
        with pytest.raises(GatewayProcessDied):
            pool.delete_session(sid)
    # the dead child holds the fewest sessions now, yet new ones go to the live child only
    for i in range(3):
        assert pool.create_session(f"new{i}").startswith(pool.urls[1])
    assert pool.ensure_running() is True
    base = pool.create_session("after")
    assert _call(base, "again").status_code == 200


def test_pool_size_auto_follows_cores_and_concurrency() -> None:
    assert pool_size(3, max_concurrent=10, cpus=2) == 3  # an explicit setting wins
    assert pool_size(0, max_concurrent=1024, cpus=2) == 1  # this 2-core machine: one process
    assert pool_size(0, max_concurrent=100, cpus=192) == 1  # 100 episodes: one process serves them
    assert pool_size(0, max_concurrent=512, cpus=192) == 4
    assert pool_size(0, max_concurrent=4096, cpus=192) == 8  # at most 8
    assert pool_size(0, max_concurrent=4096, cpus=24) == 3  # one per 8 cores
