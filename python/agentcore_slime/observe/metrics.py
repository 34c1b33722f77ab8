"""Per-step metrics of a rollout, computed over episodes (not segments or padding samples).

slime's own ``rollout/*`` metrics count every training sample: the zero-reward padding
samples and failed episodes lower the mean, and an episode whose token chain broke counts
once per segment. These figures count each episode once and leave failed episodes out of
the reward statistics, so they say what the agent actually scored.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from agentcore_slime.observe.figures import eval_figures
from agentcore_slime.observe.records import EpisodeRecord

#: forks per successful episode from which the progress line warns (once per run)
FORK_WARNING_PER_EPISODE = 0.25
_AGENT_SIDE = "no setting changes it: the agent's own history handling (each time, a new sample)"
#: fork reason (gateway/trace.py) -> (its likely cause, what fixes it)
FORK_HINTS: dict[str, tuple[str, str]] = {
    "reasoning dropped": (
        "the history lacks the model's reasoning (the agent or the chat template dropped it), and the "
        "call was re-rendered",
        "unset CUMULATIVE_TOKEN_MODE=false and CUMULATIVE_BRIDGE=template (the defaults, true and "
        "new-messages, extend the sampled tokens with the new messages' own render)",
    ),
    "re-tokenized": (
        "the chat template renders the model's reply to other tokens than it sampled",
        "unset CUMULATIVE_TOKEN_MODE=false (the default, true, extends the sampled tokens)",
    ),
    "reply rewritten": (
        "the agent edits the model's reply before sending it back (not trained)",
        _AGENT_SIDE,
    ),
    "history rewritten": ("the agent edits earlier messages of its history", _AGENT_SIDE),
    "tool result changed": ("the agent changes earlier tool results", _AGENT_SIDE),
    "context compacted": ("the agent drops or summarizes earlier messages", _AGENT_SIDE),
    "sub-agent": ("the agent runs another conversation (a sub-agent) on the same session", _AGENT_SIDE),
    "tools changed": ("the agent changes its tool list between calls", _AGENT_SIDE),
    "repeat": (
        "the agent sends the same messages twice (retries without an Idempotency-Key, several samples)",
        _AGENT_SIDE,
    ),
}


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values.

    :param values: the sample.
    :param q: the percentile.
    """
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _spread(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": max(values) if values else None,
    }


def _reward_stats(rewards: list[float]) -> dict[str, float | None]:
    """Reward statistics of the valid episodes; ``mean`` and ``pass_rate`` are the eval figures'
    ``reward_mean`` and ``accuracy`` (:mod:`agentcore_slime.observe.figures`), bit for bit."""
    if not rewards:
        return {"mean": None, "std": None, "min": None, "max": None, "pass_rate": None}
    figures = eval_figures(rewards)
    return {
        "mean": figures.reward_mean,
        "std": statistics.pstdev(rewards),
        "min": min(rewards),
        "max": max(rewards),
        # a pass is a positive reward, as the eval accuracy counts it
        "pass_rate": figures.accuracy,
    }


def _groups_without_signal(records: list[EpisodeRecord]) -> int:
    """Groups whose valid episodes (two or more) all have the same reward: zero advantage."""
    by_group: dict[int, list[float]] = defaultdict(list)
    for record in records:
        if record.reward is not None:
            by_group[record.group].append(record.reward)
    return sum(len(rewards) >= 2 and len(set(rewards)) == 1 for rewards in by_group.values())


def step_metrics(
    kind: str,
    step: int,
    records: list[EpisodeRecord],
    step_seconds: float,
    *,
    wall_time: float,
    dataset: str = "",
) -> dict[str, Any]:
    """One line of ``metrics.jsonl``: what a training or eval step did.

    :param kind: ``train`` or ``eval``.
    :param step: slime's rollout id.
    :param records: the step's episodes (for eval: one dataset's).
    :param step_seconds: wall time of the whole step.
    :param wall_time: the Unix time the step ended.
    :param dataset: the eval dataset's name ("" for training).
    """
    failed = [r for r in records if not r.ok]
    ok = [r for r in records if r.ok]
    forks = Counter(call.chain_break for r in ok for call in r.calls if call.chain_break)
    rewards = [r.reward for r in records if r.reward is not None]
    calls = [call for r in records for call in r.calls]
    seconds = [r.seconds for r in records]
    latencies = [call.latency_ms for call in calls]
    return {
        "kind": kind,
        "step": step,
        "dataset": dataset,
        "time": wall_time,
        "step_seconds": step_seconds,
        "slowest_episode_seconds": max(seconds) if seconds else None,
        "episodes": {
            "started": len(records),
            "succeeded": len(records) - len(failed),
            "failed": len(failed),
            "capped": sum(r.capped for r in records),
            "failed_by_class": dict(Counter(str(r.failure_class) for r in failed)),
            "failed_by_reason": dict(Counter(r.failure or failure_reason_key(r.reason) for r in failed)),
        },
        "reward": _reward_stats(rewards),
        "groups": len({r.group for r in records}),
        "groups_without_signal": _groups_without_signal(records),
        "samples": sum(r.samples for r in records),
        "tokens": {
            "prompt": sum(r.prompt_tokens for r in records),
            "sampled": sum(r.completion_tokens for r in records),
            "trained": sum(r.sampled_tokens for r in records),
            "masked": sum(r.masked_tokens for r in records),
        },
        "turns": _spread([float(r.turns) for r in records]),
        "episode_seconds": _spread(seconds),
        "gateway": {
            "calls": len(calls),
            "latency_ms_p50": percentile(latencies, 50),
            "latency_ms_p99": percentile(latencies, 99),
            # turns whose text held a tool call the gateway could not read (docs/gateway.md)
            "tool_call_errors": sum(1 for call in calls if call.tool_call_errors),
            # calls outside the main conversation (untrained unless TRAIN_SIDE_CALLS; docs/agents.md)
            "side_calls": sum(1 for call in calls if call.side_call),
            # calls whose hosted tools (web search...) the model was not offered
            "hosted_tools_dropped": sum(1 for call in calls if call.hosted_tools),
        },
        "chain_breaks": dict(Counter(call.chain_break for call in calls if call.chain_break)),
        # over the successful episodes: how many samples each became, and why they split
        "samples_per_episode": sum(r.samples for r in ok) / len(ok) if ok else None,
        "forks_per_episode": {
            "total": sum(forks.values()) / len(ok) if ok else None,
            "by_reason": {reason: count / len(ok) for reason, count in sorted(forks.items())},
        },
        "session_seconds": sum(seconds),
    }


def fork_warning(metrics: dict[str, Any]) -> str | None:
    """What the progress line says once when a step's episodes fork too often (None: they do not).

    :param metrics: a :func:`step_metrics` result.
    """
    forks = metrics.get("forks_per_episode")
    if not isinstance(forks, dict) or not isinstance(forks.get("total"), (int, float)):
        return None
    if forks["total"] < FORK_WARNING_PER_EPISODE or not forks.get("by_reason"):
        return None
    reason = max(sorted(forks["by_reason"]), key=lambda name: forks["by_reason"][name])
    cause, fix = FORK_HINTS.get(reason, ("unknown", _AGENT_SIDE))
    return (
        f"WARNING {forks['total']:.2f} forks per episode split episodes into separate samples; "
        f"most are {reason!r}: {cause}; fix: {fix}"
    )


def _forks(metrics: dict[str, Any]) -> str | None:
    forks = metrics.get("forks_per_episode")
    if not isinstance(forks, dict) or not forks.get("by_reason"):
        return None
    reasons = ", ".join(f"{k} {v:.2f}" for k, v in sorted(forks["by_reason"].items()))
    per_episode = metrics["samples_per_episode"]
    return f"samples/episode {per_episode:.2f}, forks/episode {forks['total']:.2f} ({reasons})"


def failure_reason_key(reason: str) -> str:
    """A failure reason without its per-episode details, so equal causes count together.

    "timeout after 900s (session abc)" and "timeout after 900s (session def)" are one
    reason: the text up to the first colon or parenthesis, at most 80 characters.

    :param reason: the full reason of one failed episode.
    """
    head = reason
    for mark in (":", "(", "\n"):
        head = head.split(mark, 1)[0]
    return head.strip()[:80] or "unknown"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def progress_line(metrics: dict[str, Any], num_rollout: int | None, elapsed: float, steps_done: int) -> str:
    """The one line per step the terminal and the log show.

    :param metrics: a :func:`step_metrics` result.
    :param num_rollout: the run's total steps (None when unknown: no ETA).
    :param elapsed: seconds the training steps of this process took so far.
    :param steps_done: training steps this process finished (a resumed run starts at 0).
    """
    episodes, reward = metrics["episodes"], metrics["reward"]
    name = metrics["kind"] + (f" {metrics['dataset']}" if metrics["dataset"] else "")
    step = metrics["step"]
    training = metrics["kind"] == "train"
    if not training:
        position = f"at rollout {step}"
    else:
        # slime's rollout id, as metrics.jsonl and the report number steps; then how far the run is
        position = f"step {step} ({step + 1} of {num_rollout})" if num_rollout else f"step {step}"
    mean = "n/a" if reward["mean"] is None else f"{reward['mean']:.3f}"
    parts = [
        f"{name} {position}",
        f"reward {mean}",
        f"episodes {episodes['succeeded']}/{episodes['started']} ok",
    ]
    if episodes["failed"]:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(episodes["failed_by_reason"].items()))
        parts.append(f"failed {episodes['failed']} ({reasons})")
    if episodes.get("capped"):
        parts.append(f"capped {episodes['capped']}")
    unread = metrics.get("gateway", {}).get("tool_call_errors")
    if unread:
        parts.append(f"unreadable tool calls in {unread} turns")
    side = metrics.get("gateway", {}).get("side_calls")
    if side:
        parts.append(f"side calls {side}")
    forked = _forks(metrics)
    if forked:
        parts.append(forked)
    parts.append(f"step {metrics['step_seconds']:.1f}s")
    cost = metrics.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("run"), dict):
        spent = f"cost ${cost['run']['total_usd']:,.2f} so far"
        if cost.get("projected_total_usd") is not None:
            spent += f", ~${cost['projected_total_usd']:,.2f} projected"
        if cost.get("budget_usd") is not None:
            spent += f" (budget ${cost['budget_usd']:,.2f})"
        parts.append(spent)
    if num_rollout and training and steps_done and step + 1 < num_rollout:
        per_step = elapsed / steps_done
        parts.append(f"ETA {_duration(per_step * (num_rollout - step - 1))}")
    return " | ".join(parts)
