"""The rollout's lifecycle: what lives across slime's calls, created at the first one.

Everything that lives across calls (config, gateway, boto3 clients, thread pool, event loop,
eval dataset cache) is kept in one :class:`Runtime`, created lazily at the first call by the
module's only state holder (:data:`_STATE`). The gateway runs in child processes
(:class:`~agentcore_slime.gateway.pool.GatewayPool` of ``GATEWAY_PROCESSES``
:class:`~agentcore_slime.gateway.GatewayProcess`); if one dies, the episodes of its sessions
fail with ``gateway_error`` and the next step starts a new one. Tests swap the gateway factory
(``_STATE.gateway_factory``) for a stand-in with the same session methods.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agentcore_slime.cost import Rates
from agentcore_slime.datasets import EvalRow
from agentcore_slime.episodes import EpisodeRunner, make_runner
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.observe import RunLog
from agentcore_slime.rollout.costs import EpisodeCharge, Ledger
from agentcore_slime.rollout.step_stats import StepStats
from agentcore_slime.settings.config import (
    ConfigError,
    ToolkitConfig,
    check_slime_args,
    load_config,
    sampling_settings,
)

if TYPE_CHECKING:
    from agentcore_slime.gateway import GatewayConfig

T = TypeVar("T")
logger = logging.getLogger(__name__)


class GatewayLike(Protocol):
    """The part of ``agentcore_slime.gateway.GatewayProcess`` the rollout uses.

    A gateway may also have ``ensure_running()`` (restart a dead gateway process): the rollout
    calls it, when there, at the start of every step. It may also have ``submit_create`` and
    ``submit_finish`` (``GatewayProcess``: batched operations returning futures; finish = traces
    and delete in one): an episode then awaits them instead of a pool thread.
    """

    def create_session(self, session_id: str, sampling_params: dict[str, Any]) -> str: ...

    def traces(self, session_id: str) -> list[CallTrace]: ...

    def delete_session(self, session_id: str) -> None: ...

    def abort_session(self, session_id: str) -> None: ...

    def shutdown(self) -> None: ...


GatewayFactory = Callable[[ToolkitConfig, Any], GatewayLike]


RunnerFactory = Callable[[ToolkitConfig, Executor], EpisodeRunner]


def _engine_url(args: Any) -> str:
    host, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
    if not host or not port:
        raise ConfigError(
            "sglang_router_ip/sglang_router_port: not set in slime's args "
            "(slime fills them in when it starts the router; pass --sglang-router-ip/--sglang-router-port "
            "when you run your own)"
        )
    host = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{host}:{port}"


def _beside_router(router_ip: str | None) -> str | None:
    """Where the gateway binds when GATEWAY_HOST is unset: beside slime's router, on its address,
    unless that is a loopback address (train.sh binds one node's engines and router to
    127.0.0.1): agents, on ACR above all, cannot reach loopback, so then every interface, with
    an address agents can reach advertised (None)."""
    from agentcore_slime.addresses import is_loopback

    return None if router_ip is not None and is_loopback(router_ip) else router_ip


def gateway_config(config: ToolkitConfig, args: Any) -> GatewayConfig:
    """The gateway's settings: toolkit.yaml's (``Key.gateway`` in the schema) plus slime's args.

    :param config: the rollout settings (gateway host/port, model id, parsers, ...).
    :param args: slime's args (``hf_checkpoint``, router address, context length).
    """
    model_dir = getattr(args, "hf_checkpoint", None)
    if not model_dir:
        raise ConfigError(
            "hf_checkpoint: not set (pass --hf-checkpoint <HF model dir>; the gateway reads its tokenizer)"
        )
    from agentcore_slime.gateway import GatewayConfig
    from agentcore_slime.gateway.engine import outage_seconds
    from agentcore_slime.rollout.routing import routing_layout

    layout = routing_layout(args)
    return GatewayConfig.from_toolkit(
        config,
        model_dir=str(model_dir),
        host=config.gateway_host or _beside_router(getattr(args, "sglang_router_ip", None)),
        context_length=getattr(args, "sglang_context_length", None),
        engine_outage_seconds=outage_seconds(args),
        routed_experts_layers=layout.layers if layout else 0,
        routed_experts_topk=layout.topk if layout else 0,
    )


def default_gateway_factory(config: ToolkitConfig, args: Any) -> GatewayLike:
    """Start the trace-capturing gateway in front of slime's SGLang router, in its own process
    (the rollout's threads do not compete with it for the GIL).

    :param config: the rollout settings.
    :param args: slime's args (``hf_checkpoint``, router address, context length).
    """
    settings = gateway_config(config, args)
    engine_url = _engine_url(args)
    from agentcore_slime.gateway.pool import GatewayPool, gateway_pool_size

    processes = gateway_pool_size(config.gateway_processes, config.max_concurrent)
    gateway = GatewayPool(settings, processes)
    gateway.start(engine_url)
    if processes > 1:
        logger.info("gateway: %d processes at %s", processes, ", ".join(gateway.urls))
    return gateway


def _ensure_gateway(gateway: GatewayLike) -> None:
    """Restart the gateway process if it died during an earlier step (stand-ins have no process)."""
    ensure_running = getattr(gateway, "ensure_running", None)
    if callable(ensure_running):
        ensure_running()


class Runtime:
    """What lives across rollout calls: config, gateway, episode runner, thread pool, event loop.

    :param config: validated rollout settings.
    :param gateway: the gateway (or a stand-in with the same session methods).
    :param runner_factory: builds the episode runner from the config and the thread pool.
    """

    def __init__(
        self,
        config: ToolkitConfig,
        gateway: GatewayLike,
        runner_factory: RunnerFactory,
        run_log: RunLog | None = None,
    ) -> None:
        self.config = config
        self.gateway = gateway
        self.run_log = run_log or RunLog(None, config.record_episodes, None)
        self.executor = ThreadPoolExecutor(
            max_workers=config.max_pool_connections, thread_name_prefix="agentcore-io"
        )
        self.runner = runner_factory(config, self.executor)
        self.eval_cache: dict[tuple[Any, ...], list[EvalRow]] = {}
        self.last_step: StepStats | None = None
        self.ledger = Ledger(Rates())  # the run's (settings, budget, carried-over spending): _State.get
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentcore-rollout", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the runtime's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def charge(self, kind: str, step: int, episodes: list[EpisodeCharge]) -> dict[str, Any]:
        """Bill one record to the run (see :class:`~.costs.Ledger`) and project the total."""
        cost = self.ledger.charge(kind, step, episodes)
        cost["projected_total_usd"] = self.ledger.projected_total(self.run_log.num_rollout)
        return cost

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (gateway, file I/O) in the bounded thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _drain(self) -> None:
        await self.runner.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Close the runner, cancel leftover tasks, stop the loop and the pool, shut the gateway down."""
        try:
            self.run(self._drain())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.gateway.shutdown()


class _State:
    """The module's one state holder: the lazily created :class:`Runtime` and its factories."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self.gateway_factory: GatewayFactory = default_gateway_factory
        self.runner_factory: RunnerFactory = make_runner
        self._lock = threading.Lock()

    def get(self, args: Any) -> Runtime:
        """The runtime, created (config validated, gateway started) at the first call."""
        with self._lock:
            if self.runtime is None:
                config = load_config(args)
                check_slime_args(args)
                sampling_settings(args, config)
                gateway = self.gateway_factory(config, args)
                try:
                    run_log = _run_log(args, config)
                    self.runtime = Runtime(config, gateway, self.runner_factory, run_log)
                    self.runtime.ledger = Ledger.for_run(config, args, str(run_log.run_dir or "") or None)
                except BaseException:
                    gateway.shutdown()
                    raise
            return self.runtime

    def reset(self) -> None:
        """Tear the runtime down (tests; process exit)."""
        with self._lock:
            runtime, self.runtime = self.runtime, None
        if runtime is not None:
            runtime.close()


_STATE = _State()
atexit.register(_STATE.reset)


def _run_log(args: Any, config: ToolkitConfig) -> RunLog:
    """Where the run's metrics and recorded episodes go: the directory of toolkit.yaml.

    bin/train renders toolkit.yaml into ``runs/<EXP_ID>/`` and passes it with
    ``--custom-config-path``, so that directory is the run directory. Without it (the rollout
    run by hand), ``TOOLKIT_RUN_DIR`` names one; with neither, only the progress line shows.
    """
    config_path = getattr(args, "custom_config_path", None)
    run_dir = os.environ.get("TOOLKIT_RUN_DIR") or None
    if config_path and os.path.isdir(os.path.dirname(os.path.abspath(str(config_path)))):
        run_dir = os.path.dirname(os.path.abspath(str(config_path)))
    num_rollout = getattr(args, "num_rollout", None)
    return RunLog(run_dir, config.record_episodes, num_rollout if isinstance(num_rollout, int) else None)
