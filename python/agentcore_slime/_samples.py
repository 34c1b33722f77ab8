"""Sample helpers shared by the rollout, the trace merger and the reward hook.

Everything the shim adds to a slime ``Sample`` lives under one metadata key
(:data:`METADATA_KEY`), so a user's own metadata keys are never overwritten. The
zero-gradient samples (failed episodes and padding) are built here so that they
always satisfy slime's invariants: at least one prompt token, at least one
response token, loss mask all 0, rollout log probs present, reward 0.0.
"""

from __future__ import annotations

from typing import Any

#: metadata key holding the shim's per-sample record (session id, kind, reason, ...)
METADATA_KEY = "agentcore"

KIND_EPISODE = "episode"
KIND_FAILED = "failed"
KIND_PADDING = "padding"

# A token id that exists in every vocabulary; used only in zero-gradient samples.
_FILLER_TOKEN = 0


def shim_info(sample: Any) -> dict[str, Any]:
    """The shim's record of ``sample`` (empty when the sample did not come from the shim).

    :param sample: a slime ``Sample``.
    """
    metadata = getattr(sample, "metadata", None)
    if isinstance(metadata, dict):
        info = metadata.get(METADATA_KEY)
        if isinstance(info, dict):
            return info
    return {}


def is_padding(sample: Any) -> bool:
    """True for the zero-gradient samples added only to satisfy slime's batch split."""
    return shim_info(sample).get("kind") == KIND_PADDING


def with_info(metadata: Any, info: dict[str, Any]) -> dict[str, Any]:
    """A new metadata dict: the row's metadata (shallow copy) plus the shim's record.

    :param metadata: the row's metadata; a non-dict value is kept under ``row_metadata``.
    :param info: the shim's record for this sample.
    """
    if isinstance(metadata, dict):
        result = dict(metadata)
    else:
        result = {"row_metadata": metadata}
    result[METADATA_KEY] = info
    return result


def zero_gradient_sample(
    sample_cls: type,
    *,
    template: Any | None,
    info: dict[str, Any],
    rollout_id: int,
    status: Any,
) -> Any:
    """A sample that trains nothing: 1 prompt token, 1 response token, loss mask ``[0]``.

    :param sample_cls: the slime ``Sample`` class.
    :param template: the data-source sample it stands for (group, index, prompt, label
        and metadata are copied), or None for pure padding.
    :param info: the shim's record stored under :data:`METADATA_KEY`.
    :param rollout_id: slime's rollout id for this sample.
    :param status: the ``Sample.Status`` to set.
    """
    sample = sample_cls(
        group_index=getattr(template, "group_index", None),
        index=getattr(template, "index", None),
        rollout_id=rollout_id,
        prompt=getattr(template, "prompt", ""),
        label=getattr(template, "label", None),
        tokens=[_FILLER_TOKEN, _FILLER_TOKEN],
        response="",
        response_length=1,
        loss_mask=[0],
        rollout_log_probs=[0.0],
        reward=0.0,
        remove_sample=True,
        status=status,
        metadata=with_info(getattr(template, "metadata", {}), info),
        session_id=info.get("session_id"),
    )
    return sample
