"""Issue 13: infrastructure failures stay out of the gradient; over-sampling cuts the tail.

Rewards: the shim's hook (``normalize_episode_rewards``) runs inside the stand-in of slime
fa3c990's ``RolloutManager._post_process_rewards`` (``slime_standin/slime/ray/rollout.py``), and
is compared with slime's own default post-processing of the valid episodes alone.

Over-sampling: ``generate_rollout`` runs with the real state holder, the ACR data-plane
stand-in (boto3 ``bedrock-agentcore`` through ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``), the
stand-in agent, the local S3 server and the stand-in gateway; the last test uses the real
gateway in front of the scripted SGLang engine. Filters are slime's, loaded by dotted path
from the stand-in (``slime.rollout.filter_hub``), exactly as a user passes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.rollout import runtime
from agentcore_slime.rollout.episode import _Episode, _failed
from agentcore_slime.rollout.rewards import normalize_episode_rewards
from agentcore_slime.rollout.samples import KIND_EPISODE, METADATA_KEY, ShimRecord
from agentcore_slime.settings.config import ConfigError
from fakes.acr_dataplane import AcrDataPlane
from fakes.data_source import ListDataSource
from fakes.s3 import LocalS3
from fakes.slime_split import check_sample_invariants, flatten
from fakes.standins import Behaviour, StandinAgent, make_args
from slime.ray.rollout import RolloutManager
from slime.utils.types import Sample

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/math_agent-AbC123"
FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


# ---------------------------------------------------------------- rewards


def _episode(group: int, number: int, reward: float) -> Sample:
    sid = f"session-{group}-{number}-0123456789abcdef0123456789"
    info = {"kind": KIND_EPISODE, "session_id": sid}
    metadata = {METADATA_KEY: info}
    return Sample(group_index=group, index=number, reward=reward, session_id=sid, metadata=metadata)


def _timeout(group: int, number: int) -> Sample:
    episode = _Episode(Sample(group_index=group, index=number, metadata={}), 0, number, "step", {})
    [sample] = _failed(episode, "timeout", "timeout: no result").samples
    return sample


def _args(**kw: Any) -> SimpleNamespace:
    values = dict(
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
        n_samples_per_prompt=8, rollout_batch_size=1, reward_key=None, reward_postprocessing="grpo",
        infra_failures="exclude",
    )
    values.update(kw)
    return SimpleNamespace(**values)


def _advantages(args: Any, samples: list[Sample]) -> list[float]:
    return RolloutManager(args, normalize_episode_rewards)._post_process_rewards(samples)[1]


def _slime_default(args: Any, samples: list[Sample]) -> list[float]:
    return RolloutManager(args)._post_process_rewards(samples)[1]


def test_an_infrastructure_failure_leaves_the_siblings_advantages_unchanged() -> None:
    """7 correct episodes + 1 timeout: the correct ones get what slime gives 7 correct alone (0)."""
    args = _args()
    correct = [_episode(0, i, 1.0) for i in range(7)]
    with_timeout = _advantages(args, [*correct, _timeout(0, 7)])
    alone = _slime_default(_args(n_samples_per_prompt=7), correct)
    assert with_timeout[:7] == pytest.approx(alone) == [0.0] * 7
    assert with_timeout[7] == 0.0


def test_a_genuine_zero_reward_moves_the_siblings_advantages() -> None:
    """An episode the agent scored 0 is reward signal: +0.354 for each correct sibling, as slime computes."""
    args = _args()
    samples = [*(_episode(0, i, 1.0) for i in range(7)), _episode(0, 7, 0.0)]
    ours = _advantages(args, samples)
    assert ours == pytest.approx(_slime_default(args, samples), abs=1e-6)
    assert ours[0] == pytest.approx(0.3536, abs=1e-4)


def test_zero_reward_setting_keeps_the_old_rule() -> None:
    samples = [*(_episode(0, i, 1.0) for i in range(7)), _timeout(0, 7)]
    ours = _advantages(_args(infra_failures="zero-reward"), samples)
    assert ours[0] == pytest.approx(0.3536, abs=1e-4)


def test_a_group_left_with_one_valid_episode_trains_nothing() -> None:
    args = _args()
    samples = [_episode(0, 0, 1.0), *(_timeout(0, i) for i in range(1, 8))]
    samples += [_episode(1, i, float(i % 2)) for i in range(8)]
    advantages = _advantages(args, samples)
    assert advantages[:8] == [0.0] * 8
    assert any(a != 0.0 for a in advantages[8:])


# ---------------------------------------------------------------- over-sampling


def script(payload: dict[str, Any], sid: str) -> Behaviour:
    """The row's ``case``: ``slow`` never finishes within the test, ``flat`` scores 1 every time,
    ``mixed`` alternates 1 and 0 (reward variance within the group)."""
    case = payload.get("case", "ok")
    if case == "slow":
        return Behaviour(result={"rewards": 1.0}, delay=20.0)
    if case == "mixed":
        script.calls = getattr(script, "calls", 0) + 1  # type: ignore[attr-defined]
        return Behaviour(result={"rewards": float(script.calls % 2)})  # type: ignore[attr-defined]
    return Behaviour(result={"rewards": 1.0}, delay=0.05)


def rows(*cases: str) -> list[dict[str, Any]]:
    return [{"prompt": f"q{i}", "metadata": {"case": c, "q": i}} for i, c in enumerate(cases)]


@pytest.fixture
def acr_agent(agents: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AcrDataPlane, StandinAgent]]:
    agent = agents.start(script)
    plane = AcrDataPlane({ARN: agent.url})
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.start())
    yield plane, agent
    plane.stop()


def acr_args(bucket: str, **kw: Any) -> Any:
    return make_args(agent_runtime_arn=ARN, s3_bucket=bucket, acr_timeout=30, **kw)


def test_over_sampling_returns_the_first_complete_groups_and_aborts_the_rest(
    s3_bucket: str, acr_agent: Any, gateway: Any, shim_state: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plane, agent = acr_agent
    args = acr_args(s3_bucket, rollout_batch_size=2, n_samples_per_prompt=2, over_sampling_batch_size=4)
    source = ListDataSource(rows("ok", "slow", "ok", "slow"), n_samples_per_prompt=2)
    with caplog.at_level(logging.INFO, logger="agentcore_slime"):
        output = rollout.generate_rollout(args, 0, source)
    assert len(output.samples) == 2  # and the slow groups were aborted, not waited for (below)
    samples = flatten(output.samples)
    check_sample_invariants(samples)
    assert {s.metadata["case"] for s in samples} == {"ok"}
    slow = {sid for sid, payload in agent.invocations if payload["case"] == "slow"}
    assert len(slow) == 4 and not slow & {s.session_id for s in samples}
    assert slow <= {sid for _, sid in plane.stops}  # ACR sessions stopped
    assert slow <= set(gateway.aborted) and slow <= set(gateway.deleted)  # gateway sessions ended
    assert set(gateway.deleted) == set(gateway.sampling)  # nothing leaked
    assert sorted({s.rollout_id for s in samples}) == [0, 1, 2, 3]
    assert output.metrics["agentcore/groups_started"] == 4 and output.metrics["agentcore/groups_aborted"] == 2
    assert any("groups started 4, aborted 2 (requeued 0)" in r.getMessage() for r in caplog.records)
    assert source.buffer == []  # without --partial-rollout the aborted prompts are not returned


def test_partial_rollout_returns_the_aborted_groups_to_the_data_source(
    s3_bucket: str, acr_agent: Any, shim_state: Any
) -> None:
    args = acr_args(
        s3_bucket,
        rollout_batch_size=1,
        n_samples_per_prompt=2,
        over_sampling_batch_size=2,
        partial_rollout=True,
    )
    source = ListDataSource(rows("ok", "slow"), n_samples_per_prompt=2)
    output = rollout.generate_rollout(args, 0, source)
    assert [s.metadata["case"] for s in flatten(output.samples)] == ["ok", "ok"]
    [requeued] = source.buffer
    expected = ("q1", 1, {"case": "slow", "q": 1})
    assert [(s.prompt, s.group_index, s.metadata) for s in requeued] == [expected] * 2
    assert all(s.response == "" and s.reward is None for s in requeued)  # the original prompts, untouched
    assert output.metrics["agentcore/groups_aborted"] == 1


def test_dynamic_filter_drops_groups_without_signal_and_keeps_sampling(
    s3_bucket: str, agents: Any, shim_state: Any
) -> None:
    agent = agents.start(script)
    args = make_args(
        agent_url=agent.url, s3_bucket=s3_bucket, rollout_batch_size=2, n_samples_per_prompt=2,
        dynamic_sampling_filter_path=FILTER,
    )
    source = ListDataSource(rows("flat", "mixed"), n_samples_per_prompt=2)
    output = rollout.generate_rollout(args, 0, source)
    assert len(output.samples) == 2
    for group in output.samples:
        assert {s.metadata["case"] for s in group} == {"mixed"} and {s.reward for s in group} == {0.0, 1.0}
    # both "flat" groups are dropped by the filter, or the second is aborted once the step has two
    dropped = output.metrics["agentcore/dropped_groups/zero_std_1.0"]
    assert dropped >= 1 and dropped + output.metrics["agentcore/groups_aborted"] == 2
    assert output.metrics["agentcore/groups_started"] == 4


def test_the_cap_on_extra_groups_bounds_the_cost(
    s3_bucket: str, agents: Any, shim_state: Any, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agents.start(script)
    args = make_args(
        agent_url=agent.url, s3_bucket=s3_bucket, rollout_batch_size=2, n_samples_per_prompt=2,
        dynamic_sampling_filter_path=FILTER, max_extra_groups=2,
    )
    with caplog.at_level(logging.WARNING, logger="agentcore_slime"):
        output = rollout.generate_rollout(args, 0, ListDataSource(rows("flat"), n_samples_per_prompt=2))
    assert len(agent.invocations) == 8  # 2 groups + at most 2 extra, 2 episodes each
    assert len(output.samples) == 2  # the step keeps its size with groups that carry no signal
    assert any("cap on extra groups" in r.getMessage() for r in caplog.records)


def test_groups_with_too_few_valid_episodes_are_replaced_when_over_sampling(
    s3_bucket: str, agents: Any, shim_state: Any
) -> None:
    agent = agents.start(lambda payload, sid: Behaviour(error="tool crashed") if payload["case"] == "crash"
                         else Behaviour(result={"rewards": 1.0}))
    args = make_args(agent_url=agent.url, s3_bucket=s3_bucket, rollout_batch_size=1, n_samples_per_prompt=2,
                     over_sampling_batch_size=2)
    output = rollout.generate_rollout(args, 0, ListDataSource(rows("crash", "ok"), n_samples_per_prompt=2))
    assert [s.metadata["case"] for s in flatten(output.samples)] == ["ok", "ok"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mask_offpolicy_in_partial_rollout": True}, "mask_offpolicy_in_partial_rollout: .*nothing to mask"),
        ({"custom_rm_path": "my.rm"}, "custom_rm_path: .* the reward is the one the agent writes"),
        ({"rollout_sample_filter_path": "my.filter"}, "rollout_sample_filter_path"),
        ({"dynamic_sampling_filter_path": "no_such_module.fn"}, "cannot import 'no_such_module'"),
        ({"over_sampling_batch_size": 1}, "over_sampling_batch_size: 1 is below rollout_batch_size 2"),
        ({"over_sampling_batch_size": 6, "max_extra_groups": 3}, "max_extra_groups: 3 is below the 4 extra"),
    ],
)
def test_what_cannot_be_honoured_is_refused_before_anything_starts(
    agents: Any, gateway: Any, shim_state: Any, overrides: dict[str, Any], message: str
) -> None:
    agent = agents.start(script)
    args = make_args(agent_url=agent.url, s3_bucket="rl-results", **overrides)
    with pytest.raises(ConfigError, match=message):
        rollout.generate_rollout(args, 0, ListDataSource(rows("ok"), 1))
    assert shim_state.factory_calls == [] and agent.invocations == [] and gateway.sampling == {}


def test_tail_cut_aborts_the_engine_request_through_the_real_gateway(
    s3_bucket: str, local_s3: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACR stand-in, real gateway, scripted engine. The slow episode's chat call is in flight at
    the engine when the step has its group: its ACR session is stopped, the gateway aborts the
    call (SGLang ``/abort_request`` with its rid) and nothing of it reaches a sample."""
    from fakes.sglang_server import FakeSGLang, text_policy
    from fakes.toy_tokenizer import build_toy_tokenizer
    from transformers import AutoTokenizer

    model_dir = build_toy_tokenizer(tmp_path / "toy-model")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    delays = iter([2.0])
    with FakeSGLang(
        text_policy(tokenizer, lambda prompt: "4."), tokenizer=tokenizer, delay=lambda: next(delays, 0.0)
    ) as engine:
        def behaviour(payload: dict[str, Any], sid: str) -> Behaviour:
            if payload["case"] == "slow":  # chats at once; its call is the engine's first (2 s)
                return Behaviour(result={"rewards": 1.0}, chat=["2+2?"])
            return Behaviour(result={"rewards": 1.0}, chat=["2+2?"], delay=0.5)

        agent = StandinAgent(behaviour, local_s3.client())
        agent.start()
        plane = AcrDataPlane({ARN: agent.url})
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.start())
        runtime._STATE.reset()
        try:
            args = make_args(
                agent_runtime_arn=ARN, s3_bucket=s3_bucket, hf_checkpoint=str(model_dir),
                sglang_router_ip="127.0.0.1", sglang_router_port=int(engine.url.rsplit(":", 1)[1]),
                gateway_host="127.0.0.1", rollout_batch_size=1, n_samples_per_prompt=1,
                over_sampling_batch_size=2,
            )
            output = rollout.generate_rollout(args, 0, ListDataSource(rows("slow", "fast"), 1))
        finally:
            runtime._STATE.reset()
            plane.stop()
            agent.stop()
        [[sample]] = output.samples
        assert sample.metadata["case"] == "fast" and ShimRecord.of(sample).kind == KIND_EPISODE
        [slow] = [sid for sid, payload in agent.invocations if payload["case"] == "slow"]
        assert (ARN, slow) in plane.stops and sample.session_id != slow
        first_rid = engine.requests[0]["rid"]
        assert first_rid in engine.aborted_rids


def test_hung_invocations_do_not_starve_the_step(s3_bucket: str, acr_agent: Any, shim_state: Any) -> None:
    """Issue 18 (9): the runtime never answers two invocations; MAX_CONCURRENT = pool = 2 and
    ACR_TIMEOUT = 1 s. The hung episodes fail as timeouts after about a second and the two
    healthy ones then run (before: botocore retried the hung calls with a 60 s read timeout in
    the pool the gateway calls share, and the step took 60-67 s)."""
    plane, _ = acr_agent
    hang = plane._faults.hang_sessions

    def hang_first_two(payload: dict[str, Any], sid: str) -> Behaviour:
        if payload["case"] == "hang":
            hang.add(sid)  # the data plane reads it after forwarding: the agent got the call
        return Behaviour(result={"rewards": float(payload["q"] % 2)})

    acr_agent[1].script = hang_first_two
    args = acr_args(s3_bucket, rollout_batch_size=4, n_samples_per_prompt=1, max_concurrent=2,
                    max_pool_connections=2)
    args.acr_timeout = 1
    started = time.monotonic()
    output = rollout.generate_rollout(args, 0, ListDataSource(rows("hang", "hang", "ok", "ok"), 1))
    elapsed = time.monotonic() - started
    failures = [ShimRecord.of(g[0]).failure for g in output.samples]
    assert failures == ["timeout", "timeout", None, None]
    assert elapsed < 60  # botocore's retries with its 60 s read timeout (before), not load


def test_the_scheduler_stops_when_the_data_source_runs_dry() -> None:
    """A data source that returns no more groups ends the sampling instead of looping."""
    import asyncio

    from agentcore_slime.rollout.sampling import SamplingPlan, sample_groups

    handed = iter([[1], []])

    async def fetch(count: int) -> list[int]:
        return next(handed, [])

    async def run_group(group: int) -> int:
        return group

    async def main() -> Any:
        return await sample_groups(SamplingPlan(3, 3, 3), fetch, run_group, lambda r: (True, None))

    outcome = asyncio.run(asyncio.wait_for(main(), 5))
    assert outcome.kept == [1] and outcome.started == 1 and outcome.aborted == []
