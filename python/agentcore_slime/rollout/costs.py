"""What the run has spent, step by step, and the budget's stop (``BUDGET_USD``).

One :class:`Ledger` per rollout process (on the :class:`~.runtime.Runtime`). After each step
(and each eval dataset) it prices the episodes that ran, aborted and over-sampled ones included,
and the GPU nodes for the wall time since the previous record (so a step's GPU part also holds the
training that preceded it), with :mod:`agentcore_slime.cost`; the result goes into that step's
metrics.jsonl line under ``cost``. A resumed run starts from the last ``cost.run`` in
metrics.jsonl: what an earlier process spent stays spent.

Before a training step starts, :meth:`Ledger.before_step` asks the budget. When it says stop,
the rollout writes ``budget-stop.json`` into the run directory and raises
:class:`BudgetExhausted`; slime's train loop raises it where it waits for that rollout, which
is after the previous step's save (train.py; train_async.py starts rollout N+1 before training
step N but waits for it only after step N's save). train.sh finds the marker and exits with
:data:`BUDGET_EXIT_STATUS`, printing what was spent and how to resume.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcore_slime.cost import (
    MAX_AGENT_COST_USD,
    Budget,
    Cost,
    EpisodeUsage,
    Rates,
    Schedule,
    episode_cost,
    gpu_cost,
    reported_cost,
)
from agentcore_slime.observe.runlog import METRICS_FILE, read_json_lines, write_whole
from agentcore_slime.settings.config import ToolkitConfig

logger = logging.getLogger(__name__)

#: the file the rollout leaves in the run directory when the budget stops the run
BUDGET_MARKER = "budget-stop.json"
#: train.sh's exit status after a budget stop (templates/lib/budget.sh says the same)
BUDGET_EXIT_STATUS = 3


class BudgetExhausted(RuntimeError):
    """The budget cannot pay for what comes next: the run stops here, nothing of a step cut."""


@dataclass
class EpisodeCharge:
    """What the ledger needs of one episode that ran (or was started and aborted).

    :param seconds: its session-seconds (0 = never started).
    :param result: the agent's result, when one was read.
    :param ok: it ended with the agent's own reward.
    :param correct: its reward is above 0.
    :param capped: its session reached MAX_CALLS_PER_EPISODE or MAX_TOKENS_PER_EPISODE.
    """

    seconds: float
    result: dict[str, Any] | None = None
    ok: bool = False
    correct: bool = False
    capped: bool = False


@dataclass
class Ledger:
    """The run's cost so far, and its budget.

    :param rates: the prices (settings).
    :param cost_key: where the agents report their spending.
    :param budget: the budget (None = none).
    :param run_dir: where metrics.jsonl and the stop marker live (None = nowhere).
    """

    rates: Rates
    cost_key: str = "cost_usd"
    budget: Budget | None = None
    run_dir: Path | None = None
    spent: Cost = field(default_factory=Cost)
    successes: int = 0
    correct: int = 0
    cycle: Cost = field(default_factory=Cost)  #: the last training step and the evals after it
    dearest_cycle: float = 0.0
    steps_done: int = 0
    _mark: float = field(default_factory=time.monotonic)

    @classmethod
    def for_run(cls, config: ToolkitConfig, args: Any, run_dir: str | None) -> Ledger:
        rates = Rates.of(config, config.num_nodes)
        budget = None
        if config.budget_usd is not None:
            budget = Budget(config.budget_usd, _schedule(args))
        ledger = cls(rates, config.agent_cost_key, budget, Path(run_dir) if run_dir else None)
        ledger.carry_forward()
        return ledger

    def carry_forward(self) -> None:
        """Start from what metrics.jsonl says the run spent (a resumed run): the spend, and the
        cycles (a training step and the evals after it) replayed as :meth:`charge` built them,
        so that the budget decides after a resume as the live run would have."""
        if self.run_dir is None:
            return
        for line in read_json_lines(self.run_dir / METRICS_FILE):
            cost = line.get("cost")
            if not isinstance(cost, dict) or not isinstance(cost.get("run"), dict):
                continue
            self.spent = Cost.from_dict(cost["run"])
            self.successes = _count(cost.get("successful_episodes"))
            self.correct = _count(cost.get("correct_episodes"))
            step = Cost.from_dict(cost.get("step") or {})
            kind = "train" if line.get("kind") == "train" else "eval"
            self._add_to_cycle(kind, step, _count(line.get("step", -1) if kind == "train" else 0))
        if self.spent.total:
            logger.info("carried over from %s: $%.2f spent so far", METRICS_FILE, self.spent.total)

    def charge(
        self, kind: str, step: int, episodes: list[EpisodeCharge], wall: float | None = None
    ) -> dict[str, Any]:
        """Price one record (a training step, or one eval dataset) and add it to the run.

        :param kind: ``train`` or ``eval``.
        :param step: slime's rollout id.
        :param episodes: every episode the record started, aborted ones included.
        :param wall: GPU seconds to bill (default: since the previous record).
        :returns: the ``cost`` entry of its metrics.jsonl line.
        """
        now = time.monotonic()
        seconds = now - self._mark if wall is None else wall
        self._mark = now
        cost = gpu_cost(self.rates, seconds)
        malformed = 0
        for episode in episodes:
            amount, bad = reported_cost(episode.result, self.cost_key)
            malformed += bad
            cost = cost + episode_cost(self.rates, EpisodeUsage(episode.seconds, amount))
        if malformed:  # one line per step, never a crash: the figure counts 0 (the episode failed)
            logger.warning(
                "%s rollout %d: %d episode(s) reported a %r that is not a number in 0..%g; counted as 0 "
                "(an episode with an otherwise good result failed as bad_cost)",
                kind,
                step,
                malformed,
                self.cost_key,
                MAX_AGENT_COST_USD,
            )
        self.spent = self.spent + cost
        successes = sum(e.ok for e in episodes)
        self.successes += successes
        self.correct += sum(e.correct for e in episodes)
        self._add_to_cycle(kind, cost, step)
        return {
            "step": cost.as_dict(),
            "run": self.spent.as_dict(),
            "per_successful_episode_usd": cost.total / successes if successes else None,
            "run_per_correct_episode_usd": self.spent.total / self.correct if self.correct else None,
            "successful_episodes": self.successes,
            "correct_episodes": self.correct,
            "episodes_billed": len(episodes),
            "capped_episodes": sum(e.capped for e in episodes),
            "malformed_agent_costs": malformed,
            "gpu_seconds": seconds,
            "budget_usd": self.budget.limit_usd if self.budget else None,
        }

    def _add_to_cycle(self, kind: str, cost: Cost, step: int) -> None:
        """A training step starts a new cycle (the last one counts towards the dearest); an
        eval adds to the current one (the budget's per-step projection includes evals)."""
        if kind == "train":
            self.dearest_cycle = max(self.dearest_cycle, self.cycle.total)
            self.cycle = cost
            self.steps_done = step + 1
        else:
            self.cycle = self.cycle + cost

    def projected_total(self, num_rollout: int | None) -> float | None:
        """The run's projected total: spent plus the remaining steps at the dearest one so far."""
        per_step = max(self.dearest_cycle, self.cycle.total)
        if not num_rollout or not per_step:
            return None
        return self.spent.total + per_step * max(num_rollout - self.steps_done, 0)

    def before_step(self, step: int, args: Any) -> None:
        """Ask the budget whether ``step`` may start.

        :raises BudgetExhausted: it may not; ``budget-stop.json`` is in the run directory.
        """
        if self.budget is None:
            return
        self.budget.spent = self.spent
        self.budget.dearest_step = max(self.dearest_cycle, self.cycle.total)
        decision = self.budget.before_step(step)
        if decision.go:
            return
        marker = {
            "spent_usd": round(self.spent.total, 4),
            "spent": self.spent.as_dict(),
            "budget_usd": self.budget.limit_usd,
            "steps_done": step,
            "num_rollout": self.budget.schedule.num_rollout,
            "last_saved_step": decision.last_saved_step,
            "per_step_usd": round(self.budget.dearest_step, 4),
            "save_dir": getattr(args, "save", None),
            "why": decision.why,
            "time": time.time(),
        }
        if self.run_dir is not None:
            try:
                write_whole(self.run_dir / BUDGET_MARKER, json.dumps(marker, indent=1) + "\n")
            except OSError as exc:
                logger.warning("could not write %s: %s", self.run_dir / BUDGET_MARKER, exc)
        raise BudgetExhausted(f"BUDGET_USD: stopping before rollout {step}: {decision.why}")


def _schedule(args: Any) -> Schedule:
    num_rollout = getattr(args, "num_rollout", None)
    interval = getattr(args, "save_interval", None)
    return Schedule(
        num_rollout if isinstance(num_rollout, int) else 2**31 - 1,
        interval if isinstance(interval, int) and interval > 0 else None,
        None,
    )


def _count(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0
