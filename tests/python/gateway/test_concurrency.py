"""Many sessions at once, from many threads: each session's traces are its own, in call order.

The scripted engine answers from the prompt text (it echoes the session's marker and turn),
so a trace landing in the wrong session or out of order is visible.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
from agentcore_slime.gateway.engine import routing_key


def _respond(prompt: str) -> str:
    users = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt)
    return f"ack {users[-1]}"


def test_concurrent_sessions_keep_their_own_ordered_traces(
    make_stand, tokenizer
) -> None:
    from fakes.sglang_server import text_policy

    stand = make_stand(
        policy=text_policy(tokenizer, _respond),
        cumulative_token_mode=True,
        fake={"delay": 0.005},
    )
    sessions = [f"c{i}" for i in range(32)]
    bases = {sid: stand.gateway.create_session(sid) for sid in sessions}

    def episode(sid: str) -> None:
        messages: list[dict] = []
        with httpx.Client(timeout=30) as client:
            for turn in range(3):
                messages.append({"role": "user", "content": f"{sid} turn {turn}"})
                body = {"model": "m", "messages": messages}
                reply = client.post(f"{bases[sid]}/chat/completions", json=body).json()
                messages.append(reply["choices"][0]["message"])

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(episode, sessions))

    for sid in sessions:
        traces = stand.gateway.traces(sid)
        assert [t.response_message["content"] for t in traces] == [
            f"ack {sid} turn {i}" for i in range(3)
        ]
        assert [t.token_mode for t in traces] == ["rendered", "bridged", "bridged"]
        assert all(t.session_id == sid for t in traces)
    routed = {r.get("X-SMG-Routing-Key") for r in stand.engine.headers}
    # every /generate names its session for sticky routing, by a digest: never the id itself
    assert routed == {routing_key(sid) for sid in sessions} and not routed & set(sessions)
