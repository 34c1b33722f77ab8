"""generate_rollout end to end with stand-ins: HTTP agent, gateway session API, local S3.

slime's side is the stand-in of its types plus :mod:`fakes.slime_split` (what slime checks
after the rollout returns). The agent is reached over loopback HTTP through the local
transport, results go through the moto S3 server, and the state holder is the real one
with only the gateway factory replaced.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.episodes.log_ids import short_id
from agentcore_slime.rollout import runtime
from agentcore_slime.rollout.rewards import normalize_episode_rewards
from agentcore_slime.rollout.samples import ShimRecord, is_padding
from agentcore_slime.settings.config import ConfigError
from fakes.data_source import ListDataSource
from fakes.slime_split import check_sample_invariants, flatten, trained_positions
from fakes.standins import Behaviour, call, make_args, multi_turn
from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
from slime.utils.eval_config import EvalDatasetConfig
from slime.utils.types import Sample


def behaviour_for(payload: dict[str, Any], sid: str) -> Behaviour:
    """Scripted agent: the row's ``case`` decides what happens; reward = the row's ``score``."""
    case = payload.get("case", "ok")
    reward = {"rewards": payload.get("score", 1.0)}
    if case == "error":
        return Behaviour(error="tool crashed")
    if case == "http":
        return Behaviour(http_status=500)
    if case == "hang":
        return Behaviour(result=None)
    if case == "notraces":
        return Behaviour(result=reward, traces=[])
    if case == "break":
        traces = multi_turn(2) + [call([7, 7, 7], [8, 9], finish="length", mode="rendered")]
        return Behaviour(result=reward, traces=traces)
    return Behaviour(result=reward, delay=0.02)


def rows(*cases: str) -> list[dict[str, Any]]:
    return [
        {"prompt": f"q{i}", "metadata": {"case": c, "score": float(i % 2), "q": i}}
        for i, c in enumerate(cases)
    ]


def train_args(bucket: str, url: str, **kw: Any) -> Any:
    return make_args(agent_url=url, s3_bucket=bucket, **kw)


def test_train_step(s3_bucket: str, agents: Any, gateway: Any, shim_state: Any) -> None:
    agent = agents.start(behaviour_for)
    args = train_args(s3_bucket, agent.url, rollout_batch_size=2, n_samples_per_prompt=3)
    source = ListDataSource(rows("ok", "break"), n_samples_per_prompt=3)
    output = rollout.generate_rollout(args, 0, source)
    assert isinstance(output, RolloutFnTrainOutput) and len(output.samples) == 2
    first, second = output.samples
    assert len(first) == 3 and len(second) == 6  # "break" episodes have two segments each
    samples = flatten(output.samples)
    check_sample_invariants(samples)
    assert [s.group_index for s in first] == [0] * 3 and [s.group_index for s in second] == [1] * 6
    by_session: dict[str, set[int]] = {}
    for s in samples:
        by_session.setdefault(s.session_id, set()).add(s.rollout_id)
    assert len(by_session) == 6 and all(len(ids) == 1 for ids in by_session.values())
    assert len({next(iter(ids)) for ids in by_session.values()}) == 6
    assert [s.reward for s in first] == [0.0] * 3 and [s.reward for s in second] == [1.0] * 6
    assert second[1].status == Sample.Status.TRUNCATED and second[1].tokens == [7, 7, 7, 8, 9]
    # payload: the row's metadata plus _rollout; one input_id for the whole step
    payloads = [p for _, p in agent.invocations]
    assert {p["_rollout"]["input_id"] for p in payloads} == {payloads[0]["_rollout"]["input_id"]}
    assert all(p["_rollout"]["base_url"].endswith(f"/sessions/{sid}/v1") for sid, p in agent.invocations)
    for sid, p in agent.invocations:  # every protocol's address of the session (docs/agents.md)
        assert p["_rollout"]["anthropic_base_url"] == p["_rollout"]["bedrock_endpoint_url"]
        assert p["_rollout"]["anthropic_base_url"].endswith(f"/sessions/{sid}")
    assert sorted(p["q"] for p in payloads) == [0, 0, 0, 1, 1, 1]
    assert all("_rollout" not in s.metadata for s in samples)
    # gateway sessions: trainer sampling params, all deleted
    assert set(gateway.deleted) == set(gateway.sampling) == set(by_session)
    assert all(
        v == {"temperature": 0.8, "top_p": 1.0, "top_k": -1, "max_new_tokens": 64}
        for v in gateway.sampling.values()
    )
    _, normalized = normalize_episode_rewards(args, samples)
    assert normalized == [0.0] * 9  # equal rewards within each group


def test_thirty_percent_failures_in_one_step(
    s3_bucket: str, agents: Any, shim_state: Any, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agents.start(behaviour_for)
    args = train_args(s3_bucket, agent.url, rollout_batch_size=10, n_samples_per_prompt=1, acr_timeout=1.0)
    source = ListDataSource(rows(*(["ok"] * 7 + ["error", "http", "hang"])), n_samples_per_prompt=1)
    with caplog.at_level(logging.INFO, logger="agentcore_slime"):
        output = rollout.generate_rollout(args, 5, source)
    samples = flatten(output.samples)
    assert len(output.samples) == 10 and [len(g) for g in output.samples] == [1] * 10
    check_sample_invariants(samples)
    failed = [s for s in samples if s.status == Sample.Status.FAILED]
    assert len(failed) == 3
    assert all(s.loss_mask == [0] and s.reward == 0.0 and s.response == "" for s in failed)
    reasons = [ShimRecord.of(s).reason for s in failed]
    assert reasons[0].startswith("agent error result (status_code 500): tool crashed")
    assert reasons[1].startswith("invoke failed: HTTP 500") and reasons[2].startswith("timeout")
    records = [r for r in caplog.records if r.name.startswith("agentcore_slime")]
    assert all(r.levelno == logging.INFO for r in records)
    summaries = [r.getMessage() for r in records if "rollout 5:" in r.getMessage()]
    assert len(summaries) == 1
    assert summaries[0].startswith(
        "train rollout 5: 10 episodes, 7 succeeded, 3 failed "
        "(infrastructure: agent_crashed 1, invoke_error 1, timeout 1), 7 sequences, "
        "mean reward 0.4286, pass rate 0.429, 7/10 groups without reward variance, "
    )
    assert output.metrics["agentcore/failures/timeout"] == 1
    assert output.metrics["agentcore/valid_episodes"] == 7
    assert reasons == [ShimRecord.of(s).reason for s in failed]
    assert [ShimRecord.of(s).failure for s in failed] == ["agent_crashed", "invoke_error", "timeout"]
    failures = [r.getMessage() for r in records if r.getMessage().startswith("episode failed")]
    # each failed episode named by a shortened session id, never the whole (a live credential)
    assert len(failures) == 3 and all(short_id(s.session_id) in " ".join(failures) for s in failed)
    assert not any(s.session_id in " ".join(failures) for s in failed)
    assert len(records) == 4  # nothing per successful episode


def test_bad_metadata_and_missing_traces_fail_their_episode(
    s3_bucket: str, agents: Any, shim_state: Any
) -> None:
    agent = agents.start(behaviour_for)
    data = rows("ok", "notraces") + [{"prompt": "odd", "metadata": ["not", "a", "dict"]}]
    output = rollout.generate_rollout(
        train_args(s3_bucket, agent.url, rollout_batch_size=3, n_samples_per_prompt=1),
        0,
        ListDataSource(data, n_samples_per_prompt=1),
    )
    reasons = [ShimRecord.of(g[0]).reason for g in output.samples]
    assert reasons[0] is None
    assert reasons[1] == "no usable traces (0 calls recorded by the gateway)"
    assert reasons[2].startswith("row metadata is list, not a dict")
    assert len(agent.invocations) == 2  # the bad row never reached the agent


def test_a_step_where_every_episode_fails_raises(s3_bucket: str, agents: Any, shim_state: Any) -> None:
    agent = agents.start(behaviour_for)
    args = train_args(s3_bucket, agent.url, rollout_batch_size=2, n_samples_per_prompt=2)
    with pytest.raises(RuntimeError, match=r"all 4 episodes failed.*status_code 500"):
        rollout.generate_rollout(args, 0, ListDataSource(rows("error"), n_samples_per_prompt=2))


def test_padding_for_the_dp_split(s3_bucket: str, agents: Any, shim_state: Any) -> None:
    agent = agents.start(behaviour_for)
    args = train_args(
        s3_bucket,
        agent.url,
        rollout_batch_size=2,
        n_samples_per_prompt=3,
        actor_num_gpus_per_node=4,
        micro_batch_size=1,
        global_batch_size=6,  # divides the 6 episodes (a non-divisor is refused)
    )
    output = rollout.generate_rollout(args, 0, ListDataSource(rows("ok", "break"), n_samples_per_prompt=3))
    samples = flatten(output.samples)
    check_sample_invariants(samples)
    real = {i for i, s in enumerate(samples) if not is_padding(s)}
    assert len(real) == 9 and len(samples) > 9
    assert real <= trained_positions(args, samples, dp_size=4)
    raw, normalized = normalize_episode_rewards(args, samples)
    assert all(raw[i] == normalized[i] == 0.0 for i in range(len(samples)) if i not in real)
    assert output.metrics["agentcore/padding_samples"] == len(samples) - 9


def test_config_error_before_anything_starts(agents: Any, gateway: Any, shim_state: Any) -> None:
    agent = agents.start(behaviour_for)
    args = make_args(agent_url=agent.url, s3_bucket=None)
    with pytest.raises(ConfigError, match=r"s3_bucket: not set.*runs/exp-test/toolkit.yaml"):
        rollout.generate_rollout(args, 0, ListDataSource(rows("ok"), 1))
    with pytest.raises(ConfigError, match="rollout_top_p: 0.9 is not supported"):
        rollout.generate_rollout(
            make_args(agent_url=agent.url, s3_bucket="rl-results", rollout_top_p=0.9), 0, None
        )
    assert shim_state.factory_calls == [] and agent.invocations == [] and gateway.sampling == {}


@pytest.mark.parametrize(
    ("router_ip", "gateway_host", "bound"),
    [
        ("127.0.0.1", None, None),  # one node: train.sh binds slime's router to loopback
        ("::1", None, None),
        ("10.0.0.5", None, "10.0.0.5"),  # several nodes: beside the router, on its address
        ("127.0.0.1", "10.0.0.9", "10.0.0.9"),  # GATEWAY_HOST wins
    ],
)
def test_the_gateway_never_binds_loopback_because_slimes_router_does(
    router_ip: str, gateway_host: str | None, bound: str | None
) -> None:
    """An unset GATEWAY_HOST means "beside slime's router", but a router on loopback (every
    one-node run) is no address an agent on ACR can reach: the gateway then serves on every
    interface and advertises a reachable address (host None), as bin/eval's does."""
    args = make_args(agent_url="http://h:1", s3_bucket="rl-results", gateway_host=gateway_host)
    args.sglang_router_ip = router_ip
    assert runtime.gateway_config(runtime.load_config(args), args).host == bound


def test_default_gateway_factory_names_missing_slime_args() -> None:
    config = runtime.load_config(make_args(agent_url="http://h:1", s3_bucket="rl-results"))
    with pytest.raises(ConfigError, match="hf_checkpoint: not set"):
        runtime.default_gateway_factory(config, make_args(hf_checkpoint=None))
    with pytest.raises(ConfigError, match="sglang_router_ip/sglang_router_port"):
        runtime.default_gateway_factory(config, make_args(sglang_router_ip=None))


def test_runtime_persists_and_concurrency_is_bounded(
    s3_bucket: str, agents: Any, gateway: Any, shim_state: Any
) -> None:
    agent = agents.start(lambda payload, sid: Behaviour(delay=0.15))
    args = train_args(s3_bucket, agent.url, rollout_batch_size=6, n_samples_per_prompt=1, max_concurrent=2)
    source = ListDataSource(rows("ok"), n_samples_per_prompt=1)
    rollout.generate_rollout(args, 0, source)
    rollout.generate_rollout(args, 1, source)
    assert len(shim_state.factory_calls) == 1
    assert gateway.max_live == 2 and len(agent.invocations) == 12


def test_trace_log(
    s3_bucket: str, agents: Any, shim_state: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "trace.jsonl"
    monkeypatch.setenv("TRACE_LOG", str(log))
    agent = agents.start(behaviour_for)
    args = train_args(s3_bucket, agent.url, rollout_batch_size=1, n_samples_per_prompt=2)
    rollout.generate_rollout(args, 3, ListDataSource(rows("break"), n_samples_per_prompt=2))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 6  # 2 episodes x 3 calls
    assert [r["segment"] for r in records if r["session_id"] == records[0]["session_id"]] == [0, 0, 1]
    assert {r["rollout_id"] for r in records} == {3} and records[2]["finish_reason"] == "length"


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return str(path)


def test_eval(s3_bucket: str, agents: Any, gateway: Any, shim_state: Any, tmp_path: Path) -> None:
    agent = agents.start(behaviour_for)
    math_path = write_jsonl(tmp_path / "math.jsonl", rows("ok", "ok", "error"))
    more_path = write_jsonl(tmp_path / "more.jsonl", rows("ok", "break"))
    datasets = [
        EvalDatasetConfig(
            name="math", path=math_path, n_samples_per_eval_prompt=2, temperature=0.0, max_response_len=32
        ),
        EvalDatasetConfig(name="more", path=more_path + "@[1:2]", metadata_overrides={"extra": 1}),
    ]
    args = train_args(s3_bucket, agent.url, eval_datasets=datasets, acr_timeout=5)
    output = rollout.generate_rollout(args, 7, None, evaluation=True)
    assert isinstance(output, RolloutFnEvalOutput)
    math, more = output.data["math"], output.data["more"]
    # the valid episodes only, aligned (the failed "error" row's two episodes are counted apart)
    assert math["rewards"] == [0.0, 0.0, 1.0, 1.0]
    assert math["truncated"] == [False] * 4 and [s.index for s in math["samples"]] == list(range(4))
    assert more["rewards"] == [1.0] and more["truncated"] == [True]
    assert output.metrics == {
        "eval/math/reward_mean": 0.5,
        "eval/math/accuracy": 0.5,
        "eval/math/episodes": 6,
        "eval/math/valid": 4,
        "eval/math/failed": 2,
        "eval/math/failures/agent_crashed": 2,
        "eval/more/reward_mean": 1.0,
        "eval/more/accuracy": 1.0,
        "eval/more/episodes": 1,
        "eval/more/valid": 1,
        "eval/more/failed": 0,
    }
    eval_payloads = [p for _, p in agent.invocations if p.get("extra") == 1]
    assert len(eval_payloads) == 1 and eval_payloads[0]["case"] == "break"
    math_sessions = [sid for sid, p in agent.invocations if "extra" not in p]
    assert all(
        gateway.sampling[sid] == {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 32}
        for sid in math_sessions
    )
    # datasets are cached across calls
    Path(math_path).unlink()
    again = rollout.generate_rollout(args, 8, None, evaluation=True)
    assert len(again.data["math"]["rewards"]) == 4


def test_eval_with_an_empty_dataset_fails_before_any_episode(
    s3_bucket: str, agents: Any, gateway: Any, shim_state: Any, tmp_path: Path
) -> None:
    """slime divides by len(rewards) when it logs eval/<name> (rollout.py:1267 at fa3c990)."""
    agent = agents.start(behaviour_for)
    path = write_jsonl(tmp_path / "math.jsonl", rows("ok", "ok"))
    datasets = [EvalDatasetConfig(name="math", path=path + "@[5:9]")]
    args = train_args(s3_bucket, agent.url, eval_datasets=datasets, acr_timeout=5)
    with pytest.raises(ValueError, match=r"eval dataset 'math' .* has no rows"):
        rollout.generate_rollout(args, 0, None, evaluation=True)
    assert agent.invocations == []


def test_eval_datasets_resolved_like_slime(
    s3_bucket: str, agents: Any, gateway: Any, shim_state: Any, tmp_path: Path
) -> None:
    """args.eval_datasets as slime fa3c990 builds them from --eval-prompt-data and the eval flags
    (build_eval_dataset_configs): the shim uses the resolved per-dataset values."""
    from slime.utils.eval_config import build_eval_dataset_configs

    agent = agents.start(behaviour_for)
    path = write_jsonl(tmp_path / "val.jsonl", rows("ok", "ok")) + "@[1:]"
    args = train_args(s3_bucket, agent.url, acr_timeout=5)
    args.eval_temperature, args.n_samples_per_eval_prompt, args.eval_max_response_len = 0.0, 2, 16
    args.eval_datasets = build_eval_dataset_configs(args, [{"name": "validation", "path": path}], {})
    output = rollout.generate_rollout(args, 0, None, evaluation=True)
    assert output.data["validation"]["rewards"] == [1.0, 1.0]
    assert all(gateway.sampling[sid]["temperature"] == 0.0 for sid, _ in agent.invocations)
    assert all(gateway.sampling[sid]["max_new_tokens"] == 16 for sid, _ in agent.invocations)


def test_an_eval_step_over_two_datasets_writes_under_one_prefix(
    s3_bucket: str, agents: Any, shim_state: Any, tmp_path: Any
) -> None:
    """One input id for every dataset of an eval step: one LIST per cycle finds all their results."""
    from agentcore_slime import rollout
    from slime.utils.eval_config import EvalDatasetConfig

    agent = agents.start(behaviour_for)
    datasets = [
        EvalDatasetConfig(name="math", path=write_jsonl(tmp_path / "math.jsonl", rows("ok", "ok"))),
        EvalDatasetConfig(name="more", path=write_jsonl(tmp_path / "more.jsonl", rows("ok"))),
    ]
    output = rollout.generate_rollout(
        train_args(s3_bucket, agent.url, eval_datasets=datasets, acr_timeout=5), 7, None, evaluation=True
    )
    assert len(output.data["math"]["rewards"]) == 2 and len(output.data["more"]["rewards"]) == 1
    input_ids = {payload["_rollout"]["input_id"] for _, payload in agent.invocations}
    assert len(agent.invocations) == 3 and len(input_ids) == 1
    assert next(iter(input_ids)).startswith("eval-7-")
