"""Stand-in of ``slime.rollout.base_types``: the rollout function's return types.

Mirrors ``slime/rollout/base_types.py`` at ``fa3c990``: two dataclasses and the wrapper
RolloutManager uses to call a rollout function (``fn(args, rollout_id, data_source,
evaluation=...)``; any other return value is wrapped, metrics ``None``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slime.utils.types import Sample


@dataclass
class RolloutFnTrainOutput:
    """Training output: one list of Samples per prompt group."""

    samples: list[list[Sample]]
    metrics: dict[str, Any] | None = None


@dataclass
class RolloutFnEvalOutput:
    """Eval output: dataset name -> {"rewards", "truncated", "samples"}."""

    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] | None = None


def call_rollout_fn(fn: Callable[..., Any], *args: Any, evaluation: bool, **kwargs: Any) -> Any:
    """Call ``fn`` the way slime's RolloutManager does and wrap legacy return values."""
    output = fn(*args, **kwargs, evaluation=evaluation)
    if not isinstance(output, RolloutFnTrainOutput | RolloutFnEvalOutput):
        output = RolloutFnEvalOutput(data=output) if evaluation else RolloutFnTrainOutput(samples=output)
    return output
