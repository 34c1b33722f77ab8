"""Running one episode: a gateway session, the agent's run, its traces merged into Samples.

A failed episode becomes one zero-gradient sample marked as an infrastructure failure
(:func:`_failed`), and so does one whose samples' routed experts cannot be rebuilt exactly
(rollout routing replay, rollout/routing.py); cancelling an episode (the tail cut) ends its
runtime and gateway sessions before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agentcore_slime.episodes import EpisodeRequest, new_session_id
from agentcore_slime.episodes.log_ids import redact, short_id
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.observe.records import INFRASTRUCTURE
from agentcore_slime.rollout.routing import RoutingLayout, attach_routing
from agentcore_slime.rollout.runtime import Runtime
from agentcore_slime.rollout.samples import KIND_FAILED, ShimRecord, zero_gradient_sample
from agentcore_slime.rollout.traces import merge_traces_to_samples

logger = logging.getLogger(__name__)


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
    result: dict[str, Any] | None = None  #: the agent's result, when one was read
    capped: bool = False  #: the session reached its cap on calls or tokens
    routing: RoutingLayout | None = None  #: rollout routing replay: the rows its samples carry

    @property
    def seconds(self) -> float:
        """Its session-seconds so far (what AgentCore bills), aborted ones included."""
        if not self.started:
            return 0.0
        return max(0.0, (self.ended or time.monotonic()) - self.started)


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


async def _open_session(runtime: Runtime, sid: str, sampling: dict[str, Any]) -> str:
    """Create the gateway session. A gateway that can (``GatewayProcess.submit_create``) batches
    it with the other episodes' and no pool thread waits for it."""
    submit = getattr(runtime.gateway, "submit_create", None)
    if callable(submit):
        return str(await asyncio.wrap_future(submit(sid, sampling)))
    return await runtime.call(runtime.gateway.create_session, sid, sampling)


async def _take_traces(runtime: Runtime, sid: str) -> tuple[list[CallTrace], bool]:
    """The session's traces, and whether the session is gone with them: a gateway that can
    (``GatewayProcess.submit_finish``) deletes it in the same batched operation, and then there
    is no delete to send (nor a pool thread to hand it to) when the episode ends."""
    submit = getattr(runtime.gateway, "submit_finish", None)
    if callable(submit):
        return list(await asyncio.wrap_future(submit(sid))), True
    return list(await runtime.call(runtime.gateway.traces, sid)), False


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
            base_url = await _open_session(runtime, sid, dict(episode.sampling))
        except Exception as exc:
            return _failed(
                episode, "gateway_error", f"gateway could not create the session: {type(exc).__name__}: {exc}"
            )
        traces: list[CallTrace] = []
        aborted = finished = False
        try:
            request = EpisodeRequest(metadata, sid, episode.input_id, base_url, episode.sampling)
            outcome = await runtime.runner.run_episode(request)
            traces, finished = await _take_traces(runtime, sid)
        except asyncio.CancelledError:
            aborted = True
            raise
        except Exception as exc:
            return _failed(
                episode, "gateway_error", f"reading the session's traces failed: {type(exc).__name__}: {exc}"
            )
        finally:
            if not finished:
                await asyncio.shield(_end_gateway_session(runtime, sid, aborted))
            episode.ended = time.monotonic()
    episode.result = outcome.result
    episode.capped = reached_cap(runtime.config, traces)
    if not outcome.ok or outcome.reward is None:
        return _failed(episode, outcome.failure or "bad_reward", outcome.reason or "no reward", traces)
    merge = partial(
        merge_traces_to_samples,
        traces,
        episode.template,
        session_id=sid,
        reward=outcome.reward,
        rollout_id=episode.rollout_id,
        train_side_calls=runtime.config.train_side_calls,
    )
    samples = await runtime.call(merge)  # CPU work off the loop, so polling keeps its pace
    if not samples:
        return _failed(
            episode, "no_traces", f"no usable traces ({len(traces)} calls recorded by the gateway)", traces
        )
    if episode.routing is not None:
        problem = await runtime.call(attach_routing, traces, samples, episode.routing)
        if problem is not None:
            return _failed(episode, "routing_replay", f"routed experts: {problem}", traces)
    return _Result(episode, samples, outcome.reward, None, traces)


def reached_cap(config: Any, traces: list[CallTrace]) -> bool:
    """Whether a session used up MAX_CALLS_PER_EPISODE or MAX_TOKENS_PER_EPISODE: the gateway
    answers its later calls with a short final reply, which is not traced (so the traces tell)."""
    calls, tokens = config.max_calls_per_episode, config.max_tokens_per_episode
    if calls is not None and len(traces) >= calls:
        return True
    return tokens is not None and sum(len(t.completion_token_ids) for t in traces) >= tokens


def _input_id(kind: str, rollout_id: int, name: str = "") -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    return "-".join(p for p in (kind, str(rollout_id), safe, uuid.uuid4().hex[:8]) if p)
