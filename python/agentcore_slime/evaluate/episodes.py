"""Run evaluation episodes exactly as training runs them: gateway session, agent, S3 result.

This is the evaluation's only seam to the rollout machinery: one gateway session per episode
(:class:`agentcore_slime.gateway.Gateway`), the episode run by the training launcher
(:func:`agentcore_slime.episodes.make_runner`: ACR or ``AGENT_URL`` transport, the result read
from ``s3://<bucket>/<exp_id>/<input_id>/<session_id>.json``), and the session's call traces
counted for turns and tokens. Nothing here knows about slime. When the launcher's module layout
changes, only the imports of this file move.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agentcore_slime import episodes as agent_episodes
from agentcore_slime.cost import AGENT_COST_KEY, reported_cost
from agentcore_slime.episodes import EpisodeOutcome, EpisodeRequest, new_session_id
from agentcore_slime.episodes.deadline import EVAL_TIMEOUT, cut_reason, finish_by
from agentcore_slime.episodes.log_ids import redact, short_id
from agentcore_slime.gateway.trace import CallTrace

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: failure classes. An episode whose agent wrote a reward (any value) is the agent's own outcome;
#: every failure is infrastructure, an agent that crashed included (its crash does not say
#: whether the policy or the agent's environment caused it) - the boundary training draws.
INFRASTRUCTURE = "infrastructure"

#: reason prefixes (as the launcher and this module word them) -> reason code (training's codes)
_REASONS: tuple[tuple[str, str], ...] = (
    ("eval_timeout", EVAL_TIMEOUT),
    ("timeout", "timeout"),
    ("invoke failed", "invoke_error"),
    ("reading the result failed", "result_unreadable"),
    ("gateway", "gateway_error"),
    ("row metadata", "bad_metadata"),
    ("agent error result", "agent_crashed"),
    ("result", "bad_reward"),
)


class GatewayLike(Protocol):
    """The part of ``agentcore_slime.gateway.Gateway`` an evaluation uses."""

    def create_session(self, session_id: str, sampling_params: dict[str, Any]) -> str: ...

    def traces(self, session_id: str) -> list[CallTrace]: ...

    def delete_session(self, session_id: str) -> None: ...


@dataclass(frozen=True)
class Episode:
    """One evaluation episode, as written to ``episodes.jsonl``.

    :param row: index of the validation row (0-based, in file order).
    :param sample: which of the row's ``n`` samples this is.
    :param session_id: the ACR runtime session and gateway session id.
    :param reward: the agent's reward (``None`` when the episode failed).
    :param failure_class: ``infrastructure`` for a failed episode (``None`` when the agent's
        outcome, its reward, came back).
    :param failure_reason: a reason code (``timeout``, ``invoke_error``, ``agent_crashed``, ...).
    :param failure_detail: the full message (with the S3 key or the agent's stop reason).
    :param turns: model calls the agent made through the gateway.
    :param prompt_tokens: prompt tokens over all calls.
    :param completion_tokens: sampled tokens over all calls.
    :param truncated: a call stopped at the token limit (finish reason ``length``).
    :param seconds: wall time from invocation to result or failure.
    :param agent_usd: what the agent reported spending (AGENT_COST_KEY; None = nothing usable).
    """

    row: int
    sample: int
    session_id: str
    reward: float | None
    failure_class: str | None
    failure_reason: str | None
    failure_detail: str | None
    turns: int
    prompt_tokens: int
    completion_tokens: int
    truncated: bool
    seconds: float
    agent_usd: float | None = None

    @property
    def ok(self) -> bool:
        return self.failure_class is None


def classify(reason: str) -> tuple[str, str]:
    """The failure class and reason code of a failed episode, from the launcher's message.

    :param reason: the failure message.
    """
    for prefix, code in _REASONS:
        if reason.startswith(prefix):
            return INFRASTRUCTURE, code
    return INFRASTRUCTURE, "other"


def _outcome_failure(outcome: EpisodeOutcome) -> tuple[str, str] | None:
    """``(class, reason code)`` of a failed outcome; a launcher that sets a reason code itself
    (``EpisodeOutcome.failure``) is trusted over the message."""
    if outcome.ok and outcome.reward is not None:
        return None
    code = getattr(outcome, "failure", None)
    if isinstance(code, str) and code:
        return INFRASTRUCTURE, code
    return classify(outcome.reason or "no reward")


def _count(traces: Sequence[CallTrace]) -> tuple[int, int, int, bool]:
    prompt = sum(len(t.prompt_token_ids) for t in traces)
    completion = sum(len(t.completion_token_ids) for t in traces)
    return len(traces), prompt, completion, any(t.finish_reason == "length" for t in traces)


class EpisodeRunner:
    """Runs evaluation episodes through a gateway and the training launcher.

    :param gateway: a started gateway (or a stand-in with the same session methods).
    :param launcher: the training episode runner (``make_runner(config, executor)``).
    :param executor: the thread pool for the gateway's blocking calls.
    :param input_id: the evaluation's input id (second part of every result key).
    :param sampling: the sampling params every session gets.
    """

    def __init__(
        self,
        gateway: GatewayLike,
        launcher: agent_episodes.EpisodeRunner,
        executor: Executor,
        input_id: str,
        sampling: dict[str, Any],
        cost_key: str = AGENT_COST_KEY,
    ) -> None:
        self.gateway = gateway
        self.launcher = launcher
        self.executor = executor
        self.input_id = input_id
        self.sampling = dict(sampling)
        self.cost_key = cost_key

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _traces(self, sid: str) -> list[CallTrace]:
        try:
            return list(await self._call(self.gateway.traces, sid))
        except Exception as exc:  # noqa: BLE001 - counts only; the reward decides the episode
            logger.warning("reading the traces of session %s failed: %s", short_id(sid), redact(exc, sid))
            return []

    def _failed(self, row: int, sample: int, sid: str, reason: str, seconds: float = 0.0) -> Episode:
        failure_class, code = classify(reason)
        return Episode(row, sample, sid, None, failure_class, code, reason, 0, 0, 0, False, seconds)

    async def run(self, row: int, sample: int, metadata: Any, sid: str | None = None) -> Episode:
        """Run one episode; never raises for an episode-level problem.

        :param row: the row index.
        :param sample: the sample number within the row.
        :param metadata: the row's ``metadata`` (the agent's payload).
        :param sid: the session id (default: a new one).
        """
        sid = sid or new_session_id()
        if not isinstance(metadata, dict):
            return self._failed(row, sample, sid, f"row metadata is {type(metadata).__name__}, not a dict")
        try:
            base_url = await self._call(self.gateway.create_session, sid, self.sampling)
        except Exception as exc:
            return self._failed(row, sample, sid, f"gateway could not create the session: {exc}")
        try:
            request = EpisodeRequest(metadata, sid, self.input_id, base_url, self.sampling)
            outcome = await self.launcher.run_episode(request)
            traces = await self._traces(sid)
        finally:
            try:
                await self._call(self.gateway.delete_session, sid)
            except Exception as exc:  # noqa: BLE001 - the episode is over either way
                logger.debug("deleting gateway session %s failed: %s", short_id(sid), redact(exc, sid))
        turns, prompt, completion, truncated = _count(traces)
        failure = _outcome_failure(outcome)
        spent, _ = reported_cost(outcome.result, self.cost_key)  # a bad one failed the episode
        if failure is None:
            return Episode(
                row,
                sample,
                sid,
                outcome.reward,
                None,
                None,
                None,
                turns,
                prompt,
                completion,
                truncated,
                outcome.seconds,
                spent,
            )
        reason = redact(outcome.reason, sid)
        logger.info("episode failed: session %s (row %d): %s", short_id(sid), row, reason)
        return Episode(
            row,
            sample,
            sid,
            None,
            failure[0],
            failure[1],
            outcome.reason or "no reward",
            turns,
            prompt,
            completion,
            truncated,
            outcome.seconds,
            spent,
        )


async def run_all(
    runner: EpisodeRunner,
    rows: Sequence[Any],
    n_samples: int,
    max_concurrent: int,
    on_done: Callable[[Episode], None] | None = None,
    limit: float | None = None,
) -> list[Episode]:
    """Every row ``n_samples`` times, at most ``max_concurrent`` at once, in (row, sample) order.

    :param runner: the episode runner.
    :param rows: the rows' metadata (agent payloads), in file order.
    :param n_samples: episodes per row.
    :param max_concurrent: episodes in flight at once.
    :param on_done: called with each episode as it finishes (progress).
    :param limit: ``EVAL_TIMEOUT``: an episode not done this many seconds from now (running or
        waiting for a slot) is cancelled, its sessions ended, and fails as ``eval_timeout``.
    """
    slots = asyncio.Semaphore(max_concurrent)

    async def one(row: int, sample: int, metadata: Any, sid: str) -> Episode:
        async with slots:
            episode = await runner.run(row, sample, metadata, sid)
        if on_done is not None:
            on_done(episode)
        return episode

    keys = [(r, s, new_session_id()) for r in range(len(rows)) for s in range(n_samples)]
    done = await finish_by([one(r, s, rows[r], sid) for r, s, sid in keys], limit)
    reason = cut_reason(limit, "the evaluation's tail cut")
    return [
        Episode(r, s, sid, None, INFRASTRUCTURE, EVAL_TIMEOUT, reason, 0, 0, 0, False, limit or 0.0)
        if episode is None
        else episode
        for episode, (r, s, sid) in zip(done, keys, strict=True)
    ]


__all__ = ["EVAL_TIMEOUT", "INFRASTRUCTURE", "Episode", "EpisodeRunner", "classify", "run_all"]
