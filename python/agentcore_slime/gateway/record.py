"""Recording a call: how it joins its episode, its trace, the session's chain after it, and the undo.

A call is recorded just before the last bytes of its reply go out, so a trainer reading right
after the agent got its reply sees the trace; when the reply cannot be delivered (the agent
went away) the record is undone, and the session is as it was before the call.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from array import array
from collections.abc import Callable
from typing import Any

from .config import short_id
from .conversation import ChainState, extends, fork_reason
from .engine import EngineResult
from .protocols.base import Body
from .routing import NOT_ASKED, Routing
from .sessions import Call, Session, Sessions
from .trace import CallTrace

logger = logging.getLogger(__name__)

# A session holds its last request's messages as sent (to share them with the next request)
# only while the body is at most this many bytes per prompt token, plus the slack: a body
# mostly of keys the chat template never renders is not kept, so memory follows tokens.
RAW_BYTES_PER_TOKEN = 16
RAW_SLACK_BYTES = 64 * 1024


def join(session: Session, call: Call) -> None:
    """How the call joins the episode: its prompt against the last recorded call's prompt +
    completion (what the merge compares it with), and why it forks when it does not extend them."""
    chain, prompt = session.chain, call.prompt
    assert prompt is not None
    if call.side_call:  # no verdict: the merge compares it with the session's previous side call
        call.joined = ""
    elif chain is None:
        call.joined = "start"
    elif call.repeat:  # built from the call before the last one: never extends the last
        call.joined, call.fork = "forked", fork_reason(call.messages, call.tools_key, chain, repeat=True)
    elif prompt.token_mode == "bridged":
        call.joined = "extended"
    elif extends(prompt.ids, chain):
        call.joined = "rerendered"
    else:
        call.joined = "forked"
        call.fork = fork_reason(call.messages, call.tools_key, chain, repeat=False)


def trace_of(
    session: Session,
    call: Call,
    result: EngineResult,
    message: dict[str, Any],
    errors: list[str],
    routing: Routing = NOT_ASKED,
) -> CallTrace:
    """The call's trace (its prompt ids stay in ``call.prompt``: the store takes them from there)."""
    assert call.prompt is not None
    return CallTrace(
        prompt_token_ids=[],  # the store takes call.prompt.ids (no 10k-int list while in flight)
        completion_token_ids=result.output_ids,
        logprobs=result.logprobs,
        finish_reason=result.finish_type,  # type: ignore[arg-type]
        messages=call.messages,  # as rendered: keys the template never reads are not kept
        response_message=message,
        token_mode=call.prompt.token_mode,  # type: ignore[arg-type]
        session_id=session.sid,
        engine_finish=dict(result.meta.get("finish_reason") or result.finish),  # as the engine said
        sampling_params=call.params,
        chain_break=call.fork,
        joined=call.joined,  # type: ignore[arg-type]
        latency_ms=(time.perf_counter() - call.started) * 1000,
        weight_version=result.meta.get("weight_version"),
        tool_call_errors=errors,
        engine_attempts=result.attempts,
        side_call=call.side_call,
        hosted_tools=list(call.request.extras.get("dropped_tools", ())),
        routed_experts_start=routing.start,
        routed_experts=routing.rows,
        routed_experts_problem=routing.problem,
    )


def record(
    sessions: Sessions,
    session: Session,
    call: Call,
    trace: CallTrace,
    key: str | None,
    reply: tuple[bytes, Body],
    stored_replies: int,
) -> Callable[[], None]:
    """Append the trace and advance the chain; remember the reply under the idempotency key.

    Every delivered reply is a call of its own (a second sample of the same messages is
    recorded next to the first): without a client key a retry cannot be told from a new
    sample, and the agent continues with whichever reply it got.

    :param reply: the body's digest and the reply as sent (kept under ``key``, at most
        ``stored_replies`` of them per session).
    :returns: a function that undoes exactly this (the reply could not be delivered).
    """
    saved = (session.chain, session.chain_before, session.last_request, session.last_raw)
    with sessions.lock:
        if session.deleted:
            return lambda: None
        assert call.prompt is not None
        session.store.append(trace, call.prompt.ids)
    session.sampled_tokens += len(trace.completion_token_ids)
    if key is not None:
        session.replies.pop(key, None)  # re-inserted as the newest
        while len(session.replies) >= stored_replies:
            del session.replies[next(iter(session.replies))]  # the oldest goes first
        session.replies[key] = reply
    if call.side_call:  # issue 45: outside the main conversation, whose chain stays as it was
        return _unrecord(sessions, session, trace, key)
    session.chain_before = session.chain_before if call.repeat else session.chain
    session.chain = _next_chain(session.chain, session.store.last_ids, call, trace.response_message)
    if session.chain_before is not None:
        session.chain_before = _share_ids(session.chain_before, session.chain.ids)
    session.last_request = (call.messages, call.tools_key)
    held = _held_raw(session.body_bytes, len(call.prompt.ids))
    session.last_raw = call.request.messages if held else []
    if trace.chain_break:
        why = f"; not bridged: {call.chain_break}" if call.chain_break else ""
        sid = short_id(session.sid)
        logger.info("session %s: a new sample starts (%s%s)", sid, trace.chain_break, why)
    unrecord = _unrecord(sessions, session, trace, key)

    def undo() -> None:
        logger.info("session %s: reply not delivered, call not recorded", short_id(session.sid))
        session.chain, session.chain_before, session.last_request, session.last_raw = saved
        unrecord()

    return undo


def _unrecord(sessions: Sessions, session: Session, trace: CallTrace, key: str | None) -> Callable[[], None]:
    """The undo of what every recorded call adds (its kept reply, its sampled tokens, its step in
    the store): the whole undo of a side call, which leaves the chain as it was."""

    def undo() -> None:
        if key is not None:
            session.replies.pop(key, None)
        session.sampled_tokens -= len(trace.completion_token_ids)
        with sessions.lock:
            if not session.deleted:
                session.store.pop_last()

    return undo


def _next_chain(
    previous: ChainState | None, ids: array[int], call: Call, message: dict[str, Any]
) -> ChainState:
    """The chain after a call; messages equal to the previous call's keep its objects (and
    their text), so a session holds its conversation once."""
    messages = call.messages
    if previous is not None:
        n = len(previous.messages)
        if messages[:n] == previous.messages:
            messages = [*previous.messages, *messages[n:]]
            call.messages = messages
    assert call.prompt is not None
    return ChainState(ids, len(call.prompt.ids), messages, message, call.tools_key)


def _held_raw(body_bytes: int, prompt_tokens: int) -> bool:
    """Whether a call's messages as sent may stay with the session (see RAW_BYTES_PER_TOKEN)."""
    return body_bytes <= RAW_BYTES_PER_TOKEN * prompt_tokens + RAW_SLACK_BYTES


def _share_ids(state: ChainState, ids: array[int]) -> ChainState:
    """``state`` over ``ids`` when its ids are their prefix (then nothing is held twice)."""
    if state.ids is ids or state.end > len(ids) or ids[: state.end] != state.sequence:
        return state
    return dataclasses.replace(state, ids=ids)
