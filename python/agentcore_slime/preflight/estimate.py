"""What a run will cost, before anything starts: ``bin/train --dry-run``, ``bin/doctor`` and
bin/train's check that ``BUDGET_USD`` covers at least one step.

The projection is :func:`agentcore_slime.cost.projected_step` over the run's settings. Episode
duration and agent-reported cost come from the last ``bin/eval`` of the same agent
(``runs/*/eval/*/summary.json`` naming it) when there is one; otherwise they are assumptions,
and the estimate says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cost import (
    ASSUMED_EPISODE_SECONDS,
    ASSUMED_TRAIN_SHARE,
    Cost,
    Rates,
    StepShape,
    projected_step,
)
from ..errors import ConfigError
from ..settings.validate import Config


@dataclass(frozen=True)
class EvalHistory:
    """What the last bin/eval of the agent measured.

    :param path: its summary.json.
    :param episode_seconds: mean session-seconds of its episodes.
    :param agent_usd: mean agent-reported cost per episode (0 when it reported none).
    """

    path: Path
    episode_seconds: float
    agent_usd: float


@dataclass(frozen=True)
class Estimate:
    """A run's projected cost, by part, and what it rests on.

    :param step: one step (the AgentCore part: estimate and upper bound).
    :param steps: the run's steps (NUM_ROLLOUT).
    :param evals: eval steps the run will do (VAL_DATA_PATH and EVAL_INTERVAL).
    :param eval_step: one eval step.
    :param assumptions: which figures are assumed, one line each.
    :param sources: which figures were measured, and where.
    """

    step: Cost
    steps: int
    evals: int
    eval_step: Cost
    assumptions: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def total(self) -> Cost:
        return self.step.scaled(self.steps) + self.eval_step.scaled(self.evals)

    def lines(self) -> list[str]:
        """The estimate as printed: the range by part, then its sources and assumptions."""
        t, s = self.total, self.step
        return [
            f"expected cost: ${t.total:,.2f} to ${t.total_upper:,.2f} "
            f"({self.steps} steps, {self.evals} eval steps; "
            f"per step ${s.total:,.2f} to ${s.total_upper:,.2f})",
            f"  GPU nodes         ${t.gpu:,.2f}",
            f"  AgentCore Runtime ${t.acr:,.2f} estimate, "
            f"${t.acr_upper:,.2f} at most (2 vCPU, 8 GB a session)",
            f"  agent-reported    ${t.agent:,.2f}",
            *(f"  measured: {line}" for line in self.sources),
            *(f"  assumed: {line}" for line in self.assumptions),
        ]


def rates_of(config: Config) -> Rates:
    """The run's prices from its settings."""
    return Rates(
        node_hour_usd=_num(config, "NODE_HOUR_USD"),
        num_nodes=int(_num(config, "NUM_NODES", 1)),
        acr_vcpu_hour_usd=_num(config, "ACR_VCPU_HOUR_USD"),
        acr_gb_hour_usd=_num(config, "ACR_GB_HOUR_USD"),
        acr_active_cpu_share=_num(config, "ACR_ACTIVE_CPU_SHARE"),
        acr_memory_gb=_num(config, "ACR_MEMORY_GB"),
    )


def last_eval(runs_dir: Path, agent: str | None) -> EvalHistory | None:
    """The newest bin/eval summary under ``runs_dir`` that evaluated ``agent``."""
    if not agent or not runs_dir.is_dir():
        return None
    found: list[tuple[float, Path, dict[str, Any]]] = []
    for path in runs_dir.glob("*/eval/*/summary.json"):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
            mtime = path.stat().st_mtime
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict) and summary.get("agent") == agent:
            found.append((mtime, path, summary))
    if not found:
        return None
    _, path, summary = max(found, key=lambda item: item[0])
    seconds = _number(summary, "seconds", "per_episode", "mean")
    if seconds is None or seconds <= 0:
        return None
    episodes = _number(summary, "episodes") or 0
    agent_usd = _number(summary, "cost", "agent_usd") or 0.0
    return EvalHistory(path, seconds, agent_usd / episodes if episodes else 0.0)


def _number(data: Any, *keys: str) -> float | None:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    ok = isinstance(data, (int, float)) and not isinstance(data, bool) and math.isfinite(data)
    return float(data) if ok else None


def estimate(config: Config, runs_dir: Path, variant: str = "sync") -> Estimate:
    """The run's expected cost from its settings and the agent's last bin/eval."""
    history = last_eval(runs_dir, _agent(config))
    assumptions, sources = [], []
    if history is None:
        seconds, agent_usd = ASSUMED_EPISODE_SECONDS, 0.0
        assumptions.append(
            f"{seconds:g} s per episode and no agent-reported cost (no bin/eval of this agent yet: "
            "run one for measured figures)"
        )
    else:
        seconds, agent_usd = history.episode_seconds, history.agent_usd
        sources.append(f"{seconds:.1f} s and ${agent_usd:.4f} per episode, from {history.path}")
    train_share = 0.0 if variant == "async" else ASSUMED_TRAIN_SHARE
    assumptions.append(
        "a step's training takes as long as its rollout"
        if train_share
        else "training overlaps the rollout (async)"
    )
    rates = rates_of(config)
    if rates.node_hour_usd == 0:
        assumptions.append("GPU nodes not counted (NODE_HOUR_USD=0)")
    assumptions.append(
        f"AgentCore estimate at {rates.acr_active_cpu_share:g} vCPU in use and {rates.acr_memory_gb:g} GB "
        "(ACR_ACTIVE_CPU_SHARE, ACR_MEMORY_GB)"
    )
    groups = int(_num(config, "OVER_SAMPLING_BATCH_SIZE") or _num(config, "ROLLOUT_BATCH_SIZE", 1))
    per_group = int(_num(config, "N_SAMPLES_PER_PROMPT", 1))
    concurrent = int(_num(config, "MAX_CONCURRENT", 1))
    step = projected_step(rates, StepShape(groups * per_group, concurrent, seconds, agent_usd, train_share))
    steps = int(_num(config, "NUM_ROLLOUT", 1))
    evals, eval_step = 0, Cost()
    if config["VAL_DATA_PATH"]:
        evals = 1 + steps // int(_num(config, "EVAL_INTERVAL", steps))
        rows = _rows(config.path("VAL_DATA_PATH"))
        if rows is None:
            rows = groups
            assumptions.append(f"an eval step as large as a training step's groups ({rows} rows)")
        episodes = rows * int(_num(config, "N_SAMPLES_PER_EVAL_PROMPT", 1))
        eval_step = projected_step(rates, StepShape(episodes, concurrent, seconds, agent_usd, 0.0))
    return Estimate(step, steps, evals, eval_step, assumptions, sources)


def _num(config: Config, name: str, default: float = 0.0) -> float:
    value = config[name]
    return float(str(value)) if value is not None else default


def _agent(config: Config) -> str | None:
    value = config["AGENT_RUNTIME_ARN"] or config["AGENT_URL"]
    return str(value) if value else None


def _rows(path: Path | None) -> int | None:
    """Rows of the validation file (None when it cannot be read here)."""
    try:
        with open(path or "", "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return None


def check_budget(config: Config, runs_dir: Path, variant: str = "sync") -> None:
    """A budget below one step's projected cost stops the run before its first step: refuse it now.

    :raises ConfigError: BUDGET_USD is below the low end of one step's projection.
    """
    budget = config["BUDGET_USD"]
    if budget is None:
        return
    step = estimate(config, runs_dir, variant).step
    if float(str(budget)) < step.total:
        raise ConfigError(
            f"BUDGET_USD={budget} is below one step's projected cost (${step.total:.2f}; "
            "see bin/train --dry-run for how it is made)",
            f"raise BUDGET_USD to at least {math.ceil(step.total * 100) / 100:.2f}, "
            "or unset it for no budget",
        )
