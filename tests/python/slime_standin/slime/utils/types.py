"""Stand-in of ``slime.utils.types.Sample`` at the pinned slime commit ``fa3c990``.

Field order, types, defaults and ``Status`` values follow ``slime/utils/types.py:93-251``
at ``fa3c990`` (including the nested ``SpecInfo`` / ``PrefixCacheInfo`` dataclasses that
slime's rollout metrics read from every sample, ``to_dict`` / ``from_dict``). Lists
instead of torch tensors; ``append_response_tokens`` and ``_validate_response_metadata_lengths``
enforce the same length invariants and raise ``ValueError`` under the same conditions
(``types.py:253-418``). Not reproduced: SGLang top-p replay decoding and routed-expert
decoding from ``meta_info`` (the shim never sends ``meta_info`` with those).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    """One training sequence: prompt tokens followed by ``response_length`` response tokens."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | None = None
    rollout_top_p_token_offsets: list[int] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict[str, Any] | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    @dataclass
    class SpecInfo:
        """Speculative-decoding counters (slime's ``_compute_spec_metrics`` reads them)."""

        spec_accept_token_num: int = 0
        spec_draft_token_num: int = 0
        spec_verify_ct: int = 0
        completion_token_num: int = 0

        @property
        def spec_accept_rate(self) -> float:
            if self.spec_draft_token_num > 0:
                return self.spec_accept_token_num / self.spec_draft_token_num
            return 0.0

        @property
        def spec_accept_length(self) -> float:
            return self.completion_token_num / self.spec_verify_ct if self.spec_verify_ct > 0 else 0.0

        def add(self, meta_info: dict[str, Any]) -> None:
            self.spec_accept_token_num += meta_info.get("spec_accept_token_num", 0)
            self.spec_draft_token_num += meta_info.get("spec_draft_token_num", 0)
            self.spec_verify_ct += meta_info.get("spec_verify_ct", 0)
            self.completion_token_num += meta_info.get("completion_tokens", 0)

        def to_dict(self) -> dict[str, int]:
            return {
                "spec_accept_token_num": self.spec_accept_token_num,
                "spec_draft_token_num": self.spec_draft_token_num,
                "spec_verify_ct": self.spec_verify_ct,
                "completion_token_num": self.completion_token_num,
            }

        @staticmethod
        def from_dict(data: dict[str, Any]) -> Sample.SpecInfo:
            info = Sample.SpecInfo()
            info.spec_accept_token_num = data.get("spec_accept_token_num", 0)
            info.spec_draft_token_num = data.get("spec_draft_token_num", 0)
            info.spec_verify_ct = data.get("spec_verify_ct", 0)
            info.completion_token_num = data.get("completion_token_num", 0)
            return info

    spec_info: SpecInfo = field(default_factory=SpecInfo)

    @dataclass
    class PrefixCacheInfo:
        """Prefix-cache counters (slime's ``_compute_prefix_cache_metrics`` reads them)."""

        cached_tokens: int = 0
        total_prompt_tokens: int = 0

        @property
        def prefix_cache_hit_rate(self) -> float:
            return self.cached_tokens / self.total_prompt_tokens if self.total_prompt_tokens > 0 else 0.0

        def add(self, meta_info: dict[str, Any]) -> None:
            self.cached_tokens += meta_info.get("cached_tokens", 0)
            self.total_prompt_tokens += meta_info.get("prompt_tokens", 0)

        def to_dict(self) -> dict[str, int]:
            return {"cached_tokens": self.cached_tokens, "total_prompt_tokens": self.total_prompt_tokens}

        @staticmethod
        def from_dict(data: dict[str, Any]) -> Sample.PrefixCacheInfo:
            info = Sample.PrefixCacheInfo()
            info.cached_tokens = data.get("cached_tokens", 0)
            info.total_prompt_tokens = data.get("total_prompt_tokens", 0)
            return info

    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (status as its string), as slime's debug dumps store samples."""
        value = self.__dict__.copy()
        value["status"] = self.status.value
        value["spec_info"] = self.spec_info.to_dict()
        value["prefix_cache_info"] = self.prefix_cache_info.to_dict()
        return value

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Sample:
        """Inverse of :meth:`to_dict`; unknown keys become attributes, as in slime."""
        data = dict(data)
        data["status"] = Sample.Status(data["status"])
        data["spec_info"] = Sample.SpecInfo.from_dict(data.get("spec_info", {}))
        data["prefix_cache_info"] = Sample.PrefixCacheInfo.from_dict(data.get("prefix_cache_info", {}))
        field_names = set(Sample.__dataclass_fields__)
        sample = Sample(**{k: v for k, v in data.items() if k in field_names})
        for key, value in data.items():
            if key not in field_names:
                setattr(sample, key, value)
        return sample

    def get_reward_value(self, args: Any) -> Any:
        """The training reward: ``reward``, or ``reward[args.reward_key]`` when a key is set.

        Like slime, ``args.reward_key`` is read as a plain attribute (slime always defines it).
        """
        return self.reward if not args.reward_key else self.reward[args.reward_key]  # type: ignore[index]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length

    def append_response_tokens(
        self,
        args: Any = None,
        *,
        tokens: list[int] | None = None,
        log_probs: list[float] | None = None,
        trainable: bool = True,
        meta_info: dict[str, Any] | None = None,
        text: str | None = None,
        update_terminal_info: bool = True,
    ) -> None:
        """Append response tokens, keeping loss mask and log probs aligned (as slime does)."""
        new_tokens = [int(t) for t in tokens or []]
        new_logprobs = None if log_probs is None else [float(x) for x in log_probs]
        if new_logprobs is not None and len(new_logprobs) != len(new_tokens):
            raise ValueError(f"log_probs length {len(new_logprobs)} != tokens length {len(new_tokens)}")
        if new_tokens and trainable and new_logprobs is None:
            raise ValueError("trainable response tokens require rollout log probabilities.")
        if new_tokens and not trainable:
            if new_logprobs is not None:
                raise ValueError("non-trainable response tokens should not pass rollout log probabilities.")
            new_logprobs = [0.0] * len(new_tokens)
        if text is not None:
            self.response += text
        previous = self.response_length
        if new_tokens:
            self.tokens += new_tokens
            self.response_length += len(new_tokens)
            if self.loss_mask is None:
                self.loss_mask = [1] * previous
            self.loss_mask += [1 if trainable else 0] * len(new_tokens)
        if new_logprobs is not None:
            if self.rollout_log_probs is None:
                if trainable and previous:
                    raise ValueError(
                        "Cannot append trainable rollout log probabilities to a sample with existing "
                        "response tokens but no existing rollout_log_probs."
                    )
                self.rollout_log_probs = [0.0] * previous
            self.rollout_log_probs += new_logprobs
        if meta_info is not None:
            self._apply_meta_info(args, meta_info, update_terminal_info=update_terminal_info)
        self._validate_response_metadata_lengths()

    def _apply_meta_info(self, args: Any, meta_info: dict[str, Any], *, update_terminal_info: bool) -> None:
        """The terminal part of slime's ``_apply_meta_info`` (``types.py:376-393``)."""
        if not update_terminal_info or "finish_reason" not in meta_info:
            return
        if getattr(args, "sglang_speculative_algorithm", False):
            self.spec_info.add(meta_info=meta_info)
        self.prefix_cache_info.add(meta_info=meta_info)
        if "weight_version" in meta_info:
            self.weight_versions.append(meta_info["weight_version"])
        match meta_info["finish_reason"]["type"]:
            case "length":
                self.status = Sample.Status.TRUNCATED
            case "abort":
                self.status = Sample.Status.ABORTED
            case "stop":
                self.status = Sample.Status.COMPLETED

    def _validate_response_metadata_lengths(self) -> None:
        if self.loss_mask is not None and len(self.loss_mask) != self.response_length:
            raise ValueError(
                f"loss_mask length {len(self.loss_mask)} != response_length {self.response_length}"
            )
        if self.rollout_log_probs is not None and len(self.rollout_log_probs) != self.response_length:
            raise ValueError(
                f"rollout_log_probs length {len(self.rollout_log_probs)} != "
                f"response_length {self.response_length}"
            )
        ids, offsets = self.rollout_top_p_token_ids, self.rollout_top_p_token_offsets
        if ids is None and offsets is None:
            return
        if ids is None or offsets is None:
            raise ValueError("rollout top-p replay must include both token ids and offsets.")
        if len(offsets) != self.response_length + 1:
            raise ValueError(
                "rollout_top_p_token_offsets length must equal response_length + 1: "
                f"len(offsets)={len(offsets)}, response_length={self.response_length}."
            )
        if int(offsets[-1]) != len(ids):
            raise ValueError(
                "rollout top-p token ids/offsets mismatch: "
                f"offsets[-1]={int(offsets[-1])}, len(token_ids)={len(ids)}."
            )
