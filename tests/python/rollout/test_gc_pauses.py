"""No full garbage collection while a step's episodes run (rollout/gc_pauses.py).

The real rollout with the shim's stand-ins (HTTP agent, stand-in gateway, moto S3). The
agent stand-in runs in this process, so what it allocates while the step runs is what the
collector sees during the step: 400,000 lists kept alive, enough to make Python start a
full collection under its own thresholds (the control, outside a step, shows it does).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from agentcore_slime import rollout
from fakes.data_source import ListDataSource
from fakes.standins import Behaviour, make_args

KEPT = 100_000  # lists (always tracked by the collector) each episode keeps alive until the test ends


@pytest.fixture
def full_collections() -> Iterator[list[str]]:
    """The thread of every generation-2 collection while the fixture is active."""
    seen: list[str] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(threading.current_thread().name)

    gc.callbacks.append(watch)
    yield seen
    gc.callbacks.remove(watch)


def test_no_full_collection_while_a_steps_episodes_run(
    s3_bucket: str, agents: Any, shim_state: Any, full_collections: list[str]
) -> None:
    kept: list[Any] = []

    def allocating(payload: dict[str, Any], sid: str) -> Behaviour:
        kept.append([[n] for n in range(KEPT)])  # in the agent stand-in's thread
        return Behaviour(result={"rewards": 1.0})

    agent = agents.start(allocating)
    args = make_args(agent_url=agent.url, s3_bucket=s3_bucket, rollout_batch_size=1, n_samples_per_prompt=4)
    source = ListDataSource([{"prompt": "q", "metadata": {"q": 0}}], n_samples_per_prompt=4)
    thresholds = gc.get_threshold()
    main = threading.current_thread().name

    rollout.generate_rollout(args, 0, source)  # the first step also freezes what exists
    assert gc.get_freeze_count() > 0
    for step in (1, 2):
        del full_collections[:]
        rollout.generate_rollout(args, step, source)
        assert [t for t in full_collections if t != main] == []  # none while the episodes ran
        assert gc.get_threshold() == thresholds  # Python's own thresholds again after the step
    # step 1's episodes made full collections due: step 2 began with one, in the caller's thread
    assert full_collections == [main]
    assert len(kept) == 12

    # the control: the same allocation outside a step does start full collections
    control = threading.Thread(target=lambda: kept.append([[[n] for n in range(KEPT)] for _ in range(4)]))
    control.start()
    control.join()
    assert control.name in full_collections, "the control allocation made no full collection"


def test_overlapping_steps_keep_full_collections_deferred_until_the_last_returns() -> None:
    """An eval step overlapping a training step (slime's async mode): the first to return does
    not bring full collections back while the other still runs."""
    from agentcore_slime.gateway.memory import FULL_COLLECTIONS_DEFERRED
    from agentcore_slime.rollout.gc_pauses import full_collections_deferred

    thresholds = gc.get_threshold()
    with ExitStack() as evaluation:
        with full_collections_deferred():
            evaluation.enter_context(full_collections_deferred())
        assert gc.get_threshold()[2] == FULL_COLLECTIONS_DEFERRED  # the training step returned first
    assert gc.get_threshold() == thresholds
