"""generate_rollout through the real gateway (default factory), a scripted SGLang and a chatting agent.

Everything but the model is real: ``default_gateway_factory`` starts the gateway from
slime-like args (toy tokenizer dir as ``hf_checkpoint``, the scripted SGLang server
(``fakes.sglang_server``) as slime's router), the stand-in agent sends OpenAI chat calls
to the session's base URL, results go through the local S3 server, and the gateway's
traces are merged into Samples. What the fake engine sampled must be exactly what the
Samples train on.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.rollout import runtime
from agentcore_slime.rollout.samples import ShimRecord
from fakes.data_source import ListDataSource
from fakes.s3 import LocalS3
from fakes.sglang_server import FakeSGLang, text_policy
from fakes.slime_split import check_sample_invariants, flatten
from fakes.standins import Behaviour, StandinAgent, make_args
from fakes.toy_tokenizer import build_toy_tokenizer
from slime.utils.eval_config import EvalDatasetConfig


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FakeSGLang, Any]]:
    from transformers import AutoTokenizer

    model_dir = build_toy_tokenizer(tmp_path_factory.mktemp("toy-model"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with FakeSGLang(text_policy(tokenizer, lambda prompt: "The answer is 4."), tokenizer=tokenizer) as fake:
        yield model_dir, fake, tokenizer



def _args_for(agent: Any, s3_bucket: str, model_dir: Any, fake: Any, **extra: Any) -> Any:
    """slime's args for a rollout through the real gateway (in its process) to ``fake``."""
    return make_args(
        agent_url=agent.url,
        s3_bucket=s3_bucket,
        hf_checkpoint=str(model_dir),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(fake.url.rsplit(":", 1)[1]),
        gateway_host="127.0.0.1",
        **extra,
    )

def test_rollout_with_the_real_gateway(
    s3_bucket: str, local_s3: LocalS3, engine: tuple[Path, FakeSGLang, Any]
) -> None:
    model_dir, fake, tokenizer = engine
    chat = Behaviour(result={"rewards": 1.0}, chat=["What is 2+2?", "Are you sure?"])
    agent = StandinAgent(lambda payload, sid: chat, local_s3.client())
    agent.start()
    runtime._STATE.reset()
    try:
        args = _args_for(agent, s3_bucket, model_dir, fake, rollout_batch_size=1, n_samples_per_prompt=2)
        before = len(fake.requests)
        output = rollout.generate_rollout(args, 0, ListDataSource([{"prompt": "q", "metadata": {"q": 1}}], 2))
    finally:
        runtime._STATE.reset()
        agent.stop()
    samples = flatten(output.samples)
    check_sample_invariants(samples)
    assert {s.session_id for s in samples} == {sid for sid, _ in agent.invocations} and len(
        agent.invocations
    ) == 2
    assert all(s.reward == 1.0 for s in samples)
    requests: list[dict[str, Any]] = fake.requests[before:]
    assert len(requests) == 4  # 2 episodes x 2 chat calls
    assert all(r["sampling_params"]["temperature"] == 0.8 for r in requests)
    completion = [
        *tokenizer.encode("The answer is 4.", add_special_tokens=False),
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    sent_prompts = [r["input_ids"] for r in requests]
    calls_per_episode: dict[str, int] = {}
    for sample in samples:
        info = sample.metadata["agentcore"]
        response = sample.tokens[len(sample.tokens) - sample.response_length :]
        trained = [t for t, m in zip(response, sample.loss_mask, strict=True) if m]
        assert trained == completion * len(info["calls"])  # exactly what the engine sampled
        assert sample.tokens[: len(sample.tokens) - sample.response_length] in sent_prompts
        calls_per_episode[sample.session_id] = calls_per_episode.get(sample.session_id, 0) + len(
            info["calls"]
        )
    assert calls_per_episode == {sid: 2 for sid, _ in agent.invocations}


def test_a_killed_gateway_process_fails_its_episodes_and_the_next_step_restarts_it(
    s3_bucket: str, local_s3: LocalS3, engine: tuple[Path, FakeSGLang, Any], tmp_path: Path
) -> None:
    """The gateway runs in its own process: SIGKILLed mid-episode (the agent is running), the
    episode fails with ``gateway_error`` saying so, and the next step gets a new gateway."""
    model_dir, fake, _ = engine
    killed: list[int] = []

    def script(payload: dict[str, Any], sid: str) -> Behaviour:
        if not killed:  # the first episode: its session is open, the agent runs; the gateway dies
            assert runtime._STATE.runtime is not None
            pid = runtime._STATE.runtime.gateway.members[0].pid  # type: ignore[attr-defined]  # the one process
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return Behaviour(result={"rewards": 1.0})
        return Behaviour(result={"rewards": 1.0}, chat=["What is 2+2?"])

    agent = StandinAgent(script, local_s3.client())
    agent.start()
    data = tmp_path / "val.jsonl"
    data.write_text(json.dumps({"prompt": "q", "metadata": {"q": 1}}) + "\n")
    runtime._STATE.reset()
    try:
        args = _args_for(
            agent, s3_bucket, model_dir, fake, eval_datasets=[EvalDatasetConfig(name="val", path=str(data))]
        )
        first = rollout.generate_rollout(args, 0, None, evaluation=True)
        record = ShimRecord.of(first.data["val"]["samples"][0])
        assert first.metrics["eval/val/failed"] == 1 and record.failure == "gateway_error"
        assert f"the gateway process (pid {killed[0]}) died: killed by SIGKILL" in record.reason
        first_url = runtime._STATE.runtime.gateway.url  # type: ignore[union-attr]

        before = len(fake.requests)
        second = rollout.generate_rollout(args, 1, None, evaluation=True)
        gateway = runtime._STATE.runtime.gateway  # type: ignore[union-attr]
        assert gateway.members[0].pid != killed[0] and gateway.url != first_url  # GATEWAY_PORT 0: a new port
        assert second.data["val"]["rewards"] == [1.0] and second.metrics["eval/val/failed"] == 0
        assert len(fake.requests) == before + 1  # the agent's call went through the new gateway
    finally:
        runtime._STATE.reset()
        agent.stop()


def test_a_step_through_the_real_gateway_costs_the_model_applied_to_its_episodes(
    s3_bucket: str, local_s3: LocalS3, engine: tuple[Path, FakeSGLang, Any], tmp_path: Path
) -> None:
    """Issue 26 through the real gateway process: each agent reports what it spent; one session
    is capped by MAX_CALLS_PER_EPISODE (its second call gets the gateway's short final reply,
    which the engine never sees). metrics.jsonl's cost by part is the model (agentcore_slime.cost)
    applied to the step's episodes, and the capped episode is counted as such, not as a failure."""
    from agentcore_slime.cost import Rates

    model_dir, fake, _ = engine
    chat = Behaviour(result={"rewards": 1.0, "cost_usd": 0.125}, chat=["What is 2+2?", "Are you sure?"])
    agent = StandinAgent(lambda payload, sid: chat, local_s3.client())
    agent.start()
    runtime._STATE.reset()
    try:
        args = _args_for(
            agent, s3_bucket, model_dir, fake, rollout_batch_size=1, n_samples_per_prompt=2,
            custom_config_path=str(tmp_path / "toolkit.yaml"), node_hour_usd=36.0, num_nodes=2,
            max_calls_per_episode=1,
        )  # fmt: skip
        before = len(fake.requests)
        rollout.generate_rollout(args, 0, ListDataSource([{"prompt": "q", "metadata": {"q": 1}}], 2))
    finally:
        runtime._STATE.reset()
        agent.stop()
    assert len(fake.requests) - before == 2  # one sampled call per episode: the second was capped
    [line] = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    cost, rates = line["cost"], Rates(node_hour_usd=36.0, num_nodes=2)
    step = cost["step"]
    assert line["episodes"]["failed"] == 0 and cost["capped_episodes"] == 2
    assert step["agent_usd"] == pytest.approx(2 * 0.125)
    assert step["acr_usd"] == pytest.approx(line["session_seconds"] * rates.acr_estimate_per_second)
    assert step["acr_upper_usd"] == pytest.approx(line["session_seconds"] * rates.acr_upper_per_second)
    assert step["gpu_usd"] == pytest.approx(36.0 * 2 * cost["gpu_seconds"] / 3600)
    assert step["total_usd"] == pytest.approx(step["gpu_usd"] + step["agent_usd"] + step["acr_usd"])
    assert cost["per_successful_episode_usd"] == pytest.approx(step["total_usd"] / 2)
