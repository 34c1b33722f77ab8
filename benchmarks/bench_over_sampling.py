#!/usr/bin/env python3
"""Benchmark: step time with heavy-tailed agent episodes, wait-for-all vs over-sampling with a tail cut.

Simulated agents in compressed time: every episode sleeps a duration drawn from a lognormal
whose p99 is ten times its median (sigma = ln 10 / 2.326), scaled so the median episode takes
``--median-ms`` of real time. Each prompt group has a difficulty ``d`` ~ U(0, 1): its episodes
take ``(1 + d)`` times longer and succeed (reward 1) with probability ``1 - d``, so cutting the
tail can favour easy prompts; the benchmark measures by how much.

Both modes run the rollout's own scheduler (``agentcore_slime.rollout.sampling.sample_groups``) with
cancellation as the abort, the same code ``generate_rollout`` runs:

- wait-for-all: ``--rollout-batch-size`` groups fetched, the step waits for all of them;
- over-sampled: ``--over-sampling`` (default 25%) more groups fetched, the step returns when
  ``--rollout-batch-size`` groups are complete and cancels the rest.

Reported per mode over ``--steps`` steps: mean and p90 step time in median-episode units,
episodes started per step, episodes aborted; and for the over-sampled mode the mean reward of
kept groups vs aborted groups (their rewards are drawn up front, so the simulation knows what
they would have scored) and vs wait-for-all's groups.

Run: ``.venv/bin/python benchmarks/bench_over_sampling.py [--steps 20]`` from the repo root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from agentcore_slime.rollout.sampling import SamplingPlan, sample_groups  # noqa: E402

SIGMA = math.log(10) / 2.326  # lognormal with p99 = 10 x median


@dataclass
class SimGroup:
    """A prompt group: per episode (duration in median units, reward)."""

    episodes: list[tuple[float, float]]

    @property
    def reward(self) -> float:
        return statistics.fmean(r for _, r in self.episodes)


def draw_group(rng: random.Random, size: int) -> SimGroup:
    difficulty = rng.random()
    episodes = []
    for _ in range(size):
        duration = (1 + difficulty) * math.exp(rng.gauss(0.0, SIGMA)) / 1.5  # median ~1 unit overall
        episodes.append((duration, 1.0 if rng.random() > difficulty else 0.0))
    return SimGroup(episodes)


async def run_step(
    groups: list[SimGroup], target: int, unit: float
) -> tuple[float, list[SimGroup], list[SimGroup]]:
    """One step: returns (seconds, kept groups, aborted groups)."""
    queue = list(groups)

    async def fetch(count: int) -> list[SimGroup]:
        taken, queue[:] = queue[:count], queue[count:]
        return taken

    async def run_group(group: SimGroup) -> SimGroup:
        await asyncio.gather(*(asyncio.sleep(d * unit) for d, _ in group.episodes))
        return group

    plan = SamplingPlan(target=target, fetch_size=len(groups), max_extra_groups=len(groups) - target)
    started = time.perf_counter()
    outcome = await sample_groups(plan, fetch, run_group, lambda group: (True, None))
    return time.perf_counter() - started, outcome.kept, outcome.aborted


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollout-batch-size", type=int, default=32)
    parser.add_argument("--n-samples-per-prompt", type=int, default=8)
    parser.add_argument("--over-sampling", type=float, default=0.25, help="extra groups, as a fraction")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--median-ms", type=float, default=20.0, help="real time of one median episode")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    unit = args.median_ms / 1000
    target, size = args.rollout_batch_size, args.n_samples_per_prompt
    extra = math.ceil(target * args.over_sampling)
    full_times, over_times, all_rewards, kept_rewards, aborted_rewards = [], [], [], [], []
    for _ in range(args.steps):
        groups = [draw_group(rng, size) for _ in range(target + extra)]
        seconds, kept, _ = asyncio.run(run_step(groups[:target], target, unit))
        full_times.append(seconds / unit)
        all_rewards += [g.reward for g in kept]
        seconds, kept, aborted = asyncio.run(run_step(groups, target, unit))
        over_times.append(seconds / unit)
        kept_rewards += [g.reward for g in kept]
        aborted_rewards += [g.reward for g in aborted]

    def p90(values: list[float]) -> float:
        return sorted(values)[int(0.9 * (len(values) - 1))]

    report = {
        "groups_per_step": target,
        "episodes_per_group": size,
        "extra_groups": extra,
        "wait_for_all": {
            "step_time_mean_units": round(statistics.fmean(full_times), 2),
            "step_time_p90_units": round(p90(full_times), 2),
            "episodes_started_per_step": target * size,
            "mean_reward_of_trained_groups": round(statistics.fmean(all_rewards), 4),
        },
        "over_sampled": {
            "step_time_mean_units": round(statistics.fmean(over_times), 2),
            "step_time_p90_units": round(p90(over_times), 2),
            "episodes_started_per_step": (target + extra) * size,
            "episodes_aborted_per_step": round(len(aborted_rewards) * size / args.steps, 1),
            "mean_reward_of_kept_groups": round(statistics.fmean(kept_rewards), 4),
            "mean_reward_of_aborted_groups": (
                round(statistics.fmean(aborted_rewards), 4) if aborted_rewards else None
            ),
        },
        "speedup_mean": round(statistics.fmean(full_times) / statistics.fmean(over_times), 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
