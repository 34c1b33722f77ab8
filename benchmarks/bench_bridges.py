"""Compare the ways cumulative mode turns a multi-turn episode into training samples.

Usage:
    .venv/bin/python benchmarks/bench_bridges.py [--episodes 24] [--seed 7] [--reasoning-words 60]

The same episodes (1 to 4 user turns, 0 to 3 tool calls per turn, every reply with reasoning)
with the PUBLISHED Qwen3 chat template (tests/fixtures/chat_templates/qwen3.jinja on the toy
vocabulary, ``<think>``/``<tool_call>`` ordinary added tokens as in the real tokenizer) go through
the real openai SDK (the agent sends each reply back whole, reasoning included), the gateway
in-process and the scripted SGLang stand-in, once per bridge:

- ``new-messages`` (design a, the default): the merge's samples;
- ``template`` (the bridge before: follow the template's re-render, fork where it differs);
- ``trajectory`` (design b, slime's trajectory manager): computed from the ``template`` run's
  traces, one sample per episode that follows the template's last render, each earlier reply's
  sampled tokens trained where they survive in it (aligned with difflib), the rest mask 0.

Per design: samples per episode, trained tokens, the last call's prompt against the template's
own render of the same conversation (tokens and ratio: how much longer the model's context grows),
train/serve difference (tokens the trained model saw that the deployed template would not show,
for design a; trained tokens whose context in the sample is not the context they were sampled in,
for design b; none for the re-render, which trains each sample on what it saw), and the prompt
tokens the trainer encodes again (each sample's prompt: shared prefixes re-computed).
One JSON line per design, then a Markdown table. Everything is on loopback; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "python"
sys.path[:0] = [str(ROOT / "python"), str(TESTS), str(TESTS / "gateway")]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]
WORDS = "the sum of a and b is what we add then check each number so the answer follows".split()


def episodes(count: int, seed: int) -> list[tuple[int, ...]]:
    """Tool calls per user turn for each episode (1 to 4 user turns, 0 to 3 calls each)."""
    rng = random.Random(seed)
    return [tuple(rng.randint(0, 3) for _ in range(rng.randint(1, 4))) for _ in range(count)]


def replies(turns: tuple[int, ...], rng: random.Random, words: int) -> list[str]:
    """What Qwen3 samples in thinking mode: reasoning, then a tool call or the answer."""
    out = []
    for turn, calls in enumerate(turns):
        for step in range(calls + 1):
            thought = " ".join(rng.choice(WORDS) for _ in range(words))
            if step < calls:
                call = json.dumps({"name": "add", "arguments": {"a": turn, "b": step}})
                body = f"<tool_call>\n{call}\n</tool_call>"
            else:
                body = f"The sum is {turn + step}."
            out.append(f"<think>\n{thought}\n</think>\n\n{body}")
    return out


def play(client: Any, turns: tuple[int, ...]) -> list[dict[str, Any]]:
    """One episode through the openai SDK; the conversation as the agent holds it at the end."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You add numbers with a tool."}]
    for turn in range(len(turns)):
        messages.append({"role": "user", "content": f"Question {turn}: add the numbers."})
        while True:
            out = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            reply = out.choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                break
            messages += [{"role": "tool", "tool_call_id": c.id, "content": "7"} for c in reply.tool_calls]
    return messages


def run(
    directory: Path, tokenizer: Any, plan: list[tuple[int, ...]], bridge: str, seed: int, words: int
) -> Any:
    """Every episode's traces and final conversation under one bridge."""
    import openai
    from agentcore_slime.gateway import Gateway, GatewayConfig
    from fakes.sglang_server import FakeSGLang, text_policy
    from gateway_helpers import Script

    rng = random.Random(seed)
    script = Script([r for turns in plan for r in replies(turns, rng, words)])
    engine = FakeSGLang(text_policy(tokenizer, script.respond), tokenizer=tokenizer)
    engine.start()
    gateway = Gateway(GatewayConfig(
        str(directory), host="127.0.0.1", port=0, reasoning_parser="qwen3", tool_call_parser="qwen",
        renderer_family="default", cumulative_bridge=bridge,
    ))
    out = []
    try:
        gateway.start(engine.url)
        for i, turns in enumerate(plan):
            url = gateway.create_session(f"e{i}")
            with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
                messages = play(client, turns)
            out.append((gateway.traces(f"e{i}"), messages))
    finally:
        gateway.shutdown()
        engine.stop()
    return out


def template_length(renderer: Any, messages: list[dict[str, Any]]) -> int:
    """The deployed template's prompt for the conversation before its last reply."""
    from agentcore_slime.gateway.conversation import normalize_messages

    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    history = normalize_messages(messages[:last])
    return len(renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True))


def merged(traces: list[Any]) -> dict[str, int]:
    from agentcore_slime.rollout.traces import merge_traces

    segments = merge_traces(traces)
    return {
        "samples": len(segments),
        "trained": sum(sum(s.loss_mask) for s in segments),
        "training_tokens": sum(len(s.tokens) for s in segments),
    }


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def trajectory(traces: list[Any]) -> dict[str, int]:
    """Design b from the re-render's traces: one sample, the last call's prompt + completion;
    each call's sampled ids trained where they survive in it (``trained``), of which
    ``off_context`` sit after a place where the sample differs from what the call saw."""
    last = traces[-1]
    final = [*last.prompt_token_ids, *last.completion_token_ids]
    trained = off_context = 0
    for trace in traces:
        seen = [*trace.prompt_token_ids, *trace.completion_token_ids]
        start = len(trace.prompt_token_ids)
        same = common_prefix(seen, final)  # the sample's context equals the call's up to here
        matcher = difflib.SequenceMatcher(None, seen, final, autojunk=False)
        for block in matcher.get_matching_blocks():
            lo, hi = max(block.a, start), block.a + block.size  # the call's sampled ids in the block
            if hi > lo:
                trained += hi - lo
                on_context = max(0, min(hi, same) - lo) if block.a == block.b else 0
                off_context += hi - lo - on_context
    return {"samples": 1, "trained": trained, "off_context": off_context, "training_tokens": len(final)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reasoning-words", type=int, default=60, help="words of reasoning per reply")
    args = parser.parse_args()
    from agentcore_slime.gateway.family import choose_renderer
    from chat_templates import FAMILIES, build_family_dir
    from transformers import AutoTokenizer

    directory = build_family_dir(Path(tempfile.mkdtemp(prefix="bench-bridges-")), FAMILIES["qwen3"])
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    renderer, _ = choose_renderer(
        str(directory), tokenizer, "default", tool_call_parser="qwen", reasoning_parser=None
    )
    plan = episodes(args.episodes, args.seed)
    runs = {
        bridge: run(directory, tokenizer, plan, bridge, args.seed, args.reasoning_words)
        for bridge in ("new-messages", "template")
    }
    rows = []
    designs = (("new-messages", "new-messages"), ("template", "template"), ("trajectory", "template"))
    for design, source in designs:
        totals: dict[str, int] = {}
        for traces, messages in runs[source]:
            figures = trajectory(traces) if design == "trajectory" else merged(traces)
            last_prompt = len(traces[-1].prompt_token_ids)
            deployed = template_length(renderer, messages)
            figures |= {"last_prompt": last_prompt, "deployed": deployed}
            figures["sampled"] = sum(len(t.completion_token_ids) for t in traces)
            for key, value in figures.items():
                totals[key] = totals.get(key, 0) + value
        n = len(plan)
        row = {
            "design": design,
            "episodes": n,
            "user_turns": sum(len(t) for t in plan),
            "samples_per_episode": round(totals["samples"] / n, 2),
            "trained_tokens": totals["trained"],
            "sampled_tokens": totals["sampled"],
            "last_prompt_tokens": totals["last_prompt"],
            "template_prompt_tokens": totals["deployed"],
            "prompt_vs_template": round(totals["last_prompt"] / totals["deployed"], 3),
            "train_serve_tokens": (totals["last_prompt"] - totals["deployed"]) if design == "new-messages"
            else totals.get("off_context", 0),
            "tokens_in_training": totals["training_tokens"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = [k for k in rows[0] if k not in ("design", "episodes", "user_turns")]
    print("\n| design | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for row in rows:
        print(f"| {row['design']} | " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
