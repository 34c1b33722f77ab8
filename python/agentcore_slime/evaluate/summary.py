"""What an evaluation reports: accuracy, mean reward, pass@k, failures, tokens and durations.

Pure functions over :class:`~agentcore_slime.evaluate.episodes.Episode` records, so the numbers
in ``summary.json`` and on screen are tested against hand-computed episodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentcore_slime.cost import EpisodeUsage, Rates, step_cost
from agentcore_slime.observe.figures import eval_figures
from agentcore_slime.observe.figures import is_correct as figures_is_correct
from agentcore_slime.settings.config import ToolkitConfig

from .episodes import Episode


def pass_at_k(n: int, correct: int, k: int) -> float:
    """The unbiased pass@k estimate for one prompt: ``1 - C(n - c, k) / C(n, k)``.

    The chance that at least one of ``k`` episodes drawn without replacement from the ``n``
    run is correct (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

    :param n: episodes run for the prompt.
    :param correct: how many of them were correct.
    :param k: episodes drawn (``1 <= k <= n``).
    """
    if not 1 <= k <= n or not 0 <= correct <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= correct <= n (n={n}, c={correct}, k={k})")
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def k_values(n: int) -> list[int]:
    """The k reported for ``n`` samples per prompt: 1, 2, 4, ... below n, and n itself."""
    ks = [1]
    while ks[-1] * 2 < n:
        ks.append(ks[-1] * 2)
    return ks + ([n] if n > 1 else [])


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "max": 0.0}
    return {
        "mean": sum(values) / len(values),
        "p50": _percentile(values, 0.5),
        "p90": _percentile(values, 0.9),
        "max": max(values),
    }


def is_correct(episode: Episode) -> bool:
    """An episode counts as correct when the agent returned a reward above 0 (as slime's eval)."""
    return figures_is_correct(episode.reward if episode.ok else None)


def _pass_at_k(by_row: dict[int, list[Episode]], n_samples: int) -> dict[str, float | None]:
    """pass@k over each row's valid episodes; a row with fewer than k valid ones is left out of
    pass@k (None when no row has k)."""
    out: dict[str, float | None] = {}
    for k in k_values(n_samples):
        estimates = [
            pass_at_k(len(valid), sum(map(is_correct, valid)), k)
            for valid in ([e for e in eps if e.ok] for eps in by_row.values())
            if len(valid) >= k
        ]
        out[str(k)] = sum(estimates) / len(estimates) if estimates else None
    return out


def summarize(episodes: Sequence[Episode], n_samples: int, wall_seconds: float) -> dict[str, Any]:
    """The metrics of ``summary.json`` (without the run's settings).

    ``accuracy`` and ``mean_reward`` are the eval figures (:mod:`agentcore_slime.observe.figures`,
    the training rule): over the valid episodes, infrastructure failures left out and counted
    apart (``failed``, ``failures``); None when no episode is valid. The same figures as an eval
    step's ``metrics.jsonl`` line and slime's ``eval/<name>``.

    :param episodes: every episode of the evaluation.
    :param n_samples: episodes per row.
    :param wall_seconds: the evaluation's wall time.
    """
    figures = eval_figures(
        [e.reward if e.ok else None for e in episodes], [e.failure_reason for e in episodes if not e.ok]
    )
    by_row: dict[int, list[Episode]] = {}
    for episode in episodes:
        by_row.setdefault(episode.row, []).append(episode)
    summary: dict[str, Any] = {
        "rows": len(by_row),
        "episodes": figures.episodes,
        "valid": figures.valid,
        "succeeded": figures.valid,
        "failed": figures.failed,
        "accuracy": figures.accuracy,
        "mean_reward": figures.reward_mean,
    }
    if n_samples > 1 and by_row:
        summary["pass_at_k"] = _pass_at_k(by_row, n_samples)
    summary["failures"] = {
        "by_class": dict(sorted(Counter(str(e.failure_class) for e in episodes if not e.ok).items())),
        "by_reason": figures.failed_by_reason,
    }
    summary["tokens"] = {
        "prompt": sum(e.prompt_tokens for e in episodes),
        "completion": sum(e.completion_tokens for e in episodes),
        "completion_per_episode": _stats([float(e.completion_tokens) for e in episodes]),
        "turns_per_episode": _stats([float(e.turns) for e in episodes]),
        "truncated_episodes": sum(e.truncated for e in episodes),
    }
    summary["seconds"] = {"wall": wall_seconds, "per_episode": _stats([e.seconds for e in episodes])}
    return summary


def _reward(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def evaluation_cost(
    config: ToolkitConfig, episodes: Sequence[Episode], wall_seconds: float
) -> dict[str, Any]:
    """What the evaluation cost, by part (docs/cost.md): one node's GPUs for its
    wall time (NODE_HOUR_USD), AgentCore from each episode's session-seconds, what the agents
    reported (AGENT_COST_KEY).

    :param config: the run's settings (the rates).
    :param episodes: every episode of the evaluation.
    :param wall_seconds: the evaluation's wall time.
    """
    rates = Rates.of(config, num_nodes=1)  # bin/eval serves the model on this node
    cost = step_cost(rates, wall_seconds, [EpisodeUsage(e.seconds, e.agent_usd) for e in episodes])
    correct = sum(map(is_correct, episodes))
    return {**cost.as_dict(), "per_correct_episode_usd": cost.total / correct if correct else None}


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def screen(summary: dict[str, Any]) -> str:
    """The one-screen summary printed at the end of an evaluation."""
    s = summary
    lines = [
        f"evaluation of {s['checkpoint']} on {s['data']} ({s['rows']} rows x {s['n_samples']})",
        f"  accuracy     {_percent(s['accuracy'])}   mean reward {_reward(s['mean_reward'])}"
        f"   (over the {s['valid']} valid episodes; infrastructure failures apart)",
    ]
    if "pass_at_k" in s:
        lines.append("  " + "   ".join(f"pass@{k} {_percent(v)}" for k, v in s["pass_at_k"].items()))
    lines.append(f"  episodes     {s['episodes']}: {s['valid']} valid, {s['failed']} failed")
    for reason, number in s["failures"]["by_reason"].items():
        lines.append(f"    {number:5d} x {reason}")
    tokens, seconds = s["tokens"], s["seconds"]
    lines += [
        f"  tokens       {tokens['prompt']} prompt, {tokens['completion']} completion; "
        f"{tokens['turns_per_episode']['mean']:.1f} turns/episode, "
        f"{tokens['truncated_episodes']} truncated",
        f"  time         {seconds['wall']:.1f}s wall; per episode p50 {seconds['per_episode']['p50']:.1f}s, "
        f"p90 {seconds['per_episode']['p90']:.1f}s, max {seconds['per_episode']['max']:.1f}s",
        *_cost_line(s.get("cost")),
        f"  results      {s['out_dir']}",
    ]
    return "\n".join(lines) + "\n"


def _cost_line(cost: Any) -> list[str]:
    if not isinstance(cost, dict):
        return []
    return [
        f"  cost         ${cost['total_usd']:,.2f}: GPU ${cost['gpu_usd']:,.2f}, "
        f"AgentCore ${cost['acr_usd']:,.2f} (at most ${cost['acr_upper_usd']:,.2f}), "
        f"agent-reported ${cost['agent_usd']:,.2f}"
    ]
