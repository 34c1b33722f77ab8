"""Eval datasets: read a JSONL (or parquet) file into prompt rows, like slime's Dataset.

slime gives the rollout ``args.eval_datasets`` (resolved ``EvalDatasetConfig``s). The
agent payload is a row's ``metadata`` dict, so rows are read without tokenizing:
``prompt = row[input_key]``, ``label = row[label_key]``, ``metadata = row[metadata_key]``
(``{}`` when missing or null; another non-dict value is kept and fails its episodes),
``metadata["tools"]`` from ``tool_key``. A ``path@[start:end]`` suffix slices rows.

slime v0.3.1 on also gives each eval dataset ``stop``, ``stop_token_ids`` and ``min_new_tokens``
(the dataset's entry, then ``eval.defaults``, then ``--rollout-stop``, ``--rollout-stop-token-ids``
and ``--eval-min-new-tokens``). They are resolved here the same way; the gateway's session
sampling does not carry them to SGLang yet, so a dataset that sets one is refused with a clear
error (:data:`UNHONOURED_EVAL_SAMPLING`) instead of being evaluated without it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: per-dataset eval sampling keys of slime v0.3.1 on -> (slime's args fallback, why not honoured)
UNHONOURED_EVAL_SAMPLING = {
    "stop": "rollout_stop",
    "stop_token_ids": "rollout_stop_token_ids",
    "min_new_tokens": "eval_min_new_tokens",
}

_SLICE_RE = re.compile(r"^(?P<path>.+)@\[(?P<start>-?\d*):(?P<end>-?\d*)\]$")


@dataclass
class EvalRow:
    """One prompt of an eval dataset."""

    prompt: Any
    label: Any
    metadata: Any


@dataclass
class EvalSpec:
    """One eval dataset with its resolved sampling settings."""

    name: str
    path: str
    n_samples: int
    sampling: dict[str, Any]
    input_key: str = "input"
    label_key: str | None = None
    metadata_key: str = "metadata"
    tool_key: str | None = "tools"
    metadata_overrides: dict[str, Any] = field(default_factory=dict)
    #: slime's per-dataset stop strings, stop token ids and min_new_tokens (v0.3.1 on), resolved
    stops: dict[str, Any] = field(default_factory=dict)

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (self.name, self.path, self.input_key, self.label_key, self.tool_key, self.metadata_key)


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def eval_specs(args: Any) -> list[EvalSpec]:
    """The eval datasets from ``args.eval_datasets`` (or ``args.eval_prompt_data`` pairs).

    :raises ValueError: when no eval dataset is configured.
    """
    configs = list(getattr(args, "eval_datasets", None) or [])
    if not configs:
        flat = list(getattr(args, "eval_prompt_data", None) or [])
        configs = [{"name": flat[i], "path": flat[i + 1]} for i in range(0, len(flat) - 1, 2)]
    if not configs:
        raise ValueError(
            "evaluation requested but no eval dataset is set (pass --eval-prompt-data NAME PATH)"
        )
    specs = [_spec(args, c) for c in configs]
    refused = [f"{spec.name}: {key}={value!r}" for spec in specs for key, value in spec.stops.items()]
    if refused:
        raise ValueError(
            f"eval datasets set {'; '.join(refused)}, which the agent rollout cannot pass to SGLang "
            "yet (the gateway's sessions carry temperature, top_p, top_k and max_new_tokens): remove "
            "them from --eval-config (datasets and eval.defaults), --rollout-stop, "
            "--rollout-stop-token-ids and --eval-min-new-tokens, or let the agent send `stop`"
        )
    return specs


def _spec(args: Any, config: Any) -> EvalSpec:
    def get(name: str) -> Any:
        return config.get(name) if isinstance(config, dict) else getattr(config, name, None)

    sampling = {
        "temperature": _first(
            get("temperature"),
            getattr(args, "eval_temperature", None),
            getattr(args, "rollout_temperature", None),
        ),
        "top_p": _first(
            get("top_p"), getattr(args, "eval_top_p", None), getattr(args, "rollout_top_p", None)
        ),
        "top_k": _first(
            get("top_k"), getattr(args, "eval_top_k", None), getattr(args, "rollout_top_k", None)
        ),
        "max_new_tokens": _first(
            get("max_response_len"),
            getattr(args, "eval_max_response_len", None),
            getattr(args, "rollout_max_response_len", None),
        ),
    }
    return EvalSpec(
        name=str(get("name")),
        path=str(get("path")),
        n_samples=int(
            _first(get("n_samples_per_eval_prompt"), getattr(args, "n_samples_per_eval_prompt", None), 1)
        ),
        sampling={k: v for k, v in sampling.items() if v is not None},
        input_key=_first(
            get("input_key"), getattr(args, "eval_input_key", None), getattr(args, "input_key", None), "input"
        ),
        label_key=_first(
            get("label_key"), getattr(args, "eval_label_key", None), getattr(args, "label_key", None)
        ),
        metadata_key=_first(get("metadata_key"), getattr(args, "metadata_key", None), "metadata"),
        tool_key=_first(get("tool_key"), getattr(args, "tool_key", None), "tools"),
        metadata_overrides=dict(get("metadata_overrides") or {}),
        stops={
            key: value
            for key, attr in UNHONOURED_EVAL_SAMPLING.items()
            if (value := _first(get(key), getattr(args, attr, None))) not in (None, [], "", 0)
        },
    )


def _read_records(path: str) -> list[dict[str, Any]]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"eval dataset {path} does not exist (check --eval-prompt-data / --eval-config)"
        )
    if file.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise RuntimeError(
                f"reading {path} needs pyarrow (pip install pyarrow) or a .jsonl file"
            ) from exc
        return list(pq.read_table(file).to_pylist())
    records = []
    with file.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # slime skips unreadable lines too
                if isinstance(record, dict):
                    records.append(record)
    return records


def load_rows(spec: EvalSpec) -> list[EvalRow]:
    """Read ``spec.path`` (optionally ``path@[start:end]``) into rows."""
    path, window = spec.path, slice(None)
    match = _SLICE_RE.match(spec.path)
    if match:
        path = match.group("path")
        window = slice(
            int(match.group("start") or 0), int(match.group("end")) if match.group("end") else None
        )
    rows = []
    for record in _read_records(path)[window]:
        metadata = record.get(spec.metadata_key) or {}
        if isinstance(metadata, dict):
            metadata = {**metadata, **spec.metadata_overrides}
            if spec.tool_key and spec.tool_key in record:
                tools = record[spec.tool_key]
                metadata["tools"] = json.loads(tools) if isinstance(tools, str) else tools
        label = record.get(spec.label_key) if spec.label_key else None
        rows.append(EvalRow(prompt=record.get(spec.input_key), label=label, metadata=metadata))
    return rows
