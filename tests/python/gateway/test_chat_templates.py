"""One sample per episode with the published chat templates' rules (chat_templates.py).

For each family (Qwen3 as published, Qwen3.5/3.6, GLM-4.5, GLM-4.7, DeepSeek-V3.1, Kimi-K2),
episodes of 1 to 4 user turns with tool loops and reasoning go through the real openai SDK, the
gateway (its chat-template path, ``RENDERER_FAMILY=default``) and the scripted SGLang stand-in,
and are merged by the rollout's own merge. By default (``CUMULATIVE_BRIDGE=new-messages``) each
episode is one sample, every trained token is a token the engine sampled and each call's prompt
is exactly the sequence so far; with ``CUMULATIVE_BRIDGE=template`` the families whose template
renders earlier turns otherwise split the episode, and the trace names the reason. The agent
sends replies back as the gateway returned them (raw text: parsers off, so each family's
tool-call text stays in the content the template renders).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.rollout.traces import merge_traces
from chat_templates import FAMILIES, Family, build_family_dir
from fakes.sglang_server import Completion, FakeSGLang

# user turns per episode, each a count of tool calls before the answer
EPISODES = [(0,), (1, 0), (2, 1, 0), (0, 1, 0, 2)]


def _reply(family: Family, turn: int, step: int, tool: bool) -> str:
    """What the model samples (before its stop token): reasoning, then a tool call or an answer."""
    body = f"call add {turn} {step}" if tool else f"answer {turn}"
    if family.name == "deepseek-v3.1":  # thinking off: the prompt ends with </think>
        return body
    if family.name == "qwen3.5":  # the generation prompt opens <think>\n
        return f"step {turn} {step}\n</think>\n\n{body}"
    return f"<think>\nstep {turn} {step}\n</think>\n\n{body}"


def _stop(family: Family, tool: bool) -> str:
    """GLM ends a reply with the role token that follows it; the others with one close token."""
    return family.stops[0] if tool or len(family.stops) == 1 else family.stops[1]


class Engine:
    """Samples the scripted replies of one episode in order (each with the family's stop token)."""

    def __init__(self, family: Family, tokenizer: Any) -> None:
        self.family, self.tokenizer = family, tokenizer
        self.replies: list[tuple[str, bool]] = []

    def policy(self, input_ids: list[int], sampling_params: dict[str, Any]) -> Completion:
        text, tool = self.replies.pop(0)
        stop = self.tokenizer.convert_tokens_to_ids(_stop(self.family, tool))
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), stop]
        return Completion(ids, {"type": "stop", "matched": stop})


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_dir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Family, Path, Any]]:
    from transformers import AutoTokenizer

    family = FAMILIES[request.param]
    directory = build_family_dir(tmp_path_factory.mktemp(family.name), family)
    yield family, directory, AutoTokenizer.from_pretrained(str(directory))


def _play(client: openai.OpenAI, engine: Engine, turns: tuple[int, ...]) -> None:
    """One episode: each user turn, its tool loop (results sent as tool messages), the answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You add numbers."}]
    for turn, tools in enumerate(turns):
        messages.append({"role": "user", "content": f"question {turn}"})
        for step in range(tools + 1):
            engine.replies.append((_reply(engine.family, turn, step, step < tools), step < tools))
            out = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
            messages.append({"role": "assistant", "content": out.choices[0].message.content})
            if step < tools:
                messages.append({"role": "tool", "tool_call_id": f"c{step}", "content": f"{turn + step}"})


def _episodes(
    family_dir: tuple[Family, Path, Any], **config: Any
) -> tuple[list[list[Any]], list[list[int]]]:
    """The traces of every episode, and the prompts the engine was sent, per episode."""
    family, directory, tokenizer = family_dir
    engine = Engine(family, tokenizer)
    server = FakeSGLang(engine.policy, tokenizer=tokenizer)
    server.start()
    settings = {"renderer_family": "default", **config}
    gateway = Gateway(GatewayConfig(
        str(directory), host="127.0.0.1", port=0, tool_call_parser="none", reasoning_parser="none", **settings
    ))
    traces, prompts = [], []
    try:
        gateway.start(server.url)
        for i, turns in enumerate(EPISODES):
            sent = len(server.requests)
            url = gateway.create_session(f"e{i}")
            with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
                _play(client, engine, turns)
            traces.append(gateway.traces(f"e{i}"))
            prompts.append([list(r["input_ids"]) for r in server.requests[sent:]])
    finally:
        gateway.shutdown()
        server.stop()
    return traces, prompts


def test_every_episode_is_one_sample_of_exactly_what_the_engine_saw_and_sampled(family_dir) -> None:
    traces, prompts = _episodes(family_dir)
    for episode, sent in zip(traces, prompts, strict=True):
        assert [t.joined for t in episode] == ["start"] + ["extended"] * (len(episode) - 1)
        [segment] = merge_traces(episode)
        response = segment.tokens[segment.prompt_length :]
        sampled = [tok for tok, bit in zip(response, segment.loss_mask, strict=True) if bit]
        assert sampled == [tok for t in episode for tok in t.completion_token_ids]
        for trace, prompt in zip(episode, sent, strict=True):  # each call: the sequence so far
            assert trace.prompt_token_ids == prompt == segment.tokens[: len(prompt)]
            end = len(prompt) + len(trace.completion_token_ids)
            assert segment.tokens[len(prompt) : end] == trace.completion_token_ids


def test_following_the_rerender_splits_the_families_that_render_history_otherwise(family_dir) -> None:
    """CUMULATIVE_BRIDGE=template (the bridge before): a family whose template drops reasoning
    (or the last turn's empty <think> block) from history forks at each new user turn at least;
    the trace says why."""
    family = family_dir[0]
    traces, _ = _episodes(family_dir, cumulative_bridge="template")
    samples = sum(len(merge_traces(episode)) for episode in traces)
    reasons = {t.chain_break for episode in traces for t in episode if t.joined == "forked"}
    if family.name in ("kimi-k2", "deepseek-v3.1"):  # no reasoning in history to drop
        assert samples == len(EPISODES) and not reasons
    else:  # at least one per user turn (GLM's re-render also re-spaces the kept reasoning)
        assert samples >= sum(len(turns) for turns in EPISODES)
        assert "reasoning dropped" in reasons and reasons <= {"reasoning dropped", "re-tokenized"}


def _builder(family_name: str, tmp_path: Path) -> tuple[Any, Any]:
    from agentcore_slime.gateway.family import choose_renderer, generation_stop_ids
    from agentcore_slime.gateway.rendering import PromptBuilder
    from transformers import AutoTokenizer

    directory = build_family_dir(tmp_path / family_name, FAMILIES[family_name])
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    renderer, _ = choose_renderer(
        str(directory), tokenizer, "default", tool_call_parser=None, reasoning_parser=None
    )
    return PromptBuilder(renderer, tokenizer, "default", generation_stop_ids(str(directory))), tokenizer


def _chain(
    builder: Any, tokenizer: Any, messages: list[dict[str, Any]], sampled: str, stop: str | None
) -> Any:
    from agentcore_slime.gateway.conversation import ChainState

    prompt = builder.render_array(messages, None)
    ids = tokenizer.encode(sampled, add_special_tokens=False)
    completion = [*ids, tokenizer.convert_tokens_to_ids(stop)] if stop else ids
    reply = {"role": "assistant", "content": sampled}
    return ChainState(prompt + type(prompt)("i", completion), len(prompt), messages, reply, "[]")


def test_a_reply_that_ended_otherwise_than_the_template_ends_it_is_rendered_in_full(tmp_path) -> None:
    """GLM: a reply that sampled <|user|> cannot be followed by tool results (<|observation|>)."""
    builder, tokenizer = _builder("glm-4.5", tmp_path)
    history = [{"role": "user", "content": "2+2?"}]
    chain = _chain(builder, tokenizer, history, "\n<think></think>\ncall add", "<|user|>")
    messages = [*history, chain.response, {"role": "tool", "content": "4"}]
    prompt, why = builder.bridge(messages, None, chain)
    assert prompt is None and why == "the reply ended with '<|user|>', the template ends it otherwise"


def test_a_truncated_reply_gets_the_templates_close_then_the_new_messages(tmp_path) -> None:
    builder, tokenizer = _builder("qwen3", tmp_path)
    history = [{"role": "user", "content": "2+2?"}]
    chain = _chain(builder, tokenizer, history, "<think>\nlong thoughts", None)  # cut at max tokens
    messages = [*history, {"role": "assistant", "content": ""}, {"role": "user", "content": "go on"}]
    chain.response = {"role": "assistant", "content": ""}
    prompt, _ = builder.bridge(messages, None, chain)
    assert prompt is not None and prompt.ids[: len(chain.ids)] == chain.ids
    added = tokenizer.decode(prompt.ids[len(chain.ids) :].tolist())
    assert added == "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n"


# the renderers library's own families for these models (its Hub map: Qwen3-8B, Qwen3.5, GLM-4.5-Air,
# GLM-4.7-Flash -> glm-5, DeepSeek-V3, Kimi-K2-Instruct)
RENDERERS_FAMILIES = {
    "qwen3": "qwen3", "qwen3.5": "qwen3.5", "glm-4.5": "glm-4.5", "glm-4.7": "glm-5",
    "deepseek-v3.1": "deepseek-v3", "kimi-k2": "kimi-k2",
}


def test_the_renderers_families_are_one_sample_per_episode_too(family_dir) -> None:
    """RENDERER_FAMILY=<the renderers family>: its bridge, rebuilt to bridge every turn."""
    traces, prompts = _episodes(family_dir, renderer_family=RENDERERS_FAMILIES[family_dir[0].name])
    for episode, sent in zip(traces, prompts, strict=True):
        assert [t.joined for t in episode] == ["start"] + ["extended"] * (len(episode) - 1)
        [segment] = merge_traces(episode)
        for trace, prompt in zip(episode, sent, strict=True):
            assert trace.prompt_token_ids == prompt == segment.tokens[: len(prompt)]
