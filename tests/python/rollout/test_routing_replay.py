"""Rollout routing replay: every sample slime receives carries ``rollout_routed_experts`` in
slime's layout, and an episode's rows are exactly the engine's.

slime's layout and checks, read at fa3c990 and v0.3.1: rows = ``len(tokens) - 1``, each
``num_layers x moe_router_topk`` int32 (``utils/types.py`` reshapes SGLang's answer so);
``ray/rollout.py`` takes the key into the training data only if ``samples[0]`` has it;
``megatron_utils/actor.py`` (v0.3.1: ``cp_utils.prepare_routed_experts_for_routing_replay``)
asserts ``experts.shape[0] == tokens.shape[0] - 1`` for every sample. slime itself needs torch
and is not importable here (tests/python/slime_standin); ``slime_checks`` below restates those
checks, and docs/rollout.md names the run of slime's own code on these samples.

Stand-ins: the scripted MoE engine (fakes.sglang_server, routed experts as SGLang encodes them;
each row a function of the tokens up to its position, so the rows a sample must carry are
computed from its tokens alone: the independent assembly), the stand-in agent, local S3.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agentcore_slime import rollout
from agentcore_slime.errors import ConfigError
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.rollout import runtime
from agentcore_slime.rollout.routing import (
    RoutingLayout,
    attach_routing,
    fill_routing,
    filler,
    routing_layout,
)
from agentcore_slime.rollout.samples import ShimRecord
from agentcore_slime.rollout.traces import merge_traces_to_samples
from fakes.data_source import ListDataSource
from fakes.s3 import LocalS3
from fakes.sglang_server import FakeSGLang, MoeShape, routed_rows, text_policy
from fakes.slime_split import check_sample_invariants, flatten
from fakes.standins import Behaviour, StandinAgent, call, make_args
from fakes.toy_tokenizer import build_toy_tokenizer
from slime.utils.types import Sample

SHAPE = MoeShape(layers=4, topk=2, experts=8)
LAYOUT = RoutingLayout(SHAPE.layers, SHAPE.topk, SHAPE.experts)
REPLAY = {"use_rollout_routing_replay": True, "num_layers": 4, "moe_router_topk": 2, "num_experts": 8}


def slime_checks(samples: list[Any]) -> None:
    """What slime checks of routed experts (see the module docstring)."""
    assert samples[0].rollout_routed_experts is not None  # else the key is not in the training data
    for sample in samples:
        rows = np.asarray(sample.rollout_routed_experts)
        assert rows.dtype == np.int32 and rows.shape == (len(sample.tokens) - 1, SHAPE.layers, SHAPE.topk)
        assert rows.min() >= 0 and rows.max() < SHAPE.experts


@pytest.fixture(scope="module")
def moe_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FakeSGLang]]:
    from transformers import AutoTokenizer

    model_dir = build_toy_tokenizer(tmp_path_factory.mktemp("toy-moe"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = text_policy(tokenizer, lambda prompt: f"reply {len(prompt) % 7}")
    with FakeSGLang(policy, tokenizer=tokenizer, routed_experts=SHAPE) as fake:
        yield model_dir, fake


def _rollout(agent: Any, bucket: str, model_dir: Path, fake: FakeSGLang, **extra: Any) -> list[Any]:
    args = make_args(
        agent_url=agent.url,
        s3_bucket=bucket,
        hf_checkpoint=str(model_dir),
        sglang_router_port=int(fake.url.rsplit(":", 1)[1]),
        gateway_host="127.0.0.1",
        rollout_batch_size=1,
        n_samples_per_prompt=3,
        **extra,
    )
    runtime._STATE.reset()
    try:
        output = rollout.generate_rollout(args, 0, ListDataSource([{"prompt": "q", "metadata": {"q": 1}}], 3))
    finally:
        runtime._STATE.reset()
    return flatten(output.samples)


def test_multi_turn_episodes_padding_and_failures_all_carry_slimes_layout(
    s3_bucket: str, local_s3: LocalS3, moe_engine: tuple[Path, FakeSGLang]
) -> None:
    model_dir, fake = moe_engine
    scripts = iter(
        [
            Behaviour(result={"rewards": 1.0}, chat=["one", "two", "three"]),
            Behaviour(error="the agent crashed"),  # a failed episode: a zero-gradient sample
            Behaviour(result={"rewards": 0.0}, chat=["only"]),
        ]
    )
    agent = StandinAgent(lambda payload, sid: next(scripts), local_s3.client())
    with agent:
        before = len(fake.requests)
        # 4 data-parallel ranks: the step is padded with zero-gradient samples
        samples = _rollout(agent, s3_bucket, model_dir, fake, actor_num_gpus_per_node=4, **REPLAY)
    check_sample_invariants(samples)
    slime_checks(samples)
    kinds = [ShimRecord.of(s).kind for s in samples]
    assert kinds.count("episode") == 2 and "failed" in kinds and "padding" in kinds
    for sample, kind in zip(samples, kinds, strict=True):
        if kind == "episode":  # the engine's rows, assembled across the calls: the independent assembly
            expected = routed_rows(sample.tokens, 0, len(sample.tokens) - 1, SHAPE)
            assert np.array_equal(sample.rollout_routed_experts, expected)
        else:
            assert np.array_equal(sample.rollout_routed_experts, filler(len(sample.tokens) - 1, LAYOUT))
    starts = [r["routed_experts_start_len"] for r in fake.requests[before:]]
    assert sorted(starts)[:2] == [0, 0] and max(starts) > 0  # later calls ask only for what they add


def test_engines_without_routed_experts_stop_the_first_step_before_any_agent_runs(
    s3_bucket: str, local_s3: LocalS3, moe_engine: tuple[Path, FakeSGLang]
) -> None:
    model_dir, fake = moe_engine
    fake.routed_experts = None  # engines started without --enable-return-routed-experts
    agent = StandinAgent(
        lambda payload, sid: Behaviour(result={"rewards": 1.0}, chat=["hi"]), local_s3.client()
    )
    try:
        with (
            agent,
            pytest.raises(RuntimeError, match="routing replay .* the engine returned no routed_experts"),
        ):
            _rollout(agent, s3_bucket, model_dir, fake, **REPLAY)
        assert agent.invocations == []
    finally:
        fake.routed_experts = SHAPE


def test_rows_lost_mid_run_fail_the_episode_as_infrastructure(
    s3_bucket: str, local_s3: LocalS3, moe_engine: tuple[Path, FakeSGLang]
) -> None:
    """An engine replaced mid-run by one without the flag: its episodes fail as routing_replay."""
    model_dir, fake = moe_engine

    def script(payload: dict[str, Any], sid: str) -> Behaviour:
        fake.routed_experts = None  # the gateway started (its check passed); now no rows
        return Behaviour(result={"rewards": 1.0}, chat=["hi"])

    agent = StandinAgent(script, local_s3.client())
    try:
        with agent, pytest.raises(RuntimeError, match="routed experts: call 1 of 1: the engine returned no"):
            _rollout(agent, s3_bucket, model_dir, fake, **REPLAY)
    finally:
        fake.routed_experts = SHAPE


def _traced(
    prompt: list[int], completion: list[int], start: int | None, rows: bytes | None, **kw: Any
) -> CallTrace:
    trace = call(prompt, completion, **kw)
    return CallTrace(**{**trace.__dict__, "routed_experts_start": start, "routed_experts": rows})


def _engine_call(prompt: list[int], completion: list[int], start: int, **kw: Any) -> CallTrace:
    """A call as the gateway records it: the engine's rows from ``start``."""
    sequence = prompt + completion
    return _traced(
        prompt, completion, start, routed_rows(sequence, start, len(sequence) - 1, SHAPE).tobytes(), **kw
    )


def _samples(traces: list[CallTrace]) -> list[Any]:
    template = Sample(index=0, group_index=0, prompt="p", metadata={})
    return merge_traces_to_samples(traces, template, session_id="s", reward=1.0, rollout_id=0)


def test_forks_assemble_from_the_prefix_each_call_shares() -> None:
    first = _engine_call([1, 2, 3], [4, 5], 0)
    second = _engine_call([1, 2, 3, 4, 5, 6], [7], 4)  # extends: asks from the last held row
    fork = _engine_call([1, 2, 9, 9], [8, 8], 2, mode="rendered")  # shares 2 ids: asks from 2
    traces = [first, second, CallTrace(**{**fork.__dict__, "joined": "forked"})]
    samples = _samples(traces)
    assert len(samples) == 2
    assert attach_routing(traces, samples, LAYOUT) is None
    for sample in samples:
        assert np.array_equal(
            sample.rollout_routed_experts, routed_rows(sample.tokens, 0, len(sample.tokens) - 1, SHAPE)
        )


def test_a_call_without_rows_is_recovered_by_a_later_call_that_asks_again() -> None:
    first = _traced([1, 2, 3], [4, 5], 0, None)  # the engine returned none
    second = _engine_call([1, 2, 3, 4, 5, 6], [7], 0)  # nothing held: asks from 0
    samples = _samples([first, second])
    assert attach_routing([first, second], samples, LAYOUT) is None
    (sample,) = samples
    assert np.array_equal(sample.rollout_routed_experts, routed_rows(sample.tokens, 0, 6, SHAPE))


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        (_traced([1, 2, 3, 4, 5, 6], [7], 4, None), "the engine returned no routed experts"),
        (_engine_call([1, 2, 3, 4, 5, 6], [7], 5), "start at 5, past the 4 held"),  # a gap
        (_engine_call([1, 9, 3, 4, 5, 6], [7], 4), "start at 4, past the 1 held"),  # other tokens
        (_traced([1, 2, 3, 4, 5, 6], [7], 4, b"\x00" * 8), "not the rows of 6 positions"),
        (_traced([1, 2, 3, 4, 5, 6], [7], None, None), "did not ask"),
    ],
)
def test_rows_that_cannot_be_rebuilt_exactly_are_refused(second: CallTrace, problem: str) -> None:
    first = _engine_call([1, 2, 3], [4, 5], 0)
    samples = _samples([first, second])
    found = attach_routing([first, second], samples, LAYOUT)
    assert found is not None and problem in found
    assert samples[0].rollout_routed_experts is None  # nothing half-set is trained


def test_expert_ids_outside_the_model_are_refused() -> None:
    bad = np.full((4, SHAPE.layers, SHAPE.topk), SHAPE.experts, dtype=np.int32)
    trace = _traced([1, 2, 3], [4, 5], 0, bad.tobytes())
    found = attach_routing([trace], _samples([trace]), LAYOUT)
    assert found is not None and "outside 0..7" in found


def test_fill_routing_checks_every_sample() -> None:
    trace = _engine_call([1, 2, 3], [4, 5], 0)
    samples = _samples([trace])
    assert attach_routing([trace], samples, LAYOUT) is None
    padding = Sample(tokens=[0, 0], response_length=1, loss_mask=[0])
    assert fill_routing([samples, [padding]], LAYOUT) == 1
    assert padding.rollout_routed_experts.shape == (1, SHAPE.layers, SHAPE.topk)
    samples[0].rollout_routed_experts = samples[0].rollout_routed_experts[1:]
    with pytest.raises(RuntimeError, match="is not"):
        fill_routing([samples], LAYOUT)


def test_the_layout_comes_from_slimes_args() -> None:
    assert routing_layout(make_args()) is None
    assert routing_layout(make_args(**REPLAY)) == LAYOUT
    with pytest.raises(ConfigError, match="MoE model"):
        routing_layout(make_args(use_rollout_routing_replay=True, num_layers=4, moe_router_topk=None))
    args = make_args(agent_url="http://127.0.0.1:1", s3_bucket="bucket", **REPLAY)
    gateway = runtime.gateway_config(runtime.load_config(args), args)
    assert (gateway.routed_experts_layers, gateway.routed_experts_topk) == (4, 2)


def test_a_side_call_between_turns_is_replayed_in_call_order() -> None:
    """Issue 45's side calls are recorded in the session's order too: the next main call asks
    from the prefix it shares with the side call, and the main sample's rows stay exact."""
    main = _engine_call([1, 2, 3], [4, 5], 0)
    side = CallTrace(**{**_engine_call([1, 2, 9], [8], 2).__dict__, "side_call": "title"})
    again = _engine_call([1, 2, 3, 4, 5, 6], [7], 2)  # shares [1, 2] with the side call's sequence
    traces = [main, side, again]
    samples = _samples(traces)
    assert [ShimRecord.of(s).calls for s in samples] == [(0, 2)]  # the side call is not trained
    assert attach_routing(traces, samples, LAYOUT) is None
    expected = routed_rows(samples[0].tokens, 0, len(samples[0].tokens) - 1, SHAPE)
    assert np.array_equal(samples[0].rollout_routed_experts, expected)
