"""Stand-in of ``slime.utils.types.Sample`` (slime ``fa3c990``, slime-contract.md section 2).

Same fields, defaults and ``Status`` values as slime; lists instead of torch tensors.
``append_response_tokens`` and ``_validate_response_metadata_lengths`` enforce the
same length invariants and raise ``ValueError`` with the same conditions.
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
    label: Any = None
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

    def get_reward_value(self, args: Any) -> Any:
        """The training reward: ``reward``, or ``reward[args.reward_key]`` when a key is set."""
        if not getattr(args, "reward_key", None):
            return self.reward
        assert isinstance(self.reward, dict)
        return self.reward[args.reward_key]

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
        if meta_info and update_terminal_info and "finish_reason" in meta_info:
            self.status = {
                "length": Sample.Status.TRUNCATED,
                "abort": Sample.Status.ABORTED,
                "stop": Sample.Status.COMPLETED,
            }.get(meta_info["finish_reason"]["type"], self.status)
        self._validate_response_metadata_lengths()

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
