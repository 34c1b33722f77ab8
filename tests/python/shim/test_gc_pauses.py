"""A step runs without full garbage collections (rollout/gc_pauses.py).

The real rollout with the shim's stand-ins (HTTP agent, stand-in gateway, moto S3). The
agent stand-in runs in this process, so what it allocates while the step runs is what the
collector sees during the step: 400,000 lists kept alive, enough to make Python start a
full collection under its own thresholds (the control, outside a step, shows it does).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from agentcore_slime import rollout
from fakes.data_source import ListDataSource

from shim.standins import Behaviour, make_args

KEPT = 100_000  # lists (always tracked by the collector) each episode keeps alive until the test ends


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """Every generation-2 collection while the fixture is active, as it finishes."""
    seen: list[int] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(info["collected"])

    gc.callbacks.append(watch)
    yield seen
    gc.callbacks.remove(watch)


def test_no_full_collection_while_a_step_runs(
    s3_bucket: str, agents: Any, shim_state: Any, full_collections: list[int]
) -> None:
    kept: list[Any] = []

    def allocating(payload: dict[str, Any], sid: str) -> Behaviour:
        kept.append([[n] for n in range(KEPT)])
        return Behaviour(result={"rewards": 1.0})

    agent = agents.start(allocating)
    args = make_args(agent_url=agent.url, s3_bucket=s3_bucket, rollout_batch_size=1, n_samples_per_prompt=4)
    source = ListDataSource([{"prompt": "q", "metadata": {"q": 0}}], n_samples_per_prompt=4)
    thresholds = gc.get_threshold()

    rollout.generate_rollout(args, 0, source)  # the first step also freezes what exists
    assert gc.get_freeze_count() > 0
    del full_collections[:]
    rollout.generate_rollout(args, 1, source)

    assert len(kept) == 8
    assert full_collections == []  # none while the step ran
    assert gc.get_threshold() == thresholds  # Python's own thresholds again after the step

    # the control: the same allocation outside a step does start full collections
    kept.append([[[n] for n in range(KEPT)] for _ in range(4)])
    assert full_collections, "the control allocation made no full collection: the test shows nothing"


def test_overlapping_steps_keep_full_collections_deferred_until_the_last_returns() -> None:
    """An eval step overlapping a training step (slime's async mode): the first to return does
    not bring full collections back while the other still runs."""
    from agentcore_slime.gateway.memory import FULL_COLLECTIONS_DEFERRED
    from agentcore_slime.rollout.gc_pauses import full_collections_deferred

    thresholds = gc.get_threshold()
    train, evaluation = full_collections_deferred(), full_collections_deferred()
    train.__enter__()
    evaluation.__enter__()
    train.__exit__(None, None, None)
    assert gc.get_threshold()[2] == FULL_COLLECTIONS_DEFERRED
    evaluation.__exit__(None, None, None)
    assert gc.get_threshold() == thresholds
