"""Side calls: a call outside the episode's main conversation (a title, a summary, a classifier).

The rule, from what the coding agents send (docs/agents.md, "Side calls"): a call is a side call
when it offers the model no tools and

- constrains its reply's form (Anthropic ``output_config.format``, chat ``response_format``,
  Responses ``text.format``): Claude Code's session title, or
- opens with another message than the session's main conversation, which offers tools: a
  summarizer or classifier an agent calls in the middle of its episode.

Everything else is the main conversation, sub-agents included: a sub-agent (Claude Code's
``Agent`` tool, Codex's ``spawn_agent``) is offered tools, and stays a trained fork. A side call
is recorded with its name (``CallTrace.side_call``), rendered in full, and leaves the session's
chain as it was, so the main conversation after it extends the main conversation before it; the
rollout's merge leaves side calls untrained unless ``TRAIN_SIDE_CALLS`` (docs/rollout.md).
"""

from __future__ import annotations

from typing import Any

from .conversation import ChainState, tools_key
from .wire import ChatRequest

NO_TOOLS = tools_key(None)
OTHER_CONVERSATION = "another conversation without tools"


def side_call(request: ChatRequest, messages: list[dict[str, Any]], chain: ChainState | None) -> str:
    """Why the call is a side call ("" when it belongs to the main conversation).

    :param request: the call in chat form (its tools and its constraint).
    :param messages: its messages, normalized (as the chain holds them).
    :param chain: the session's main conversation so far (None before its first call).
    """
    if request.tools:
        return ""
    if request.constraint:
        return f"{request.constraint} without tools"
    if chain is None or chain.tools_key == NO_TOOLS:
        return ""
    return OTHER_CONVERSATION if messages[:1] != chain.messages[:1] else ""
