"""Sample helpers shared by the rollout, the trace merger and the reward hook.

Everything the shim adds to a slime ``Sample`` lives under one metadata key
(:data:`METADATA_KEY`), so a user's own metadata keys are never overwritten. The
zero-gradient samples (failed episodes and padding) are built here so that they
always satisfy slime's invariants: at least one prompt token, at least one
response token, loss mask all 0, rollout log probs present, reward 0.0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

#: metadata key holding the shim's per-sample record (session id, kind, reason, ...)
METADATA_KEY = "agentcore"

KIND_EPISODE = "episode"
KIND_FAILED = "failed"
KIND_PADDING = "padding"

# A token id that exists in every vocabulary; used only in zero-gradient samples.
_FILLER_TOKEN = 0


@dataclass(frozen=True)
class ShimRecord:
    """The shim's record of one Sample, kept in ``sample.metadata["agentcore"]``.

    It is stored there as a plain dict (:meth:`as_metadata`): slime writes metadata into
    ``--save-debug-rollout-data`` dumps and ships it between Ray actors, and the keys are part
    of docs/rollout.md. Code reads it back through :meth:`of`, never by string keys.

    :param kind: ``episode``, ``failed`` or ``padding`` ("" for a sample the shim did not make).
    :param session_id: the episode's session id (None for padding).
    :param reason: why the episode failed (failed samples only).
    :param segment: which prefix-extending segment of the episode this sample is.
    :param segments: how many segments the episode has.
    :param calls: the gateway calls (indices into the session's traces) in this segment.
    :param failure: the failure's reason code (failed samples only; see episodes/runner.py).
    :param failure_class: ``infrastructure`` for every failure (failed samples only).
    :param tool_call_errors: the calls of this segment (indices as in ``calls``) whose text held a
        tool call the gateway could not read (the trace's ``tool_call_errors``).
    """

    kind: str
    session_id: str | None = None
    reason: str | None = None
    segment: int | None = None
    segments: int | None = None
    calls: tuple[int, ...] = ()
    failure: str | None = None
    failure_class: str | None = None
    tool_call_errors: tuple[int, ...] = ()

    def as_metadata(self) -> dict[str, Any]:
        """The record as stored in metadata: a dict without the fields that are unset."""
        # a flat record: read field by field (dataclasses.asdict deep-copies each value, a
        # twentieth of the rollout's CPU in a step of a thousand episodes)
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        record["calls"] = list(self.calls)
        record["tool_call_errors"] = list(self.tool_call_errors)
        return {k: v for k, v in record.items() if k in ("kind", "session_id") or v not in (None, [])}

    @classmethod
    def of(cls, sample: Any) -> ShimRecord:
        """The record of ``sample`` (``kind`` "" when the sample did not come from the shim).

        :param sample: a slime ``Sample``.
        """
        metadata = getattr(sample, "metadata", None)
        stored = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
        if not isinstance(stored, dict):
            return cls(kind="")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in stored.items() if k in known}
        values["calls"] = tuple(values.get("calls") or ())
        values["tool_call_errors"] = tuple(values.get("tool_call_errors") or ())
        values.setdefault("kind", "")
        return cls(**values)


def is_padding(sample: Any) -> bool:
    """True for the zero-gradient samples added only to satisfy slime's batch split."""
    return ShimRecord.of(sample).kind == KIND_PADDING


def with_record(metadata: Any, record: ShimRecord) -> dict[str, Any]:
    """A new metadata dict: the row's metadata (shallow copy) plus the shim's record.

    :param metadata: the row's metadata; a non-dict value is kept under ``row_metadata``.
    :param record: the shim's record for this sample.
    """
    if isinstance(metadata, dict):
        result = dict(metadata)
    else:
        result = {"row_metadata": metadata}
    result[METADATA_KEY] = record.as_metadata()
    return result


def zero_gradient_sample(
    sample_cls: type,
    *,
    template: Any | None,
    record: ShimRecord,
    rollout_id: int,
    status: Any,
) -> Any:
    """A sample that trains nothing: 1 prompt token, 1 response token, loss mask ``[0]``.

    :param sample_cls: the slime ``Sample`` class.
    :param template: the data-source sample it stands for (group, index, prompt, label
        and metadata are copied), or None for pure padding.
    :param record: the shim's record stored under :data:`METADATA_KEY`.
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
        metadata=with_record(getattr(template, "metadata", {}), record),
        session_id=record.session_id,
    )
    carry_source(template, sample)
    return sample


def carry_source(template: Any, sample: Any) -> None:
    """Give ``sample`` the ``source`` a custom data source set on ``template``, if any.

    slime (v0.3.1 on, #2184) reports ``train_data["source_names"]`` per sample from
    ``sample.source``, else ``metadata["source_name"]`` (carried with the row's metadata), else
    ``"unknown"``; the samples the rollout builds are new objects, so the attribute is copied.

    :param template: the data-source sample.
    :param sample: a sample built for it.
    """
    source = getattr(template, "source", None)
    if source:
        sample.source = source
