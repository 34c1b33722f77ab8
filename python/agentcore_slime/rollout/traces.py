"""Merge an episode's per-call gateway traces into prefix-extending slime Samples.

An agent episode is a sequence of chat calls. When each call's prompt starts with the
previous call's prompt + completion, the whole run is one training sequence: the first
call's prompt is the prompt, and the response is every completion (trained: loss 1,
the engine's logprobs) separated by the *bridge* tokens the next call added (tool
results, the next user turn, template glue: loss 0, logprob 0). Where a call's prompt
does not extend the running sequence, a new segment (a new Sample) starts.

The gateway says how each call joined (``CallTrace.joined``): ``forked`` starts a segment
without a compare; ``extended`` (bridged) and ``rerendered`` (rendered in full, and the
gateway compared it with the previous prompt + completion) are checked over the previous
completion's positions plus a constant number of spot checks of the older prefix, so the
cost is linear in the episode's tokens. A trace without a verdict (recorded before there
was one) is compared over the whole previous prompt when rendered: one C-level list compare
per call, quadratic in turns. A segment's lists are then built once at their final size: its
tokens are its last call's prompt + completion, and each call's completion sits at its own
prompt's end.

A rewritten reply (the next call forked with ``reply rewritten``: the agent put another text
in its history than the model sampled) is *abandoned*: its tokens stay in its segment with
loss mask 0 and log prob 0, so nothing trains on a generation the episode's reward never saw;
a segment left with no sampled token is dropped (a two-call episode is then one Sample).

Side calls (``CallTrace.side_call``: a title, a classifier; gateway/side_calls.py) are outside
the main conversation: they are left out by default (``train_side_calls`` false), and otherwise
each lane is merged on its own (the main conversation's calls with each other, the side calls
with each other). An episode made only of side calls has no other conversation: its calls are
merged and trained as its main one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentcore_slime.gateway.trace import REPLY_REWRITTEN, CallTrace
from agentcore_slime.rollout.samples import KIND_EPISODE, ShimRecord, carry_source, with_record

# Number of spot checks of the older prefix for bridged calls (constant cost per call).
_PROBES = 8


@dataclass
class Segment:
    """One prefix-extending run of calls, ready to become a slime Sample.

    :param tokens: prompt + response ids.
    :param prompt_length: number of prompt ids at the start of ``tokens``.
    :param loss_mask: one entry per response id: 1 sampled, 0 bridge.
    :param logprobs: one entry per response id: the engine's logprob, 0.0 for bridge ids.
    :param finish_reason: the finish reason of the segment's last call.
    :param calls: indices (in the episode's trace list) of the calls in this segment.
    :param texts: the assistant texts of the calls, for ``Sample.response``.
    :param sampled_tokens: number of sampled (loss 1) response ids.
    :param abandoned: calls of the segment whose reply the agent rewrote (their ids: loss 0).
    """

    tokens: list[int]
    prompt_length: int
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    calls: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    sampled_tokens: int = 0
    abandoned: list[int] = field(default_factory=list)

    @property
    def response_length(self) -> int:
        return len(self.tokens) - self.prompt_length


def _extends(previous: CallTrace, trace: CallTrace) -> bool:
    """Whether ``trace``'s prompt starts with ``previous``'s prompt + completion.

    ``previous`` itself extends the segment's earlier calls, so this is the same as
    "starts with the segment's running sequence".
    """
    prompt, before, completion = (
        trace.prompt_token_ids,
        previous.prompt_token_ids,
        previous.completion_token_ids,
    )
    if trace.joined in ("forked", "start"):
        return False
    start, end = len(before), len(before) + len(completion)
    if len(prompt) < end or prompt[start:end] != completion:
        return False
    if trace.token_mode != "bridged" and trace.joined != "rerendered":
        return prompt[:start] == before
    if start == 0:
        return True
    step = max(1, start // _PROBES)
    return prompt[start - 1] == before[start - 1] and all(
        prompt[i] == before[i] for i in range(0, start, step)
    )


def _split(traces: Sequence[CallTrace], lane: list[int]) -> list[list[int]]:
    """Call indices of each prefix-extending run of a lane's calls, in call order."""
    runs: list[list[int]] = []
    for index in lane:
        if runs and _extends(traces[runs[-1][-1]], traces[index]):
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def lanes(traces: Sequence[CallTrace], train_side_calls: bool = False) -> list[list[int]]:
    """The call indices merged into samples: the main conversation's, then (when trained) the
    side calls'. Only side calls: they are the episode's main conversation."""
    main = [i for i, trace in enumerate(traces) if not trace.side_call]
    side = [i for i, trace in enumerate(traces) if trace.side_call]
    if not main:
        return [side]
    return [main, side] if train_side_calls and side else [main]


def untrained_side_calls(traces: Sequence[CallTrace], train_side_calls: bool = False) -> int:
    """How many of the episode's calls are side calls left out of its samples."""
    merged = {i for lane in lanes(traces, train_side_calls) for i in lane}
    return sum(1 for i, trace in enumerate(traces) if trace.side_call and i not in merged)


def _build(traces: Sequence[CallTrace], calls: list[int]) -> Segment:
    """Lay a run's completions into one sequence: each call's completion starts at its prompt's end."""
    first, last = traces[calls[0]], traces[calls[-1]]
    prompt_length = len(first.prompt_token_ids)
    tokens = list(last.prompt_token_ids)
    tokens += last.completion_token_ids
    response_length = len(tokens) - prompt_length
    loss_mask = [0] * response_length
    logprobs = [0.0] * response_length
    texts = []
    sampled = 0
    abandoned = []
    for index in calls:
        trace = traces[index]
        content = trace.response_message.get("content") if trace.response_message else None
        if isinstance(content, str):
            texts.append(content)
        following = _next_in_lane(traces, index)
        if following is not None and following.chain_break == REPLY_REWRITTEN:
            abandoned.append(index)  # the episode went on with another text: not trained
            continue
        offset = len(trace.prompt_token_ids) - prompt_length
        size = len(trace.completion_token_ids)
        sampled += size
        loss_mask[offset : offset + size] = [1] * size
        logprobs[offset : offset + size] = trace.logprobs
    return Segment(
        tokens, prompt_length, loss_mask, logprobs, last.finish_reason, list(calls), texts, sampled, abandoned
    )


def _next_in_lane(traces: Sequence[CallTrace], index: int) -> CallTrace | None:
    """The call after ``index`` on its lane (a side call's next side call, a main call's next main call)."""
    side = bool(traces[index].side_call)
    for following in traces[index + 1 :]:
        if bool(following.side_call) == side:
            return following
    return None


def merge_traces(traces: Sequence[CallTrace], train_side_calls: bool = False) -> list[Segment]:
    """Split an episode's calls into prefix-extending segments.

    Segments without a prompt token or without a sampled token are dropped: they carry
    nothing to train on and would break slime's invariants.

    :param traces: the session's calls in call order (``Gateway.traces``).
    :param train_side_calls: merge the side calls too (each lane on its own; see the module).
    :returns: the segments in the order of their first call.
    """
    runs = [run for lane in lanes(traces, train_side_calls) for run in _split(traces, lane)]
    segments = [_build(traces, calls) for calls in sorted(runs)]
    return [s for s in segments if s.prompt_length >= 1 and s.sampled_tokens >= 1]


def _status_for(sample_cls: type, finish_reason: str) -> Any:
    status = sample_cls.Status  # type: ignore[attr-defined]
    return {"length": status.TRUNCATED, "abort": status.ABORTED}.get(finish_reason, status.COMPLETED)


def merge_traces_to_samples(
    traces: Sequence[CallTrace],
    template: Any,
    *,
    session_id: str,
    reward: float,
    rollout_id: int,
    train_side_calls: bool = False,
) -> list[Any]:
    """Turn an episode's traces into slime Samples, one per prefix-extending segment.

    :param traces: the session's calls in call order.
    :param template: the data-source Sample of this episode (group, index, prompt,
        label and metadata are carried over; its class is used for the new Samples).
    :param session_id: the episode's session id (``Sample.session_id`` and metadata).
    :param reward: the episode's raw reward, set on every segment.
    :param rollout_id: slime's rollout id, the same for every segment of the episode.
    :param train_side_calls: train the side calls too (``TRAIN_SIDE_CALLS``).
    :returns: the Samples (empty when no segment has a sampled token).
    """
    sample_cls = type(template)
    segments = merge_traces(traces, train_side_calls)
    samples = []
    for number, segment in enumerate(segments):
        record = ShimRecord(
            kind=KIND_EPISODE,
            session_id=session_id,
            segment=number,
            segments=len(segments),
            calls=tuple(segment.calls),
            tool_call_errors=tuple(i for i in segment.calls if traces[i].tool_call_errors),
        )
        samples.append(
            sample_cls(
                group_index=template.group_index,
                index=template.index,
                rollout_id=rollout_id,
                prompt=template.prompt,
                label=template.label,
                tokens=segment.tokens,
                response="".join(segment.texts),
                response_length=segment.response_length,
                loss_mask=segment.loss_mask,
                rollout_log_probs=segment.logprobs,
                reward=float(reward),
                status=_status_for(sample_cls, segment.finish_reason),
                metadata=with_record(template.metadata, record),
                session_id=session_id,
            )
        )
        carry_source(template, samples[-1])
    return samples
