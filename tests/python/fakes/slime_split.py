"""What slime does with a training step's samples after the rollout returns (for tests).

A re-statement, in our own words, of the checks of slime ``fa3c990``
(``slime/ray/rollout.py:_convert_samples_to_train_data`` and
``slime/utils/dp_schedule.py:build_dp_schedule``; slime-contract.md 2.3, 2.4, 5.2):
sample invariants, then the split into optimizer steps by rollout id and the
micro-batch alignment. Returns the positions of the samples that get trained on, so a
test can check that no real sample is dropped.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def flatten(groups: Any) -> list[Any]:
    data = groups
    while data and isinstance(data[0], list):
        data = [item for part in data for item in part]
    return data


def check_sample_invariants(samples: list[Any]) -> None:
    """The per-sample checks the training path relies on."""
    has_logprobs = samples[0].rollout_log_probs is not None
    for sample in samples:
        assert isinstance(sample.response, str)
        assert sample.response_length >= 1
        assert len(sample.tokens) - sample.response_length >= 1
        assert sample.loss_mask is not None and len(sample.loss_mask) == sample.response_length
        if has_logprobs:
            assert sample.rollout_log_probs is not None
            assert len(sample.rollout_log_probs) == sample.response_length
        assert isinstance(sample.reward, float)
        sample._validate_response_metadata_lengths()


def trained_positions(args: SimpleNamespace, samples: list[Any], dp_size: int) -> set[int]:
    """Positions of the samples slime's DP schedule keeps; AssertionError where slime raises."""
    rollout_ids = [s.rollout_id for s in samples]
    assert all(r is not None for r in rollout_ids)
    by_rollout: dict[int, list[int]] = {}
    for position, rid in enumerate(rollout_ids):
        by_rollout.setdefault(rid, []).append(position)
    order = list(by_rollout)
    per_step = args.global_batch_size
    steps = len(order) // per_step
    assert steps >= 1, "fewer rollouts than global_batch_size"
    kept: set[int] = set()
    for step in range(steps):
        positions = [p for rid in order[step * per_step : (step + 1) * per_step] for p in by_rollout[rid]]
        assert len(positions) >= dp_size, "a step needs at least one sample per rank"
        if not args.use_dynamic_batch_size:
            micro_batches = -(-len(positions) // args.micro_batch_size)
            assert micro_batches % dp_size == 0, "static micro-batch count is not a multiple of dp_size"
        kept.update(positions)
    return kept
