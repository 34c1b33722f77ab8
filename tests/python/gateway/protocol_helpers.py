"""Shared checks for the protocol tests: token-exact traces, and the chat path as the reference.

Every protocol adapter must give, for the same conversation, the chat path's prompt ids,
completion ids, logprobs, masks and samples. ``chat_tool_episode`` plays the reference
conversation (a system prompt, a question, one ``add`` tool call, its result, an answer)
through the real openai SDK on the chat route; the protocol tests play the same one in
their own spelling and compare with ``assert_same_samples``. ``play_reference`` (the
gateway conftest's ``tool_episode`` fixture) is that preamble: the reference played, the
engine scripted again; its ``assert_same_as_chat`` is the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openai
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.rollout.traces import merge_traces
from fakes.sglang_server import fake_logprob
from gateway_helpers import ADD_TOOL, tool_call_text

SYSTEM = "Use tools for arithmetic."
QUESTION = "What is 2 + 3?"
ANSWER = "2 + 3 = 5."
TOOL_CALL = tool_call_text("add", {"a": 2, "b": 3})
TOOL_RESULT = "5"
ADD_FUNCTION: dict[str, Any] = ADD_TOOL["function"]  # type: ignore[assignment]  # name, description, parameters


def script_tool_episode(stand: Any) -> None:
    """The engine's two replies in the reference episode: a tool call, then the answer."""
    stand.script.replies += [TOOL_CALL, ANSWER]


def chat_tool_episode(stand: Any, sid: str, sampling: dict[str, Any] | None = None) -> list[CallTrace]:
    """The reference episode over the chat route; returns its traces."""
    script_tool_episode(stand)
    base = stand.gateway.create_session(sid, sampling or {"max_new_tokens": 200})
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    first = client.chat.completions.create(model="m", messages=messages, tools=[ADD_TOOL])  # type: ignore[arg-type,list-item]
    reply = first.choices[0].message.model_dump(exclude_none=True)
    call_id = reply["tool_calls"][0]["id"]
    messages += [reply, {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT}]
    client.chat.completions.create(model="m", messages=messages, tools=[ADD_TOOL])  # type: ignore[arg-type]
    return stand.gateway.traces(sid)


def assert_token_exact(traces: list[CallTrace], sent: list[dict[str, Any]]) -> None:
    """Each trace holds what the engine got and sampled, and its samples mask exactly the
    sampled ids (mask 1, the engine's logprobs) and nothing else."""
    assert len(traces) == len(sent)
    for trace, body in zip(traces, sent, strict=True):
        assert trace.prompt_token_ids == body["input_ids"]
        assert trace.logprobs == [fake_logprob(t, i) for i, t in enumerate(trace.completion_token_ids)]
    for segment in merge_traces(traces):
        response = segment.tokens[segment.prompt_length :]
        sampled = [t for t, m in zip(response, segment.loss_mask, strict=True) if m == 1]
        assert sampled == [t for i in segment.calls for t in traces[i].completion_token_ids]
        logprobs = [lp for lp, m in zip(segment.logprobs, segment.loss_mask, strict=True) if m == 1]
        assert logprobs == [lp for i in segment.calls for lp in traces[i].logprobs]
        assert all(lp == 0.0 for lp, m in zip(segment.logprobs, segment.loss_mask, strict=True) if m == 0)


def samples_of(traces: list[CallTrace]) -> list[tuple[Any, ...]]:
    return [
        (s.tokens, s.prompt_length, s.loss_mask, s.logprobs, s.finish_reason, s.calls)
        for s in merge_traces(traces)
    ]


def assert_same_samples(traces: list[CallTrace], reference: list[CallTrace]) -> None:
    """The same prompt ids, completion ids, logprobs, token modes and samples as the chat path's."""
    assert [t.prompt_token_ids for t in traces] == [t.prompt_token_ids for t in reference]
    assert [t.completion_token_ids for t in traces] == [t.completion_token_ids for t in reference]
    assert [t.logprobs for t in traces] == [t.logprobs for t in reference]
    assert [t.token_mode for t in traces] == [t.token_mode for t in reference]
    assert [t.finish_reason for t in traces] == [t.finish_reason for t in reference]
    assert samples_of(traces) == samples_of(reference)


@dataclass
class ToolEpisode:
    """A stand on which the chat route has played the reference episode, its engine scripted
    to play it once more through the protocol under test."""

    stand: Any
    reference: list[CallTrace]
    chat_requests: int  # how many engine requests the reference made (the protocol's come after)

    def assert_same_as_chat(self, sid: str, every: int = 1) -> list[CallTrace]:
        """Session ``sid``'s traces are token-exact and equal the reference's; returns them.
        ``every``: keep every n-th call (a client that sends each call n times)."""
        traces = self.stand.gateway.traces(sid)[::every]
        assert_token_exact(traces, self.stand.engine.requests[self.chat_requests :: every])
        assert_same_samples(traces, self.reference)
        return traces


def play_reference(make_stand: Any) -> ToolEpisode:
    """A cumulative-mode stand with the reference played over chat and the episode scripted again."""
    stand = make_stand(cumulative_token_mode=True)
    reference = chat_tool_episode(stand, "chat-ref")
    chat_requests = len(stand.engine.requests)
    script_tool_episode(stand)
    return ToolEpisode(stand, reference, chat_requests)
