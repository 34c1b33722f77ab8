"""A real Strands agent (OpenAIModel provider, streaming by default, one @tool) on a session URL.

Engine: the scripted SGLang server; tokenizer: the toy Qwen2.5-like one; cumulative mode on.
Checks that the tool call is parsed and executed, the final answer arrives, and the traces
give a prefix-extending chain whose non-sampled gap is exactly the tool turn (what the
trainer will mask out) while the sampled parts are the engine's ids.
"""

from __future__ import annotations

from gateway_helpers import tool_call_text
from strands import Agent, tool
from strands.models.openai import OpenAIModel


def test_strands_agent_calls_a_tool_through_the_gateway(make_stand, tokenizer) -> None:
    stand = make_stand(cumulative_token_mode=True)
    stand.script.replies += [
        tool_call_text("add", {"a": 19, "b": 23}),
        "The sum is 42.",
    ]
    calls: list[tuple[int, int]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first addend
            b: second addend
        """
        calls.append((a, b))
        return a + b

    base = stand.gateway.create_session(
        "strands-1", {"temperature": 1.0, "max_new_tokens": 256}
    )
    model = OpenAIModel(
        client_args={"base_url": base, "api_key": "unused"},
        model_id="default",
        params={"max_tokens": 256},
    )
    agent = Agent(
        model=model,
        tools=[add],
        callback_handler=None,
        system_prompt="Use tools for arithmetic.",
    )
    result = agent("What is 19 + 23?")

    assert calls == [(19, 23)]
    assert "The sum is 42." in str(result)
    first, second = stand.gateway.traces("strands-1")
    assert first.response_message["tool_calls"][0]["function"]["name"] == "add"
    assert second.token_mode == "bridged"
    head = first.prompt_token_ids + first.completion_token_ids
    assert second.prompt_token_ids[: len(head)] == head
    gap = tokenizer.decode(second.prompt_token_ids[len(head) :])
    assert (
        gap
        == "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    for trace, sent in zip((first, second), stand.engine.requests, strict=True):
        assert trace.prompt_token_ids == sent["input_ids"] and len(
            trace.logprobs
        ) == len(trace.completion_token_ids)
    assert tokenizer.decode(second.completion_token_ids) == "The sum is 42.<|im_end|>"
    assert stand.gateway.traces("strands-1")[0].messages[0] == {
        "role": "system",
        "content": "Use tools for arithmetic.",
    }
