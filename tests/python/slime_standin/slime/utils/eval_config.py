"""Stand-in of ``slime.utils.eval_config.EvalDatasetConfig`` at slime ``fa3c990``.

The same fields, defaults and validation as ``slime/utils/eval_config.py:119-206`` at
``fa3c990``: every per-dataset setting defaults to ``None`` (slime resolves them from the
dataset entry, the eval config's ``defaults`` and then the args *before* the rollout
sees them, ``build_eval_dataset_configs``; a config built by hand keeps its ``None``s),
``metadata_overrides`` must be a mapping (``TypeError``), ``min_eval_samples`` must be
positive (``ValueError``). :func:`build_eval_dataset_configs` reproduces that resolution
for the few fields the shim reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# field -> the args attributes slime falls back to, in order (eval_config.py:10-84 at fa3c990)
_ARG_FALLBACKS: dict[str, tuple[str, ...]] = {
    "n_samples_per_eval_prompt": ("n_samples_per_eval_prompt", "n_samples_per_prompt"),
    "temperature": ("eval_temperature", "rollout_temperature"),
    "top_p": ("eval_top_p", "rollout_top_p"),
    "top_k": ("eval_top_k", "rollout_top_k"),
    "max_response_len": ("eval_max_response_len", "rollout_max_response_len"),
    "min_eval_samples": (),
    "input_key": ("eval_input_key", "input_key"),
    "label_key": ("eval_label_key", "label_key"),
    "tool_key": ("eval_tool_key", "tool_key"),
    "metadata_key": ("metadata_key",),
    "multimodal_keys": ("multimodal_keys",),
    "apply_chat_template": ("apply_chat_template",),
    "apply_chat_template_kwargs": ("apply_chat_template_kwargs",),
    "custom_rm_path": ("eval_custom_rm_path", "custom_rm_path"),
}


@dataclass
class EvalDatasetConfig:
    """One eval dataset as slime hands it to the rollout in ``args.eval_datasets``."""

    name: str
    path: str
    rm_type: str | None = None
    custom_rm_path: str | None = None
    input_key: str | None = None
    label_key: str | None = None
    tool_key: str | None = None
    metadata_key: str | None = None
    multimodal_keys: dict[str, str] | None = None
    apply_chat_template: bool | None = None
    apply_chat_template_kwargs: dict[str, Any] | None = None
    n_samples_per_eval_prompt: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_response_len: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    min_new_tokens: int | None = None
    repetition_penalty: float | None = None
    skip_special_tokens: bool | None = None
    no_stop_trim: bool | None = None
    custom_generate_function_path: str | None = None
    app_service: str | None = None
    eval_task_timeout: int | None = None
    min_eval_samples: int | None = None
    eval_early_stop_remaining: int | None = None
    eval_early_stop_idle_timeout: float | None = None
    message_processor: dict[str, Any] | None = None
    reward_model: dict[str, Any] | None = None
    remote_environment: dict[str, Any] | None = None
    metadata_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metadata_overrides is None:
            self.metadata_overrides = {}
        elif not isinstance(self.metadata_overrides, dict):
            raise TypeError("metadata_overrides must be a mapping.")
        if self.min_eval_samples is not None and self.min_eval_samples <= 0:
            raise ValueError("min_eval_samples must be positive when set.")

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (self.name, self.path, self.input_key, self.label_key, self.tool_key, self.metadata_key)

    def inject_metadata(self, sample_metadata: Any) -> dict[str, Any]:
        """A copy of ``sample_metadata`` ({} if not a dict) plus ``rm_type`` and the overrides."""
        metadata = dict(sample_metadata) if isinstance(sample_metadata, dict) else {}
        if self.rm_type is not None:
            metadata["rm_type"] = self.rm_type
        metadata.update(self.metadata_overrides)
        return metadata


def build_eval_dataset_configs(
    args: Any, raw_config: list[dict[str, Any]], defaults: dict[str, Any] | None = None
) -> list[EvalDatasetConfig]:
    """Resolve each entry as slime does: dataset entry, then ``defaults``, then the first
    non-None of the args attributes (``getattr(args, name, None)``)."""
    defaults = defaults or {}
    datasets = []
    for entry in raw_config:
        resolved = dict(entry or {})
        for name, attrs in _ARG_FALLBACKS.items():
            if name in resolved:
                continue
            if name in defaults:
                resolved[name] = defaults[name]
                continue
            resolved[name] = next((v for v in (getattr(args, a, None) for a in attrs) if v is not None), None)
        datasets.append(EvalDatasetConfig(**resolved))
    return datasets
