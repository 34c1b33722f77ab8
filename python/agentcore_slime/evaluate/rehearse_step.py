"""The training step a rehearsal stands for: its episodes made into samples, as training makes them.

The rehearsal's episodes (:mod:`.rehearse`) ran through the gateway, the agent and S3 as a
training step's do; here their call traces become samples with the rollout's own code
(:func:`agentcore_slime.rollout.traces.merge_traces_to_samples`: prefix-extending segments, loss
mask 1 on sampled tokens and 0 on bridge tokens, the engine's logprobs), a failed episode becomes
the rollout's zero-gradient sample (marked as an infrastructure failure), and the rewards go
through the reward hook slime calls in training
(:func:`agentcore_slime.rollout.rewards.normalize_episode_rewards`: one reward per episode,
GRPO-normalised within its prompt group). The step is then recorded as training records it
(:class:`agentcore_slime.observe.RunLog`: ``metrics.jsonl`` and ``episodes/train-000000.jsonl``),
plus ``samples.jsonl``: each sample's tokens, loss mask, logprobs, raw reward and advantage.

slime is not needed: the samples are :class:`Sample`, a plain class with the fields of slime's
``Sample`` the rollout sets. What slime does after the rollout (data-parallel padding, the
loss, the update) is not rehearsed.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from agentcore_slime.observe import RunLog
from agentcore_slime.observe.records import INFRASTRUCTURE, CallRecord, EpisodeRecord, token_counts
from agentcore_slime.observe.runlog import write_whole
from agentcore_slime.rollout.rewards import normalize_episode_rewards
from agentcore_slime.rollout.samples import KIND_FAILED, ShimRecord, zero_gradient_sample
from agentcore_slime.rollout.traces import merge_traces_to_samples

from .episodes import Episode

#: the rehearsal's step number (slime's rollout id)
STEP = 0
SAMPLES_FILE = "samples.jsonl"


class SampleStatus(enum.Enum):
    """slime's ``Sample.Status`` values."""

    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass
class Sample:
    """The fields of slime's ``Sample`` the rollout sets (slime's names)."""

    Status: ClassVar[type[SampleStatus]] = SampleStatus

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: Any = ""
    label: Any = None
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    loss_mask: list[int] = field(default_factory=list)
    rollout_log_probs: list[float] = field(default_factory=list)
    reward: float | None = None
    status: SampleStatus = SampleStatus.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    remove_sample: bool = False


def reward_args(settings: dict[str, Any]) -> SimpleNamespace:
    """slime's args as the reward hook reads them: toolkit.yaml's keys over slime's defaults
    (``--advantage-estimator grpo``, reward and std normalization on)."""
    defaults = {"advantage_estimator": "grpo", "rewards_normalization": True, "grpo_std_normalization": True}
    return SimpleNamespace(**{**defaults, **settings})


def episode_samples(episode: Episode, payload: Any, traces: Sequence[Any]) -> list[Sample]:
    """The samples training makes of one episode (a failed one: one zero-gradient sample)."""
    template = Sample(group_index=episode.row, index=episode.sample, rollout_id=STEP,
                      prompt=(payload or {}).get("prompt", "") if isinstance(payload, dict) else "",
                      label=(payload or {}).get("answer") if isinstance(payload, dict) else None,
                      metadata=payload if isinstance(payload, dict) else {"row_metadata": payload})
    if episode.ok and episode.reward is not None:
        samples = merge_traces_to_samples(traces, template, session_id=episode.session_id,
                                          reward=episode.reward, rollout_id=STEP)
        if samples:
            return list(samples)
    record = ShimRecord(kind=KIND_FAILED, session_id=episode.session_id,
                        reason=episode.failure_detail or "no usable traces",
                        failure=episode.failure_reason or "no_traces", failure_class=INFRASTRUCTURE)
    return [zero_gradient_sample(Sample, template=template, record=record, rollout_id=STEP,
                                 status=SampleStatus.FAILED)]


@dataclass
class Step:
    """The rehearsed step: every episode's samples and what the reward hook made of them."""

    samples: list[Sample]
    raw: list[float]
    advantages: list[float]
    by_episode: dict[str, list[int]]  #: session id -> positions of its samples


def make_step(episodes: Sequence[Episode], payloads: Sequence[Any], calls: dict[str, list[Any]],
              settings: dict[str, Any]) -> Step:
    """Samples and advantages of the rehearsal's episodes, as a training step computes them.

    :param episodes: the episodes (``row`` is the prompt group, ``sample`` the index in it).
    :param payloads: the rows' metadata, by row.
    :param calls: each session's call traces.
    :param settings: toolkit.yaml's keys (``reward_postprocessing``, ``infra_failures``).
    """
    samples: list[Sample] = []
    by_episode: dict[str, list[int]] = {}
    for episode in episodes:
        made = episode_samples(episode, payloads[episode.row], calls.get(episode.session_id, []))
        by_episode[episode.session_id] = list(range(len(samples), len(samples) + len(made)))
        samples += made
    raw, advantages = normalize_episode_rewards(reward_args(settings), samples)
    return Step(samples, raw, advantages, by_episode)


def _runs(mask: Sequence[int]) -> list[list[int]]:
    """The loss mask as runs ``[[bit, length], ...]``."""
    runs: list[list[int]] = []
    for bit in mask:
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([int(bit), 1])
    return runs


def sample_lines(step: Step, decode: Any = None) -> list[dict[str, Any]]:
    """``samples.jsonl``: one object per sample, with its loss mask and advantage.

    :param decode: a tokenizer's ``decode`` (token id -> text), to show the response's pieces.
    """
    lines = []
    for position, sample in enumerate(step.samples):
        record = ShimRecord.of(sample)
        cut = len(sample.tokens) - sample.response_length
        response = sample.tokens[cut:] if sample.response_length else []
        line: dict[str, Any] = {
            "session_id": sample.session_id,
            "group": sample.group_index,
            "index": sample.index,
            "kind": record.kind,
            "segment": record.segment,
            "segments": record.segments,
            "status": sample.status.value,
            "prompt_tokens": len(sample.tokens) - sample.response_length,
            "response_tokens": sample.response_length,
            "trained_tokens": sum(sample.loss_mask),
            "loss_mask_runs": _runs(sample.loss_mask),
            "raw_reward": step.raw[position],
            "advantage": step.advantages[position],
            "failure": record.failure,
            "tokens": sample.tokens,
            "loss_mask": sample.loss_mask,
            "rollout_log_probs": sample.rollout_log_probs,
        }
        if decode is not None and not sample.remove_sample:
            line["response_pieces"] = _pieces(response, sample.loss_mask, decode)
        lines.append(line)
    return lines


def _pieces(response: Sequence[int], mask: Sequence[int], decode: Any) -> list[list[Any]]:
    """The response as ``[[loss mask bit, text], ...]``: consecutive tokens of one bit decoded together."""
    pieces: list[list[Any]] = []
    start = 0
    for end in range(1, len(response) + 1):
        if end == len(response) or mask[end] != mask[start]:
            pieces.append([int(mask[start]), str(decode(list(response[start:end])))])
            start = end
    return pieces


def episode_records(episodes: Sequence[Episode], step: Step, calls: dict[str, list[Any]],
                    dataset: str = "") -> list[EpisodeRecord]:
    """What training records of each episode (the report's browser, metrics.jsonl's counts)."""
    found = []
    for number, e in enumerate(episodes):
        samples = [step.samples[i] for i in step.by_episode.get(e.session_id, [])]
        sampled, masked = token_counts(samples) if e.ok else (0, 0)
        found.append(EpisodeRecord(
            session_id=e.session_id, group=e.row, index=number, reward=e.reward,
            failure_class=e.failure_class, reason=e.failure_detail or "", seconds=e.seconds,
            calls=[CallRecord.from_trace(trace) for trace in calls.get(e.session_id, [])],
            sampled_tokens=sampled, masked_tokens=masked, samples=len(samples) if e.ok else 0,
            dataset=dataset, failure=e.failure_reason or "",
        ))
    return found


def record_step(out_dir: Path, episodes: Sequence[Episode], step: Step, calls: dict[str, list[Any]],
                seconds: float, decode: Any = None) -> dict[str, Any]:
    """Write the step as training writes one (``metrics.jsonl``, ``episodes/``) plus
    ``samples.jsonl``; returns the metrics line."""
    records = episode_records(episodes, step, calls)
    metrics = RunLog(str(out_dir), len(records), 1).step("train", STEP, records, seconds)
    write_whole(out_dir / SAMPLES_FILE,
                "".join(json.dumps(line) + "\n" for line in sample_lines(step, decode)))
    return metrics
