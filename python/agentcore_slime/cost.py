"""What a run costs, by part, and when a budget says to stop: the model, with no I/O.

An agent RL run spends money in three places, each kept apart:

- **GPU**: ``NODE_HOUR_USD`` x nodes x wall time (0 = not counted).
- **agent-reported**: what the agent says it spent (LLM judges, APIs, tools), a number under
  ``AGENT_COST_KEY`` (default ``cost_usd``) in its result, summed as reported.
- **AgentCore Runtime**: billed per session from microVM start to end: CPU per second of actual
  use (I/O wait is free), memory at its peak so far. The rollout measures session-seconds, not
  CPU or memory, so this part is a range: the *upper bound* bills every session-second at the
  largest session (2 vCPU, 8 GB), the *estimate* at ``ACR_ACTIVE_CPU_SHARE`` of one vCPU's time
  and ``ACR_MEMORY_GB``. Rates are settings (2026 published rates as defaults).

A run's total is GPU + agent-reported + the AgentCore estimate (its upper bound beside it).
Over-sampled episodes that were aborted and eval steps count: they are billed too.

The budget (``BUDGET_USD``) is checked before each step. Saving is slime's
(``--save-interval``), so the stop lands right after a saved checkpoint: at a step that follows
a save, the run stops when the budget cannot reach the next save at the dearest step seen so
far. Elsewhere it goes on, unless even the next step would overshoot (then it stops there: at
most one step over, and the steps since the last save are trained again on resume).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: AgentCore Runtime's published rates (2026) and its largest session
ACR_VCPU_HOUR_USD = 0.0895
ACR_GB_HOUR_USD = 0.00945
ACR_MAX_VCPU = 2.0
ACR_MAX_GB = 8.0
#: the estimate's defaults: an agent mostly waits on the model (I/O wait is not billed)
ACR_ACTIVE_CPU_SHARE = 0.25
ACR_MEMORY_GB = 2.0
#: where an agent reports its own spending in its result
AGENT_COST_KEY = "cost_usd"
#: the most one episode may report spending: a larger figure is a bug in the agent (or an
#: attack on the budget), refused with the episode (code ``bad_cost``), never added to a total
MAX_AGENT_COST_USD = 100.0


@dataclass(frozen=True)
class Rates:
    """The prices a run is costed at (every field a setting of the env file).

    :param node_hour_usd: one GPU node for an hour (0 = GPUs not counted).
    :param num_nodes: nodes of the run.
    :param acr_vcpu_hour_usd: AgentCore Runtime, one vCPU for an hour of active use.
    :param acr_gb_hour_usd: AgentCore Runtime, one GB of memory for an hour.
    :param acr_active_cpu_share: the estimate's share of one vCPU in use over a session.
    :param acr_memory_gb: the estimate's peak memory of a session.
    """

    node_hour_usd: float = 0.0
    num_nodes: int = 1
    acr_vcpu_hour_usd: float = ACR_VCPU_HOUR_USD
    acr_gb_hour_usd: float = ACR_GB_HOUR_USD
    acr_active_cpu_share: float = ACR_ACTIVE_CPU_SHARE
    acr_memory_gb: float = ACR_MEMORY_GB

    @classmethod
    def of(cls, settings: Any, num_nodes: int) -> Rates:
        """The prices in ``settings`` (a ToolkitConfig: its fields carry these names), for
        ``num_nodes`` nodes (the run's, or bin/eval's one)."""
        prices = (
            "node_hour_usd", "acr_vcpu_hour_usd", "acr_gb_hour_usd", "acr_active_cpu_share", "acr_memory_gb"
        )  # fmt: skip
        return cls(num_nodes=num_nodes, **{name: getattr(settings, name) for name in prices})

    def problems(self) -> list[str]:
        """What is wrong with these rates (negative, not finite, out of range), one line each."""
        found = []
        for name, value in vars(self).items():
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                found.append(f"{name.upper()} must be a finite number >= 0, got {value!r}")
        if not 0 <= self.acr_active_cpu_share <= ACR_MAX_VCPU:
            found.append(
                f"ACR_ACTIVE_CPU_SHARE must lie in 0..{ACR_MAX_VCPU:g} vCPU, got {self.acr_active_cpu_share}"
            )
        if not 0 <= self.acr_memory_gb <= ACR_MAX_GB:
            found.append(f"ACR_MEMORY_GB must lie in 0..{ACR_MAX_GB:g} GB, got {self.acr_memory_gb}")
        return found

    @property
    def acr_upper_per_second(self) -> float:
        return (ACR_MAX_VCPU * self.acr_vcpu_hour_usd + ACR_MAX_GB * self.acr_gb_hour_usd) / 3600

    @property
    def acr_estimate_per_second(self) -> float:
        return (
            self.acr_active_cpu_share * self.acr_vcpu_hour_usd + self.acr_memory_gb * self.acr_gb_hour_usd
        ) / 3600


@dataclass(frozen=True)
class Cost:
    """An amount by part, in USD.

    :param gpu: GPU nodes for the wall time.
    :param agent: what the agents reported.
    :param acr: AgentCore Runtime, the estimate.
    :param acr_upper: AgentCore Runtime, the upper bound (every session at the largest size).
    """

    gpu: float = 0.0
    agent: float = 0.0
    acr: float = 0.0
    acr_upper: float = 0.0

    @property
    def total(self) -> float:
        """GPU + agent-reported + the AgentCore estimate."""
        return self.gpu + self.agent + self.acr

    @property
    def total_upper(self) -> float:
        """GPU + agent-reported + the AgentCore upper bound."""
        return self.gpu + self.agent + self.acr_upper

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.gpu + other.gpu,
            self.agent + other.agent,
            self.acr + other.acr,
            self.acr_upper + other.acr_upper,
        )

    def scaled(self, factor: float) -> Cost:
        return Cost(self.gpu * factor, self.agent * factor, self.acr * factor, self.acr_upper * factor)

    def as_dict(self) -> dict[str, float]:
        """The parts and totals, for metrics.jsonl and summaries."""
        return {
            "gpu_usd": self.gpu,
            "agent_usd": self.agent,
            "acr_usd": self.acr,
            "acr_upper_usd": self.acr_upper,
            "total_usd": self.total,
            "total_upper_usd": self.total_upper,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Cost:
        """The inverse of :meth:`as_dict` (missing or non-numeric parts count as 0)."""

        def number(key: str) -> float:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0

        return cls(number("gpu_usd"), number("agent_usd"), number("acr_usd"), number("acr_upper_usd"))


@dataclass(frozen=True)
class EpisodeUsage:
    """What one episode used: its session's wall time and what the agent reported spending.

    :param session_seconds: from the invocation to the session's end (aborted ones included).
    :param agent_usd: the agent's own figure (None when it reported none or an unusable one).
    """

    session_seconds: float
    agent_usd: float | None = None


def reported_cost(
    result: Mapping[str, object] | None, key: str = AGENT_COST_KEY
) -> tuple[float | None, bool]:
    """The agent's own cost from its result: ``(amount, malformed)``.

    A missing key is ``(None, False)``; a value that is not a number in 0..
    :data:`MAX_AGENT_COST_USD` (a string, a negative, NaN, ``1e308``, an integer too large for
    a float) is ``(None, True)``: counted as 0, warned about once per step by the caller (and
    the episode itself fails, see :func:`cost_problem`).
    """
    if not result or key not in result:
        return None, False
    value = result[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, True
    try:
        amount = float(value)  # an int beyond ~1e308 raises OverflowError
    except OverflowError:
        return None, True
    if not 0 <= amount <= MAX_AGENT_COST_USD:  # NaN fails both comparisons
        return None, True
    return amount, False


def cost_problem(result: Mapping[str, object] | None, key: str = AGENT_COST_KEY) -> str | None:
    """Why the cost an agent reported is refused (None when it reported none or a usable one)."""
    if not reported_cost(result, key)[1]:
        return None
    assert result is not None
    shown = repr(result[key])
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return (
        f"result {key!r} is {shown}, not a number in 0..{MAX_AGENT_COST_USD:g} "
        "(USD one episode spent: fix how the agent computes it)"
    )


def episode_cost(rates: Rates, usage: EpisodeUsage) -> Cost:
    """An episode's AgentCore and agent-reported parts (GPUs are the step's, not an episode's)."""
    seconds = max(usage.session_seconds, 0.0)
    return Cost(
        agent=usage.agent_usd or 0.0,
        acr=seconds * rates.acr_estimate_per_second,
        acr_upper=seconds * rates.acr_upper_per_second,
    )


def gpu_cost(rates: Rates, wall_seconds: float) -> Cost:
    """The GPU nodes for ``wall_seconds`` of the run."""
    return Cost(gpu=rates.node_hour_usd * rates.num_nodes * max(wall_seconds, 0.0) / 3600)


def step_cost(rates: Rates, wall_seconds: float, episodes: Iterable[EpisodeUsage]) -> Cost:
    """A step's cost: its GPU wall time plus every episode it ran (aborted ones included)."""
    total = gpu_cost(rates, wall_seconds)
    for usage in episodes:
        total = total + episode_cost(rates, usage)
    return total


@dataclass(frozen=True)
class Schedule:
    """When slime saves, as slime decides it (``should_run_periodic_action`` at the pinned commit:
    after step N when (N+1) % interval == 0, at the end of an epoch, and after the last step).

    :param num_rollout: the run's steps.
    :param save_interval: ``--save-interval`` (None = never saves before the last step).
    :param rollouts_per_epoch: steps per pass over the data (None = not known).
    """

    num_rollout: int
    save_interval: int | None
    rollouts_per_epoch: int | None = None

    def saves_after(self, step: int) -> bool:
        if self.save_interval is None:
            return False
        if step == self.num_rollout - 1:
            return True
        done = step + 1
        return done % self.save_interval == 0 or bool(
            self.rollouts_per_epoch and done % self.rollouts_per_epoch == 0
        )

    def steps_to_next_save(self, step: int) -> int:
        """Steps from ``step`` (included) up to and including the next one that saves."""
        for ahead in range(step, self.num_rollout):
            if self.saves_after(ahead):
                return ahead - step + 1
        return self.num_rollout - step


@dataclass(frozen=True)
class Decision:
    """Whether the step about to start may run, and why not."""

    go: bool
    why: str = ""
    last_saved_step: int | None = None


@dataclass
class Budget:
    """``BUDGET_USD`` against what the run has spent, decided before each step.

    :param limit_usd: the budget.
    :param schedule: when slime saves.
    :param spent: the run's cost so far (carried over from metrics.jsonl on a resume).
    :param dearest_step: the highest total of one step so far (the projection of the next).
    """

    limit_usd: float
    schedule: Schedule
    spent: Cost = field(default_factory=Cost)
    dearest_step: float = 0.0
    #: the first step this process runs starts from a checkpoint (or from nothing): a safe stop
    _started: bool = False

    def record(self, step: Cost) -> None:
        """Add one step's cost (eval steps and aborted episodes included)."""
        self.spent = self.spent + step
        self.dearest_step = max(self.dearest_step, step.total)

    def before_step(self, step: int, first_estimate: float = 0.0) -> Decision:
        """May ``step`` start? Stops only where nothing is lost: right after a save (or at the
        first step of this process: a fresh start or a resume from a checkpoint), when the budget
        cannot reach the next save; or anywhere when even one more step would overshoot.

        :param step: the 0-based step about to start.
        :param first_estimate: the projected cost of a step before one has run.
        """
        per_step = self.dearest_step or first_estimate
        left = self.limit_usd - self.spent.total
        first, self._started = not self._started, True
        after_save = first or self.schedule.saves_after(step - 1)
        saved = step - 1 if step > 0 and after_save else None
        if per_step <= 0:
            return Decision(True)
        if after_save:
            needed = per_step * self.schedule.steps_to_next_save(step)
            if needed > left:
                return Decision(
                    False,
                    f"${self.spent.total:.2f} spent of ${self.limit_usd:.2f}: the next save is "
                    f"{self.schedule.steps_to_next_save(step)} step(s) away at up to ${per_step:.2f} each",
                    saved,
                )
            return Decision(True)
        if per_step > left:
            return Decision(
                False,
                f"${self.spent.total:.2f} spent of ${self.limit_usd:.2f}: "
                f"one more step (up to ${per_step:.2f}) would overshoot",
                None,
            )
        return Decision(True)


def projected_total(spent: Cost, per_step: Cost, steps_left: int) -> Cost:
    """The run's projected total: what it spent plus ``steps_left`` steps like ``per_step``."""
    return spent + per_step.scaled(max(steps_left, 0))


#: what the estimate assumes when no bin/eval of the agent says otherwise (printed as such)
ASSUMED_EPISODE_SECONDS = 60.0
#: training and weight sync take about as long as the rollout (sync); async overlaps them
ASSUMED_TRAIN_SHARE = 1.0


@dataclass(frozen=True)
class StepShape:
    """What one step does, for the projection before a run.

    :param episodes: episodes started per step (over-sampled ones included: they are billed).
    :param concurrent: episodes in flight at once.
    :param episode_seconds: one episode's session-seconds.
    :param agent_usd: what the agent reports per episode.
    :param train_share: the step's training time as a share of its rollout time (0 = overlapped).
    """

    episodes: int
    concurrent: int
    episode_seconds: float
    agent_usd: float = 0.0
    train_share: float = ASSUMED_TRAIN_SHARE

    @property
    def wall_seconds(self) -> float:
        waves = math.ceil(self.episodes / max(self.concurrent, 1))
        return waves * self.episode_seconds * (1.0 + self.train_share)


def projected_step(rates: Rates, shape: StepShape) -> Cost:
    """One step's projected cost: its GPU wall time and every episode it starts."""
    usage = EpisodeUsage(shape.episode_seconds, shape.agent_usd)
    return gpu_cost(rates, shape.wall_seconds) + episode_cost(rates, usage).scaled(shape.episodes)
