"""The real example math agent (examples/math_agent), looping, is capped at
MAX_CALLS_PER_EPISODE: through ``generate_rollout`` as slime calls it, the rollout's own gateway
(``default_gateway_factory``) answers the call after the cap with the final reply, the agent's
Strands loop ends normally, it writes its reward (0: no answer) and the episode trains on the
calls it sampled; metrics.jsonl counts it ``capped``, never an infrastructure failure.

Stand-ins (real protocols over loopback): moto's S3 server, the scripted SGLang server with the
toy Qwen2.5-like tokenizer (its policy calls the calculator on every turn, forever), the slime
stand-in's types and a list data source. The agent runs as ``app.run`` serves it (uvicorn).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.gateway.caps import CAPPED_TEXT
from agentcore_slime.rollout import runtime
from fakes.acr_dataplane import AgentServer
from fakes.data_source import ListDataSource
from fakes.s3 import LocalS3
from fakes.sglang_server import Completion, FakeSGLang
from fakes.standins import make_args
from fakes.toy_tokenizer import build_toy_tokenizer

CAP = 3
TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 1"}}\n</tool_call>'


@pytest.fixture
def looping(tmp_path: Path) -> Iterator[tuple[Any, SimpleNamespace, FakeSGLang]]:
    import agent as math_agent
    from transformers import AutoTokenizer

    model_dir = build_toy_tokenizer(tmp_path / "toy-qwen2.5")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def policy(input_ids: list[int], sampling: dict[str, Any]) -> Completion:
        ids = tokenizer.encode(TOOL_CALL, add_special_tokens=False) + [stop]
        return Completion(ids, {"type": "stop", "matched": stop})

    state = runtime._STATE
    state.reset()
    state.gateway_factory = runtime.default_gateway_factory
    with pytest.MonkeyPatch.context() as env, LocalS3() as s3:
        for key, value in s3.env().items():
            env.setenv(key, value)
        for key in (
            "AWS_ENDPOINT_URL",
            "TRACE_LOG",
            "AGENT_URL",
            "AGENT_RUNTIME_ARN",
            "S3_BUCKET",
        ):
            env.delenv(key, raising=False)
        bucket = s3.create_bucket()
        engine = FakeSGLang(policy, tokenizer=tokenizer, context_length=4096)
        with engine, AgentServer(math_agent.create_app()) as agent:
            host, port = engine.url.removeprefix("http://").rsplit(":", 1)
            args = make_args(  # slime's args as the rollout tests build them (fakes/standins.py)
                agent_url=agent.url,
                s3_bucket=bucket,
                exp_id="capped",
                gateway_host="127.0.0.1",
                acr_timeout=60,
                max_concurrent=8,
                sglang_tool_call_parser="qwen",
                cumulative_token_mode=True,
                custom_config_path=str(tmp_path / "toolkit.yaml"),
                max_calls_per_episode=CAP,
                hf_checkpoint=str(model_dir),
                sglang_router_ip=host,
                sglang_router_port=int(port),
                sglang_context_length=4096,
                rollout_batch_size=1,
                n_samples_per_prompt=2,
                rollout_temperature=1.0,
                rollout_max_response_len=256,
                num_rollout=1,
            )
            yield s3, args, engine
    state.reset()


def test_the_looping_example_agent_is_capped_writes_its_reward_and_trains(
    looping, tmp_path: Path
) -> None:
    s3, args, engine = looping
    question = "What is one plus one, added again and again?"
    rows = [{"prompt": question, "metadata": {"prompt": question, "answer": "2"}}]
    output = rollout.generate_rollout(
        args, 0, ListDataSource(rows, n_samples_per_prompt=2)
    )
    samples = [s for group in output.samples for s in group]
    assert len(samples) == 2 and all(s.reward is not None for s in samples)
    assert all(sum(s.loss_mask) > 0 for s in samples)  # trains on what it sampled
    assert len(engine.requests) == 2 * CAP  # the final replies never reached the engine
    client = s3.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=args.s3_bucket)["Contents"]]
    results = [
        json.loads(client.get_object(Bucket=args.s3_bucket, Key=k)["Body"].read())
        for k in keys
    ]
    assert [r["rewards"] for r in results] == [0.0, 0.0]
    assert all(r["metrics"]["tool_calls"] == CAP for r in results)
    [line] = [
        json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert line["episodes"]["capped"] == 2 and line["episodes"]["failed"] == 0
    assert line["cost"]["capped_episodes"] == 2
    assert line["gateway"]["calls"] == 2 * CAP
    recorded = (tmp_path / "episodes" / "train-000000.jsonl").read_text()
    assert (
        '"capped": true' in recorded and CAPPED_TEXT not in recorded
    )  # nothing of it traced
