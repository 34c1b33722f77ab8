"""slime's rollout function: run agent episodes on AgentCore and return training Samples.

slime loads ``agentcore_slime.rollout.generate_rollout`` (``--rollout-function-path``)
and calls it once per step inside its rollout actor, a long-lived process without a
GPU. For every Sample of the step (one agent episode each) it creates a gateway
session, starts the agent with the ``_rollout`` config, waits for the agent's reward
in S3, merges the session's token traces into Samples and deletes the session.

Everything that lives across calls (config, gateway, boto3 clients, thread pool,
event loop, eval dataset cache) is kept in one :class:`Runtime`, created lazily at
the first call by the module's only state holder. Tests swap the gateway factory
(``_STATE.gateway_factory``) for a stand-in with the same three session methods.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agentcore_slime._datasets import EvalRow, EvalSpec, eval_specs, load_rows
from agentcore_slime._padding import dp_layout, pad_for_dp
from agentcore_slime._samples import KIND_FAILED, KIND_PADDING, ShimRecord, zero_gradient_sample
from agentcore_slime.config import ConfigError, ToolkitConfig, check_slime_args, load_config
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.launcher import EpisodeRequest, Launcher, make_launcher, new_session_id
from agentcore_slime.traces import merge_traces_to_samples

if TYPE_CHECKING:
    from agentcore_slime.gateway import GatewayConfig

logger = logging.getLogger(__name__)
T = TypeVar("T")


class GatewayLike(Protocol):
    """The part of ``agentcore_slime.gateway.Gateway`` the rollout uses."""

    def create_session(self, session_id: str, sampling_params: dict[str, Any]) -> str: ...

    def traces(self, session_id: str) -> list[CallTrace]: ...

    def delete_session(self, session_id: str) -> None: ...

    def shutdown(self) -> None: ...


GatewayFactory = Callable[[ToolkitConfig, Any], GatewayLike]
LauncherFactory = Callable[[ToolkitConfig, Executor], Launcher]


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

    return GatewayConfig(
        model_dir=str(model_dir),
        model_id=config.model_id,
        renderer_family=config.renderer_family,
        cumulative_token_mode=config.cumulative_token_mode,
        tool_call_parser=config.sglang_tool_call_parser,
        reasoning_parser=config.sglang_reasoning_parser,
        host=config.gateway_host or getattr(args, "sglang_router_ip", None),
        port=config.gateway_port,
        log_level=config.gateway_log_level,
        context_length=getattr(args, "sglang_context_length", None),
    )


def default_gateway_factory(config: ToolkitConfig, args: Any) -> GatewayLike:
    """Start the trace-capturing gateway in front of slime's SGLang router.

    :param config: the rollout settings.
    :param args: slime's args (``hf_checkpoint``, router address, context length).
    """
    settings = gateway_config(config, args)
    engine_url = _engine_url(args)
    from agentcore_slime.gateway import Gateway

    gateway = Gateway(settings)
    gateway.start(engine_url)
    return gateway


class Runtime:
    """What lives across rollout calls: config, gateway, launcher, thread pool, event loop.

    :param config: validated rollout settings.
    :param gateway: the gateway (or a stand-in with the same session methods).
    :param launcher_factory: builds the launcher from the config and the thread pool.
    """

    def __init__(
        self, config: ToolkitConfig, gateway: GatewayLike, launcher_factory: LauncherFactory
    ) -> None:
        self.config = config
        self.gateway = gateway
        self.executor = ThreadPoolExecutor(
            max_workers=config.max_pool_connections, thread_name_prefix="agentcore-io"
        )
        self.launcher = launcher_factory(config, self.executor)
        self.eval_cache: dict[tuple[Any, ...], list[EvalRow]] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentcore-rollout", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the runtime's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (gateway, file I/O) in the bounded thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _drain(self) -> None:
        await self.launcher.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Close the launcher, cancel leftover tasks, stop the loop and the pool, shut the gateway down."""
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
        self.launcher_factory: LauncherFactory = make_launcher
        self._lock = threading.Lock()

    def get(self, args: Any) -> Runtime:
        """The runtime, created (config validated, gateway started) at the first call."""
        with self._lock:
            if self.runtime is None:
                config = load_config(args)
                check_slime_args(args)
                gateway = self.gateway_factory(config, args)
                try:
                    self.runtime = Runtime(config, gateway, self.launcher_factory)
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


@dataclass
class _Episode:
    template: Any
    slot: int
    rollout_id: int
    input_id: str
    sampling: dict[str, Any]
    session_id: str = field(default_factory=new_session_id)


@dataclass
class _Result:
    episode: _Episode
    samples: list[Any]
    reward: float | None
    reason: str | None
    traces: list[CallTrace]

    @property
    def ok(self) -> bool:
        return self.reason is None


def _failed(episode: _Episode, reason: str, traces: list[CallTrace] | None = None) -> _Result:
    template = episode.template
    cls = type(template)
    record = ShimRecord(kind=KIND_FAILED, session_id=episode.session_id, reason=reason)
    sample = zero_gradient_sample(
        cls, template=template, record=record, rollout_id=episode.rollout_id, status=cls.Status.FAILED
    )
    return _Result(episode, [sample], None, reason, traces or [])


async def _run_episode(runtime: Runtime, episode: _Episode, slots: asyncio.Semaphore) -> _Result:
    metadata = episode.template.metadata
    if not isinstance(metadata, dict):
        return _failed(
            episode,
            f"row metadata is {type(metadata).__name__}, not a dict "
            "(each JSONL row's 'metadata' must be an object: it is the agent's payload)",
        )
    sid = episode.session_id
    async with slots:
        try:
            base_url = await runtime.call(runtime.gateway.create_session, sid, dict(episode.sampling))
        except Exception as exc:
            return _failed(episode, f"gateway could not create the session: {type(exc).__name__}: {exc}")
        traces: list[CallTrace] = []
        try:
            request = EpisodeRequest(metadata, sid, episode.input_id, base_url, episode.sampling)
            outcome = await runtime.launcher.run_episode(request)
            traces = list(await runtime.call(runtime.gateway.traces, sid))
        except Exception as exc:
            return _failed(episode, f"reading the session's traces failed: {type(exc).__name__}: {exc}")
        finally:
            try:
                await runtime.call(runtime.gateway.delete_session, sid)
            except Exception as exc:
                logger.debug("deleting gateway session %s failed: %s", sid, exc)
    if not outcome.ok or outcome.reward is None:
        return _failed(episode, outcome.reason or "no reward", traces)
    merge = partial(
        merge_traces_to_samples,
        traces,
        episode.template,
        session_id=sid,
        reward=outcome.reward,
        rollout_id=episode.rollout_id,
    )
    samples = await runtime.call(merge)  # CPU work off the loop, so polling keeps its pace
    if not samples:
        return _failed(episode, f"no usable traces ({len(traces)} calls recorded by the gateway)", traces)
    return _Result(episode, samples, outcome.reward, None, traces)


async def _run_all(runtime: Runtime, episodes: list[_Episode]) -> list[_Result]:
    slots = asyncio.Semaphore(runtime.config.max_concurrent)
    return list(await asyncio.gather(*(_run_episode(runtime, e, slots) for e in episodes)))


def _input_id(kind: str, rollout_id: int, name: str = "") -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    return "-".join(p for p in (kind, str(rollout_id), safe, uuid.uuid4().hex[:8]) if p)


def _train_sampling(args: Any) -> dict[str, Any]:
    sampling = {
        "temperature": getattr(args, "rollout_temperature", None),
        "top_p": getattr(args, "rollout_top_p", None),
        "top_k": getattr(args, "rollout_top_k", None),
        "max_new_tokens": getattr(args, "rollout_max_response_len", None),
    }
    return {k: v for k, v in sampling.items() if v is not None}


def _log_summary(kind: str, rollout_id: int, results: list[_Result], sequences: int, started: float) -> None:
    for result in results:
        if not result.ok:
            logger.info(
                "episode failed: session %s (group %s): %s",
                result.episode.session_id,
                result.episode.template.group_index,
                result.reason,
            )
    rewards = [r.reward for r in results if r.reward is not None]
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    logger.info(
        "%s rollout %d: %d episodes, %d succeeded, %d failed, %d sequences, mean raw reward %.4f, %.1fs",
        kind,
        rollout_id,
        len(results),
        len(rewards),
        len(results) - len(rewards),
        sequences,
        mean,
        time.monotonic() - started,
    )


def _trace_records(rollout_id: int, kind: str, results: list[_Result]) -> list[str]:
    lines = []
    for result in results:
        records = [ShimRecord.of(s) for s in result.samples]
        segment_of = {call: record.segment for record in records for call in record.calls}
        for number, trace in enumerate(result.traces):
            record = {
                "rollout_id": rollout_id,
                "kind": kind,
                "session_id": result.episode.session_id,
                "group_index": result.episode.template.group_index,
                "index": result.episode.template.index,
                "call": number,
                "segment": segment_of.get(number),
                "token_mode": trace.token_mode,
                "prompt_tokens": len(trace.prompt_token_ids),
                "completion_tokens": len(trace.completion_token_ids),
                "finish_reason": trace.finish_reason,
                "reward": result.reward,
                "failure": result.reason,
                "messages": trace.messages,
                "response_message": trace.response_message,
            }
            lines.append(json.dumps(record, default=str) + "\n")
    return lines


def _append_trace_log(path: str, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.writelines(lines)


async def _write_trace_log(runtime: Runtime, rollout_id: int, kind: str, results: list[_Result]) -> None:
    path = os.environ.get("TRACE_LOG")
    if path:
        await runtime.call(_append_trace_log, path, _trace_records(rollout_id, kind, results))


def _padding_maker(sample: Any, rollout_id: int) -> Any:
    cls = type(sample)
    record = ShimRecord(kind=KIND_PADDING)
    return zero_gradient_sample(
        cls, template=sample, record=record, rollout_id=rollout_id, status=cls.Status.FAILED
    )


def _batch_size(args: Any) -> int:
    value = getattr(args, "rollout_batch_size", None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"rollout_batch_size: {value!r} is not a positive integer (pass --rollout-batch-size N)"
        )
    return value


async def _train_step(runtime: Runtime, args: Any, rollout_id: int, data_source: Any) -> Any:
    from slime.rollout.base_types import RolloutFnTrainOutput

    started = time.monotonic()
    groups = await runtime.call(data_source.get_samples, _batch_size(args))
    input_id, sampling = _input_id("train", rollout_id), _train_sampling(args)
    members = [(slot, sample) for slot, group in enumerate(groups) for sample in group]
    episodes = [
        _Episode(sample, slot, number, input_id, sampling) for number, (slot, sample) in enumerate(members)
    ]
    results = await _run_all(runtime, episodes)
    await _write_trace_log(runtime, rollout_id, "train", results)
    output: list[list[Any]] = [[] for _ in groups]
    for result in results:
        output[result.episode.slot].extend(result.samples)
    sequences = sum(len(r.samples) for r in results if r.ok)
    _log_summary("train", rollout_id, results, sequences, started)
    if not any(r.ok for r in results):
        reasons = sorted({str(r.reason) for r in results})
        raise RuntimeError(
            f"rollout {rollout_id}: all {len(results)} episodes failed; not training on nothing. "
            f"Reasons: {'; '.join(reasons[:5])}"
        )
    padding = pad_for_dp(output, dp_layout(args), _padding_maker, next_rollout_id=len(episodes))
    metrics = {
        "agentcore/episodes": len(results),
        "agentcore/failed_episodes": sum(not r.ok for r in results),
        "agentcore/sequences": sequences,
        "agentcore/padding_samples": padding,
    }
    return RolloutFnTrainOutput(samples=output, metrics=metrics)


async def _eval_rows(runtime: Runtime, spec: EvalSpec) -> list[EvalRow]:
    rows = runtime.eval_cache.get(spec.cache_key)
    if rows is None:
        rows = await runtime.call(load_rows, spec)
        runtime.eval_cache[spec.cache_key] = rows
    return rows


async def _eval_step(runtime: Runtime, args: Any, rollout_id: int) -> Any:
    from slime.rollout.base_types import RolloutFnEvalOutput
    from slime.utils.types import Sample

    started = time.monotonic()
    specs = eval_specs(args)
    episodes: list[_Episode] = []
    for slot, spec in enumerate(specs):
        input_id = _input_id("eval", rollout_id, spec.name)
        spec_rows = await _eval_rows(runtime, spec)
        if not spec_rows:
            # slime logs eval/<name> = sum(rewards) / len(rewards) (slime/ray/rollout.py:1267 at
            # fa3c990): an empty dataset would crash the run with ZeroDivisionError after the fact.
            raise ValueError(
                f"eval dataset {spec.name!r} ({spec.path}) has no rows "
                "(check the file, its @[start:end] slice and --eval-prompt-data / --eval-config)"
            )
        for number, row in enumerate(spec_rows):
            for repeat in range(spec.n_samples):
                template = Sample(
                    group_index=number,
                    index=number * spec.n_samples + repeat,
                    prompt=row.prompt,
                    label=row.label,
                    metadata=row.metadata,
                )
                episodes.append(_Episode(template, slot, len(episodes), input_id, spec.sampling))
    results = await _run_all(runtime, episodes)
    await _write_trace_log(runtime, rollout_id, "eval", results)
    data: dict[str, dict[str, Any]] = {}
    metrics: dict[str, Any] = {}
    for slot, spec in enumerate(specs):
        mine = [r for r in results if r.episode.slot == slot]
        rewards = [r.reward if r.reward is not None else 0.0 for r in mine]
        last = [r.samples[-1] for r in mine]
        data[spec.name] = {
            "rewards": rewards,
            "truncated": [s.status == Sample.Status.TRUNCATED for s in last],
            "samples": last,
        }
        count = len(rewards)
        metrics[f"eval/{spec.name}/accuracy"] = sum(r > 0 for r in rewards) / count if count else 0.0
        metrics[f"eval/{spec.name}/mean_reward"] = sum(rewards) / count if count else 0.0
        metrics[f"eval/{spec.name}/count"] = count
        metrics[f"eval/{spec.name}/failed"] = sum(not r.ok for r in mine)
    _log_summary("eval", rollout_id, results, sum(len(r.samples) for r in results if r.ok), started)
    return RolloutFnEvalOutput(data=data, metrics=metrics)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout function (``--rollout-function-path agentcore_slime.rollout.generate_rollout``).

    :param args: slime's args, including the toolkit.yaml keys (``--custom-config-path``).
    :param rollout_id: the step number.
    :param data_source: slime's data source (``get_samples(n)`` returns prompt groups).
    :param evaluation: run the eval datasets instead of a training step.
    :returns: ``RolloutFnTrainOutput`` (one list of Samples per group, in group order,
        padded for slime's data-parallel split) or ``RolloutFnEvalOutput``.
    :raises ConfigError: at the first call, when a setting is missing or invalid.
    :raises RuntimeError: when every episode of a training step failed.
    """
    runtime = _STATE.get(args)
    if evaluation:
        return runtime.run(_eval_step(runtime, args, rollout_id))
    return runtime.run(_train_step(runtime, args, rollout_id, data_source))
