"""One finished episode, summarized for metrics and the report's episode browser.

An :class:`EpisodeRecord` carries what a user asks of an episode ("what did the agent do,
what did it cost, why did it fail") and nothing that needs slime or the gateway to read:
the rollout builds it from the gateway's call traces and the merged samples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: the class of an episode that ended with the agent's own reward (any value): reward signal
SIGNAL = "signal"
#: the class of an episode that failed for any other reason: kept out of the gradient
INFRASTRUCTURE = "infrastructure"

__all__ = ["INFRASTRUCTURE", "SIGNAL", "CallRecord", "EpisodeRecord", "select_for_browser", "token_counts"]


@dataclass(frozen=True)
class CallRecord:
    """One model call of an episode, as the report shows it.

    :param messages: the request messages the agent sent.
    :param response_message: the assistant message the gateway returned.
    :param token_mode: ``bridged`` (prompt extended the previous call) or ``rendered``.
    :param chain_break: why the call started a new sample ("" when it did not; gateway/trace.py
        names the reasons).
    :param prompt_tokens: prompt length in tokens.
    :param completion_tokens: sampled tokens.
    :param finish_reason: ``stop``, ``length`` or ``abort``.
    :param latency_ms: wall time of the call inside the gateway.
    :param tool_call_errors: the tool calls in its text the gateway could not read (their reasons).
    :param joined: how it joined the episode: ``start``, ``extended``, ``rerendered`` (same
        sample) or ``forked`` (a new sample); "" in records made before it was recorded.
    :param side_call: why it is outside the episode's main conversation (a title, a classifier:
        untrained unless TRAIN_SIDE_CALLS); "" for the main conversation.
    :param hosted_tools: hosted tools the agent offered that the model was not (web search...).
    """

    messages: list[dict[str, Any]]
    response_message: dict[str, Any]
    token_mode: str
    chain_break: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    latency_ms: float
    tool_call_errors: list[str] = field(default_factory=list)
    joined: str = ""
    side_call: str = ""
    hosted_tools: list[str] = field(default_factory=list)

    @classmethod
    def from_trace(cls, trace: Any) -> CallRecord:
        """The record of one gateway call trace (``agentcore_slime.gateway.trace.CallTrace``).

        :param trace: the gateway's record of the call.
        """
        return cls(
            messages=list(trace.messages),
            response_message=dict(trace.response_message),
            token_mode=str(trace.token_mode),
            chain_break=str(trace.chain_break),
            prompt_tokens=len(trace.prompt_token_ids),
            completion_tokens=len(trace.completion_token_ids),
            finish_reason=str(trace.finish_reason),
            latency_ms=float(trace.latency_ms),
            tool_call_errors=list(trace.tool_call_errors),
            joined=str(getattr(trace, "joined", "")),
            side_call=str(getattr(trace, "side_call", "")),
            hosted_tools=list(getattr(trace, "hosted_tools", ())),
        )


def token_counts(samples: list[Any]) -> tuple[int, int]:
    """Response tokens of ``samples`` that carry gradient (loss mask 1) and that do not.

    :param samples: the slime Samples an episode became (failed and padding samples count 0).
    """
    sampled = masked = 0
    for sample in samples:
        mask = getattr(sample, "loss_mask", None) or []
        if getattr(sample, "remove_sample", False):
            continue  # a zero-gradient stand-in for a failed episode, not the episode's tokens
        ones = sum(1 for bit in mask if bit)
        sampled += ones
        masked += len(mask) - ones
    return sampled, masked


@dataclass(frozen=True)
class EpisodeRecord:
    """One episode of a step.

    :param session_id: the gateway/ACR session id (look the runtime's logs up with it).
    :param group: the prompt group (GRPO group) the episode belongs to.
    :param index: the sample index within slime's batch.
    :param reward: the agent's reward, None when the episode failed.
    :param failure_class: None when it succeeded (any reward the agent returned is signal), else
        :data:`INFRASTRUCTURE` (see docs/rollout.md for where the boundary lies).
    :param reason: why it failed, in full ("" when it succeeded).
    :param seconds: wall time from the session's start to its result.
    :param calls: the episode's model calls, in order.
    :param sampled_tokens: tokens that carry gradient (loss mask 1) in its samples.
    :param masked_tokens: response tokens with loss mask 0 (tool results, bridges).
    :param samples: training samples the episode became (segments of a broken chain count).
    :param dataset: the eval dataset name ("" for training steps).
    :param failure: the failure's reason code (``timeout``, ``invoke_error``, ...; "" when none).
    :param capped: its session reached MAX_CALLS_PER_EPISODE or MAX_TOKENS_PER_EPISODE (the
        agent's outcome: its later calls got a short final reply, nothing of them trained).
    """

    session_id: str
    group: int
    index: int
    reward: float | None
    failure_class: str | None
    reason: str
    seconds: float
    calls: list[CallRecord] = field(default_factory=list)
    sampled_tokens: int = 0
    masked_tokens: int = 0
    samples: int = 0
    dataset: str = ""
    failure: str = ""
    capped: bool = False

    @property
    def ok(self) -> bool:
        """Whether the episode produced a reward."""
        return self.failure_class is None

    @property
    def turns(self) -> int:
        """Model calls the agent made."""
        return len(self.calls)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens over all calls (what the engine had to prefill, before caching)."""
        return sum(call.prompt_tokens for call in self.calls)

    @property
    def completion_tokens(self) -> int:
        """Tokens the engine sampled over all calls."""
        return sum(call.completion_tokens for call in self.calls)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``episodes/<kind>-<step>.jsonl`` stores)."""
        record = asdict(self)
        record["turns"] = self.turns
        return record

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        """Read back what :meth:`to_json` wrote (unknown keys are ignored).

        :param data: one line of an episodes file, parsed.
        """
        known = {name for name in cls.__dataclass_fields__}
        fields = {k: v for k, v in data.items() if k in known}
        fields["calls"] = [CallRecord(**call) for call in data.get("calls", [])]
        return cls(**fields)


def select_for_browser(records: list[EpisodeRecord], first: int) -> list[EpisodeRecord]:
    """The episodes a step records for the browser: the first ``first`` plus every failed one.

    :param records: the step's episodes, in slime's order.
    :param first: how many episodes to keep regardless of outcome.
    """
    return [record for number, record in enumerate(records) if number < first or not record.ok]
