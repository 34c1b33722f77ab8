"""slime's rollout function: run agent episodes on AgentCore and return training Samples.

slime loads ``agentcore_slime.rollout.generate_rollout`` (``--rollout-function-path``)
and calls it once per step inside its rollout actor, a long-lived process without a
GPU. For every Sample of the step (one agent episode each) it creates a gateway
session, starts the agent with the ``_rollout`` config, waits for the agent's reward
in S3, merges the session's token traces into Samples and deletes the session.

Everything that lives across calls (config, gateway, boto3 clients, thread pool,
event loop, eval dataset cache) is kept in one :class:`Runtime`, created lazily at
the first call by the module's only state holder. The gateway runs in a child process
(:class:`~agentcore_slime.gateway.GatewayProcess`); if it dies, the episodes of its sessions
fail with ``gateway_error`` and the next step starts a new one. Tests swap the gateway factory
(``_STATE.gateway_factory``) for a stand-in with the same session methods.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
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
from agentcore_slime.config import (
    ConfigError,
    ToolkitConfig,
    check_slime_args,
    load_config,
    sampling_settings,
)
from agentcore_slime.episodes import EpisodeRequest, EpisodeRunner, make_runner, new_session_id
from agentcore_slime.episodes.log_ids import redact, short_id
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.observe import CallRecord, EpisodeRecord, RunLog
from agentcore_slime.observe.records import token_counts
from agentcore_slime.sampling import SamplingOutcome, SamplingPlan, Verdict, load_function, sample_groups
from agentcore_slime.step_stats import INFRASTRUCTURE, GroupRecord, StepStats
from agentcore_slime.traces import merge_traces_to_samples

if TYPE_CHECKING:
    from agentcore_slime.gateway import GatewayConfig

logger = logging.getLogger(__name__)
T = TypeVar("T")


class GatewayLike(Protocol):
    """The part of ``agentcore_slime.gateway.GatewayProcess`` the rollout uses.

    A gateway may also have ``ensure_running()`` (restart a dead gateway process): the rollout
    calls it, when there, at the start of every step.
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
    """Start the trace-capturing gateway in front of slime's SGLang router, in its own process
    (the rollout's threads do not compete with it for the GIL).

    :param config: the rollout settings.
    :param args: slime's args (``hf_checkpoint``, router address, context length).
    """
    settings = gateway_config(config, args)
    engine_url = _engine_url(args)
    from agentcore_slime.gateway import GatewayProcess

    gateway = GatewayProcess(settings)
    gateway.start(engine_url)
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
                    self.runtime = Runtime(config, gateway, self.runner_factory, _run_log(args, config))
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


@dataclass
class _Episode:
    template: Any
    slot: int
    rollout_id: int
    input_id: str
    sampling: dict[str, Any]
    session_id: str = field(default_factory=new_session_id)
    started: float = 0.0  #: monotonic time the session started (0 = never started)
    ended: float = 0.0  #: monotonic time the session ended


@dataclass
class _Result:
    episode: _Episode
    samples: list[Any]
    reward: float | None
    reason: str | None
    traces: list[CallTrace]
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def _failed(episode: _Episode, code: str, reason: str, traces: list[CallTrace] | None = None) -> _Result:
    """A failed episode: one zero-gradient sample marked as an infrastructure failure."""
    template = episode.template
    cls = type(template)
    record = ShimRecord(
        kind=KIND_FAILED,
        session_id=episode.session_id,
        reason=reason,
        failure=code,
        failure_class=INFRASTRUCTURE,
    )
    sample = zero_gradient_sample(
        cls, template=template, record=record, rollout_id=episode.rollout_id, status=cls.Status.FAILED
    )
    return _Result(episode, [sample], None, reason, traces or [], code)


async def _end_gateway_session(runtime: Runtime, sid: str, aborted: bool) -> None:
    """Delete the gateway session; an aborted episode's in-flight engine calls are aborted first."""
    try:
        if aborted:
            await runtime.call(runtime.gateway.abort_session, sid)
        await runtime.call(runtime.gateway.delete_session, sid)
    except Exception as exc:
        logger.debug("ending gateway session %s failed: %s", short_id(sid), redact(exc, sid))


async def _run_episode(runtime: Runtime, episode: _Episode, slots: asyncio.Semaphore) -> _Result:
    """One episode end to end. Cancelling it (the tail cut) stops the runtime session, aborts
    the session's engine calls and deletes the gateway session before the cancellation propagates."""
    metadata = episode.template.metadata
    if not isinstance(metadata, dict):
        return _failed(
            episode,
            "bad_metadata",
            f"row metadata is {type(metadata).__name__}, not a dict "
            "(each JSONL row's 'metadata' must be an object: it is the agent's payload)",
        )
    sid = episode.session_id
    async with slots:
        episode.started = time.monotonic()
        try:
            base_url = await runtime.call(runtime.gateway.create_session, sid, dict(episode.sampling))
        except Exception as exc:
            return _failed(
                episode, "gateway_error", f"gateway could not create the session: {type(exc).__name__}: {exc}"
            )
        traces: list[CallTrace] = []
        aborted = False
        try:
            request = EpisodeRequest(metadata, sid, episode.input_id, base_url, episode.sampling)
            outcome = await runtime.runner.run_episode(request)
            traces = list(await runtime.call(runtime.gateway.traces, sid))
        except asyncio.CancelledError:
            aborted = True
            raise
        except Exception as exc:
            return _failed(
                episode, "gateway_error", f"reading the session's traces failed: {type(exc).__name__}: {exc}"
            )
        finally:
            await asyncio.shield(_end_gateway_session(runtime, sid, aborted))
            episode.ended = time.monotonic()
    if not outcome.ok or outcome.reward is None:
        return _failed(episode, outcome.failure or "bad_reward", outcome.reason or "no reward", traces)
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
        return _failed(
            episode, "no_traces", f"no usable traces ({len(traces)} calls recorded by the gateway)", traces
        )
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


def _episode_record(result: _Result, dataset: str = "") -> EpisodeRecord:
    """What the run directory keeps of one episode (metrics, the report's browser)."""
    episode = result.episode
    sampled, masked = token_counts(result.samples) if result.ok else (0, 0)
    return EpisodeRecord(
        session_id=episode.session_id,
        group=int(getattr(episode.template, "group_index", None) or 0),
        index=int(getattr(episode.template, "index", None) or 0),
        reward=result.reward if result.ok else None,
        failure_class=None if result.ok else INFRASTRUCTURE,
        reason=result.reason or "",
        seconds=max(0.0, episode.ended - episode.started) if episode.started else 0.0,
        calls=[CallRecord.from_trace(trace) for trace in result.traces],
        sampled_tokens=sampled,
        masked_tokens=masked,
        samples=len(result.samples) if result.ok else 0,
        dataset=dataset,
        failure="" if result.ok else (result.failure or "unknown"),
    )


async def _record_step(
    runtime: Runtime, kind: str, rollout_id: int, results: list[_Result], seconds: float, **extra: Any
) -> None:
    """metrics.jsonl, episodes/ and the progress line, written off the event loop."""
    records = [_episode_record(r, extra.get("dataset", "")) for r in results]
    await runtime.call(partial(runtime.run_log.step, kind, rollout_id, records, seconds, **extra))


def _log_failures(results: list[_Result]) -> None:
    for result in results:
        if not result.ok:
            logger.info(
                "episode failed: session %s (group %s): %s",
                short_id(result.episode.session_id),
                result.episode.template.group_index,
                redact(result.reason, result.episode.session_id),
            )


def _log_summary(kind: str, rollout_id: int, results: list[_Result], sequences: int, started: float) -> None:
    _log_failures(results)
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


@dataclass
class _Group:
    """One prompt group of a training step: its slot and its data-source samples."""

    slot: int
    templates: list[Any]


@dataclass
class _StepContext:
    """What the groups of one training step share."""

    rollout_id: int
    input_id: str
    sampling: dict[str, Any]
    slots: asyncio.Semaphore
    slot_count: int = 0


def _sampling_plan(args: Any, config: ToolkitConfig) -> SamplingPlan:
    settings = sampling_settings(args, config)
    return SamplingPlan(_batch_size(args), settings.fetch_size, settings.max_extra_groups)


def _judge(args: Any, config: ToolkitConfig, plan: SamplingPlan, dynamic_filter: Any) -> Any:
    """The verdict on a finished group: enough valid episodes, then the dynamic-sampling filter.

    Only when groups can be replaced (over-sampling or a filter) is a group with too few valid
    episodes dropped; the filter sees one sample per valid episode (its last segment), as
    slime's filters see one sample per generation.
    """
    from slime.rollout.filter_hub.base_types import call_dynamic_filter

    replaceable = plan.cuts_the_tail or dynamic_filter is not None
    excluding = config.infra_failures == "exclude"

    def judge(results: list[_Result]) -> Verdict:
        valid = [r for r in results if r.ok] if excluding else results
        if replaceable and excluding and len(valid) < min(2, len(results)):
            return False, "too_few_valid_episodes"
        if dynamic_filter is None:
            return True, None
        verdict = call_dynamic_filter(dynamic_filter, args, [r.samples[-1] for r in valid])
        return bool(verdict.keep), verdict.reason

    return judge


async def _run_group(runtime: Runtime, context: _StepContext, group: _Group) -> list[_Result]:
    episodes = []
    for template in group.templates:
        number, context.slot_count = context.slot_count, context.slot_count + 1
        episodes.append(_Episode(template, group.slot, number, context.input_id, context.sampling))
    tasks = [asyncio.create_task(_run_episode(runtime, e, context.slots)) for e in episodes]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:
        # gather gives up at the first cancelled episode; wait until every episode has
        # stopped its runtime session and ended its gateway session before the step returns
        await asyncio.wait(tasks)
        raise


def _renumber(groups: list[list[Any]]) -> int:
    """Give the returned episodes consecutive rollout ids in order (slime's split counts them)."""
    ids: dict[Any, int] = {}
    for group in groups:
        for sample in group:
            sample.rollout_id = ids.setdefault(sample.session_id, len(ids))
    return len(ids)


def _fill_from_dropped(
    outcome: SamplingOutcome[_Group, list[_Result]], target: int, stats: StepStats
) -> None:
    """When the cap stopped sampling short of the target, train the dropped groups too (zero signal)."""
    while len(outcome.kept) < target and outcome.dropped:
        outcome.kept.append(outcome.dropped.pop(0)[0])
        stats.groups_filled += 1
    if stats.groups_filled:
        logger.warning(
            "rollout %d: the cap on extra groups (MAX_EXTRA_GROUPS) was reached with %d groups kept; "
            "%d dropped groups are returned to keep the step's size",
            stats.rollout_id,
            target - stats.groups_filled,
            stats.groups_filled,
        )


async def _requeue(runtime: Runtime, data_source: Any, aborted: list[_Group], stats: StepStats) -> None:
    """``--partial-rollout``: aborted groups go back to the data source, as their original prompts
    (an agent episode cannot be resumed, so nothing of its partial run is kept)."""
    groups = [[copy.deepcopy(t) for t in g.templates] for g in aborted]
    if groups:
        await runtime.call(data_source.add_samples, groups)
        stats.groups_requeued = len(groups)


def _group_record(results: list[_Result]) -> GroupRecord:
    return GroupRecord(
        [r.reward for r in results if r.ok and r.reward is not None],
        [r.failure or "unknown" for r in results if not r.ok],
    )


async def _sample(
    runtime: Runtime, args: Any, rollout_id: int, data_source: Any, stats: StepStats
) -> list[list[_Result]]:
    plan = _sampling_plan(args, runtime.config)
    filter_path = getattr(args, "dynamic_sampling_filter_path", None)
    dynamic_filter = load_function(filter_path) if filter_path else None
    context = _StepContext(
        rollout_id,
        _input_id("train", rollout_id),
        _train_sampling(args),
        asyncio.Semaphore(runtime.config.max_concurrent),
    )

    async def fetch(count: int) -> list[_Group]:
        groups = await runtime.call(data_source.get_samples, count)
        start = stats.groups_started
        stats.groups_started += len(groups)
        return [_Group(start + n, list(g)) for n, g in enumerate(groups)]

    outcome = await sample_groups(
        plan,
        fetch,
        partial(_run_group, runtime, context),
        _judge(args, runtime.config, plan, dynamic_filter),
    )
    for _, reason in outcome.dropped:
        stats.groups_dropped[reason or "filtered"] = stats.groups_dropped.get(reason or "filtered", 0) + 1
    _fill_from_dropped(outcome, plan.target, stats)
    stats.groups_aborted = len(outcome.aborted)
    if getattr(args, "partial_rollout", False):
        await _requeue(runtime, data_source, outcome.aborted, stats)
    return sorted(outcome.kept, key=lambda results: results[0].episode.slot)


async def _train_step(runtime: Runtime, args: Any, rollout_id: int, data_source: Any) -> Any:
    from slime.rollout.base_types import RolloutFnTrainOutput

    started = time.monotonic()
    stats = StepStats(rollout_id)
    kept = await _sample(runtime, args, rollout_id, data_source, stats)
    results = [r for group in kept for r in group]
    await _write_trace_log(runtime, rollout_id, "train", results)
    output: list[list[Any]] = [[s for r in group for s in r.samples] for group in kept]
    episodes = _renumber(output)
    stats.count_trained([_group_record(group) for group in kept])
    stats.sequences = sum(len(r.samples) for r in results if r.ok)
    if not any(r.ok for r in results):
        _log_failures(results)
        stats.seconds = time.monotonic() - started
        await _record_step(runtime, "train", rollout_id, results, stats.seconds, sampling=stats.as_dict())
        reasons = sorted({str(r.reason) for r in results})
        raise RuntimeError(
            f"rollout {rollout_id}: all {len(results)} episodes failed; not training on nothing. "
            f"Reasons: {'; '.join(reasons[:5])}"
        )
    stats.padding_samples = pad_for_dp(output, dp_layout(args), _padding_maker, next_rollout_id=episodes)
    stats.seconds = time.monotonic() - started
    runtime.last_step = stats
    _log_failures(results)
    logger.info("%s", stats.log_line())
    await _record_step(runtime, "train", rollout_id, results, stats.seconds, sampling=stats.as_dict())
    return RolloutFnTrainOutput(samples=output, metrics=stats.metrics())


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
    seconds = time.monotonic() - started
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
        await _record_step(runtime, "eval", rollout_id, mine, seconds, dataset=spec.name)
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
    :raises RuntimeError: when every episode of a training step failed, or the gateway process
        died and cannot be started again.
    """
    runtime = _STATE.get(args)
    _ensure_gateway(runtime.gateway)
    if evaluation:
        return runtime.run(_eval_step(runtime, args, rollout_id))
    return runtime.run(_train_step(runtime, args, rollout_id, data_source))
