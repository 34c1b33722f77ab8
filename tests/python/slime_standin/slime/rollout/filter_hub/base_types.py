"""Stand-in of ``slime.rollout.filter_hub.base_types`` at ``fa3c990``.

The dynamic-sampling filter's return type and the wrapper slime calls filters through:
``call_dynamic_filter(fn, *args, **kwargs)`` returns ``DynamicFilterOutput(keep=True)`` when
``fn`` is None, and wraps a legacy bool return value into a ``DynamicFilterOutput``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class DynamicFilterOutput:
    keep: bool
    reason: str | None = None


def call_dynamic_filter(fn: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> DynamicFilterOutput:
    if fn is None:
        return DynamicFilterOutput(keep=True)
    output = fn(*args, **kwargs)
    if not isinstance(output, DynamicFilterOutput):
        output = DynamicFilterOutput(keep=output)
    return output


class MetricGatherer:
    """Counts filter drops by reason as ``rollout/dynamic_filter/drop_<reason>``."""

    def __init__(self) -> None:
        self._dynamic_filter_drop_reason_count: defaultdict[str, int] = defaultdict(lambda: 0)

    def on_dynamic_filter_drop(self, reason: str | None) -> None:
        if not reason:
            return
        self._dynamic_filter_drop_reason_count[reason] += 1

    def collect(self) -> dict[str, int]:
        return {
            f"rollout/dynamic_filter/drop_{reason}": count
            for reason, count in self._dynamic_filter_drop_reason_count.items()
        }
