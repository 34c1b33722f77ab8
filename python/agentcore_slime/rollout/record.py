"""Recording a step: metrics.jsonl, the recorded episodes and the log lines of a step."""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

from agentcore_slime.episodes.log_ids import redact, short_id
from agentcore_slime.observe import CallRecord, EpisodeRecord
from agentcore_slime.observe.records import INFRASTRUCTURE, token_counts
from agentcore_slime.rollout.costs import EpisodeCharge
from agentcore_slime.rollout.episode import _Episode, _Result
from agentcore_slime.rollout.runtime import Runtime

logger = logging.getLogger(__name__)


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
        capped=episode.capped,
    )


def charges(episodes: list[_Episode], results: list[_Result]) -> list[EpisodeCharge]:
    """What the ledger bills: every episode started (aborted and dropped ones too)."""
    outcome = {id(r.episode): r for r in results}
    billed = []
    for episode in episodes:
        result = outcome.get(id(episode))
        ok = result is not None and result.ok
        correct = ok and result is not None and result.reward is not None and result.reward > 0
        billed.append(EpisodeCharge(episode.seconds, episode.result, ok, correct, episode.capped))
    return billed


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
