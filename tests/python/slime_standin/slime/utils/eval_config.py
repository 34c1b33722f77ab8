"""Stand-in of ``slime.utils.eval_config.EvalDatasetConfig`` (slime-contract.md 5.3).

Only the fields a custom rollout reads; values are already resolved (slime resolves
dataset entry -> defaults -> args before the rollout sees them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvalDatasetConfig:
    """One eval dataset as slime hands it to the rollout in ``args.eval_datasets``."""

    name: str
    path: str
    input_key: str | None = "input"
    label_key: str | None = None
    tool_key: str | None = "tools"
    metadata_key: str | None = "metadata"
    n_samples_per_eval_prompt: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_response_len: int | None = None
    rm_type: str | None = None
    metadata_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (self.name, self.path, self.input_key, self.label_key, self.tool_key, self.metadata_key)
