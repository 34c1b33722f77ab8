"""Per-episode caps (``MAX_CALLS_PER_EPISODE``, ``MAX_TOKENS_PER_EPISODE``) and the reply a
session gets once it has reached one.

What counts: every model call the gateway recorded for the session (a call answered, whatever
its protocol), and every completion token the engine sampled for it (prompts are not counted:
they are context the model re-reads, bounded by the context length). A call is checked before
it goes to the engine, so the token cap can be passed by at most one call's ``max_new_tokens``.

Once a session has reached its cap, each further call gets a short final assistant message,
in the call's own protocol, with a normal end of turn and no tool call: the agent's loop ends
and it writes its reward, as if the model had answered. Not a length ending: agent frameworks
raise on that (Strands' ``MaxTokensReachedException``). The reply is not sampled by the policy,
so nothing of it is recorded or trained.
"""

from __future__ import annotations

from .protocols.base import Body, Completion, Protocol
from .wire import ChatRequest

#: the final reply's text: short, and plain enough for an agent's answer parser to see no answer
CAPPED_TEXT = "I have reached this episode's limit on model calls, so I stop here."


def cap_reached(calls: int, tokens: int, max_calls: int | None, max_tokens: int | None) -> str | None:
    """Which cap a session with ``calls`` recorded calls and ``tokens`` sampled tokens reached.

    :returns: ``"calls"``, ``"tokens"``, or None while the next call may go to the engine.
    """
    if max_calls is not None and calls >= max_calls:
        return "calls"
    if max_tokens is not None and tokens >= max_tokens:
        return "tokens"
    return None


def final_reply(protocol: Protocol, request: ChatRequest, model: str) -> Body:
    """The capped session's answer to ``request``, in ``protocol``'s shape (JSON or stream)."""
    message = {"role": "assistant", "content": CAPPED_TEXT}
    return protocol.reply(request, Completion(model, message, "stop", None, 0, 0))
