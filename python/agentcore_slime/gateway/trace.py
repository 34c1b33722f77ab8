"""The per-call trace record: the seam between the gateway and the rollout.

The gateway appends one :class:`CallTrace` per completed chat call of a session, in
call order; the rollout reads them with ``Gateway.traces(session_id)`` and merges them
into slime Samples (``agentcore_slime.rollout.traces``). Nothing else crosses that seam.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort"]
TokenMode = Literal["bridged", "rendered"]
#: how a call joined its episode: the session's first call (``start``), its prompt built by
#: extending the previous call's prompt + completion (``extended``), rendered in full and
#: found to start with them (``rerendered``: same sample), or not (``forked``: a new sample)
Joined = Literal["start", "extended", "rerendered", "forked", ""]

# Why a call forked (``CallTrace.chain_break``): a small vocabulary, so a step counts them by cause.
REASONING_DROPPED = "reasoning dropped"  # the old turn's reasoning is not in the re-rendered history
RETOKENIZED = "re-tokenized"  # the same messages render to other tokens than the model sampled
REPLY_REWRITTEN = "reply rewritten"  # the agent echoed another text than the model's last reply
HISTORY_REWRITTEN = "history rewritten"  # an earlier message was edited
TOOL_RESULT_CHANGED = "tool result changed"  # an earlier tool result was edited
CONTEXT_COMPACTED = "context compacted"  # earlier messages were dropped or summarized
SUB_AGENT = "sub-agent"  # another conversation on the same session
TOOLS_CHANGED = "tools changed"  # the request's tool list changed
REPEAT = "repeat"  # the previous call's messages again (a second sample, a retry without a key)
FORK_REASONS = (
    REASONING_DROPPED,
    RETOKENIZED,
    REPLY_REWRITTEN,
    HISTORY_REWRITTEN,
    TOOL_RESULT_CHANGED,
    CONTEXT_COMPACTED,
    SUB_AGENT,
    TOOLS_CHANGED,
    REPEAT,
)


@dataclass(frozen=True)
class CallTrace:
    """One chat call as the engine saw it.

    :param prompt_token_ids: the exact ids sent to the engine's ``/generate``.
    :param completion_token_ids: the ids the engine sampled, stop token included
        when one was sampled (as SGLang reports ``output_ids``).
    :param logprobs: one logprob per completion id, aligned with them.
    :param finish_reason: the engine's finish type: ``stop``, ``length`` or ``abort``.
    :param messages: the request messages as the chat template read them (normalized: role,
        text content, reasoning, tool calls with parsed arguments, a tool's name; keys the
        template never renders are not kept, so a trace is bounded by its tokens). For debugging.
    :param response_message: the parsed assistant message the gateway returned.
    :param token_mode: ``bridged`` when the prompt was built by extending the
        previous call's prompt + completion (cumulative mode), ``rendered`` when the
        conversation was rendered in full.
    :param session_id: the session the call belongs to.
    :param engine_finish: the engine's raw finish_reason object (``{"type", "matched"|"length"}``);
        SGLang 0.5.13 may say ``length`` where ``finish_reason`` is the settled ``stop``.
    :param sampling_params: the sampling params sent to the engine.
    :param chain_break: why this call forked, one of :data:`FORK_REASONS` ("" unless
        ``joined`` is ``forked``), in either token mode.
    :param latency_ms: wall time of the call inside the gateway.
    :param weight_version: the engine's ``meta_info.weight_version``, when it reports one.
    :param tool_call_errors: one short reason per tool call in the completion that the
        parser could not turn into a valid call (empty: none). A turn with any is *flagged*:
        the agent got the text as SGLang's server would return it, and the rollout counts it.
    :param engine_attempts: ``/generate`` requests the call took (1 = the first answered; more:
        the engine or router failed first, e.g. an engine that died and was replaced).
    :param routed_experts_start: rollout routing replay: the first position whose routed experts
        the call asked the engine for (SGLang's ``routed_experts_start_len``: the rows before it
        are the session's, from earlier calls); None when the run does not replay routing.
    :param routed_experts: the engine's rows for positions ``[routed_experts_start, len(prompt) +
        len(completion) - 1)``, raw int32 (``num_layers x moe_router_topk`` per row, as SGLang
        sends them decoded from base64); None when asked for and not usable (see
        ``routed_experts_problem``) or not asked for.
    :param routed_experts_problem: why ``routed_experts`` is None though asked for ("" otherwise).
    :param side_call: why the call is outside the episode's main conversation (a title, a
        classifier: gateway/side_calls.py); "" for the main conversation. Untrained by default.
    :param hosted_tools: the hosted tools the agent offered that the model was not (web search...:
        run by the vendor's servers, which the node cannot run; docs/agents.md).
    """

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    messages: list[dict[str, Any]] = field(default_factory=list)
    response_message: dict[str, Any] = field(default_factory=dict)
    token_mode: TokenMode = "rendered"
    session_id: str = ""
    engine_finish: dict[str, Any] = field(default_factory=dict)
    sampling_params: dict[str, Any] = field(default_factory=dict)
    chain_break: str = ""
    latency_ms: float = 0.0
    weight_version: str | None = None
    tool_call_errors: list[str] = field(default_factory=list)
    joined: Joined = ""
    engine_attempts: int = 1
    routed_experts_start: int | None = None
    routed_experts: bytes | None = None
    routed_experts_problem: str = ""
    side_call: str = ""
    hosted_tools: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.completion_token_ids):
            raise ValueError(
                f"trace has {len(self.logprobs)} logprobs for "
                f"{len(self.completion_token_ids)} completion tokens"
            )
