"""The agent episode runner against a real local S3 server (moto) and HTTP agent stand-ins.

Local transport: the runner POSTs to a :class:`StandinAgent` on loopback. ACR transport:
boto3 ``bedrock-agentcore`` reaches ``fakes.acr_dataplane.AcrDataPlane`` through
``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``, which forwards to the same stand-in agent. Results
are written to, listed from and read from the moto server by real boto3 calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agentcore_slime.cost import MAX_AGENT_COST_USD
from agentcore_slime.episodes import (
    EpisodeOutcome,
    EpisodeRequest,
    EpisodeRunner,
    RateLimiter,
    build_payload,
    extract_reward,
    make_runner,
    new_session_id,
)
from agentcore_slime.settings.config import ToolkitConfig, load_config
from fakes.acr_dataplane import AcrDataPlane
from fakes.standins import Behaviour, make_args

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/math_agent-AbC123"
SAMPLING = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 128}


def by_case(cases: dict[str, Behaviour]) -> Any:
    return lambda payload, sid: cases[payload["case"]]


def local_config(bucket: str, url: str, **kw: Any) -> ToolkitConfig:
    return load_config(make_args(agent_url=url, s3_bucket=bucket, **kw))


def request(case: str, input_id: str = "step-1", **metadata: Any) -> EpisodeRequest:
    sid = new_session_id()
    return EpisodeRequest({"case": case, **metadata}, sid, input_id, f"http://gw/sessions/{sid}/v1", SAMPLING)


def run(
    config: ToolkitConfig, requests: list[EpisodeRequest], launcher_hook: Any = None
) -> list[EpisodeOutcome]:
    async def main() -> list[EpisodeOutcome]:
        with ThreadPoolExecutor(max_workers=8) as pool:
            launcher = make_runner(config, pool)
            if launcher_hook:
                launcher_hook(launcher)
            try:
                return list(await asyncio.gather(*(launcher.run_episode(r) for r in requests)))
            finally:
                await launcher.close()

    return asyncio.run(main())


@pytest.fixture
def acr(agents: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An ACR data-plane stand-in; its runtime ARN forwards to the agent set on ``.agent``."""

    class Handle:
        plane: AcrDataPlane
        agent: Any

        def start(self, script: Any, **faults: Any) -> AcrDataPlane:
            agent = self.agent = agents.start(script)
            self.plane = AcrDataPlane({ARN: agent.url}, **faults)
            monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", self.plane.start())
            return self.plane

    handle = Handle()
    yield handle
    if hasattr(handle, "plane"):
        handle.plane.stop()


@pytest.mark.parametrize(
    ("result", "reward", "reason"),
    [
        ({"rewards": 1}, 1.0, None),
        ({"rewards": [0.1, 0.9], "status_code": 200}, 0.9, None),
        ({"rewards": -0.5, "stop_reason": "end_turn"}, -0.5, None),
        ({"rewards": 1.0, "status_code": 500, "stop_reason": "boom"}, None, "status_code 500): boom"),
        ({"metrics": {}}, None, "no 'rewards' key"),
        ({"rewards": []}, None, "empty list"),
        ({"rewards": True}, None, "True, not a number"),
        ({"rewards": "1.0"}, None, "'1.0', not a number"),
        ({"rewards": [1, None]}, None, "None, not a number"),
        ({"rewards": float("nan")}, None, "not a finite number"),
    ],
)
def test_extract_reward(result: dict[str, Any], reward: float | None, reason: str | None) -> None:
    got_reward, got_reason = extract_reward(result)
    assert got_reward == reward
    assert (reason is None and got_reason is None) or (reason and got_reason and reason in got_reason)


def test_payload_is_a_copy_of_the_metadata_plus_rollout() -> None:
    metadata = {"prompt": "2+2?", "answer": "4", "_rollout": "user value is replaced"}
    payload = build_payload(
        metadata,
        exp_id="e",
        input_id="i",
        s3_bucket="b",
        base_url="u/v1",
        model_id="m",
        sampling=SAMPLING,
        episode_timeout=900.0,
    )
    assert payload["_rollout"] == {
        "exp_id": "e",
        "input_id": "i",
        "s3_bucket": "b",
        "base_url": "u/v1",
        "anthropic_base_url": "u",
        "bedrock_endpoint_url": "u",
        "model_id": "m",
        "sampling_params": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 128},
        "episode_timeout": 900.0,
    }
    assert metadata["_rollout"] == "user value is replaced" and payload["answer"] == "4"


def test_session_ids_are_valid_for_acr_and_unique() -> None:
    ids = {new_session_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(33 <= len(i) <= 256 for i in ids)


def test_local_success_sends_the_acr_wire_format(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(by_case({"ok": Behaviour(result={"rewards": 0.75}, delay=0.1)}))
    req = request("ok", question="2+2?")
    [outcome] = run(local_config(s3_bucket, agent.url), [req])
    assert outcome.ok and outcome.reward == 0.75 and outcome.session_id == req.session_id
    assert outcome.result is not None and outcome.result["status_code"] == 200
    [(header_sid, payload)] = agent.invocations
    assert header_sid == req.session_id
    assert payload["question"] == "2+2?" and payload["case"] == "ok"
    assert payload["_rollout"]["input_id"] == "step-1" and payload["_rollout"]["base_url"] == req.base_url
    assert payload["_rollout"]["s3_bucket"] == s3_bucket and payload["_rollout"]["exp_id"] == "exp-test"
    assert "_rollout" not in req.payload_metadata


def test_local_error_result_and_invoke_failures(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(
        by_case(
            {
                "error": Behaviour(error="agent exploded"),
                "http": Behaviour(http_status=500),
                "bool": Behaviour(result={"rewards": False}),
            }
        )
    )
    outcomes = run(local_config(s3_bucket, agent.url), [request("error"), request("http"), request("bool")])
    assert [o.ok for o in outcomes] == [False, False, False]
    assert "status_code 500): agent exploded" in str(outcomes[0].reason)
    assert str(outcomes[1].reason).startswith("invoke failed: HTTP 500")
    assert "not a number" in str(outcomes[2].reason)


def test_unreachable_local_agent_is_an_invoke_failure(s3_bucket: str) -> None:
    [outcome] = run(local_config(s3_bucket, "http://127.0.0.1:9"), [request("ok")])
    assert str(outcome.reason).startswith("invoke failed:") and "127.0.0.1:9" in str(outcome.reason)


def test_local_timeout(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(by_case({"hang": Behaviour(result=None)}))
    [outcome] = run(local_config(s3_bucket, agent.url, acr_timeout=0.5), [request("hang")])
    assert str(outcome.reason).startswith("timeout: no result at s3://")


def test_acr_success_stops_the_session_after_the_result(s3_bucket: str, acr: Any) -> None:
    plane = acr.start(by_case({"ok": Behaviour(result={"rewards": [0.0, 1.0]}, delay=0.1)}))
    req = request("ok")
    [outcome] = run(load_config(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket)), [req])
    assert outcome.ok and outcome.reward == 1.0
    assert [(i.arn, i.session_id) for i in plane.invocations] == [(ARN, req.session_id)]
    assert plane.stops == [(ARN, req.session_id)]


def test_acr_timeout_stops_the_session(s3_bucket: str, acr: Any) -> None:
    plane = acr.start(by_case({"hang": Behaviour(result=None)}))
    req = request("hang")
    [outcome] = run(
        load_config(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket, acr_timeout=0.5)), [req]
    )
    assert str(outcome.reason).startswith("timeout")
    assert plane.stops == [(ARN, req.session_id)]


def test_acr_invoke_failure(s3_bucket: str, acr: Any) -> None:
    req = request("ok")
    acr.start(by_case({"ok": Behaviour()}), fail_sessions={req.session_id})
    [outcome] = run(load_config(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket)), [req])
    assert "invoke failed: RuntimeClientError" in str(outcome.reason)


def test_invoke_and_stop_share_one_limiter(s3_bucket: str, acr: Any) -> None:
    acr.start(by_case({"ok": Behaviour()}))
    counted: list[float] = []

    class Counting(RateLimiter):
        async def acquire(self) -> None:
            counted.append(time.monotonic())
            await super().acquire()

    def hook(launcher: EpisodeRunner) -> None:
        launcher.limiter = Counting(1000)

    outcomes = run(
        load_config(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket)),
        [request("ok") for _ in range(3)],
        hook,
    )
    assert all(o.ok for o in outcomes)
    assert len(counted) == 6  # 3 invokes + 3 stops


def test_rate_limiter_spaces_calls() -> None:
    """Five calls at 50/s cannot all start within less than 4 intervals (80 ms)."""

    async def main() -> tuple[float, list[float]]:
        limiter, times = RateLimiter(50), []
        started = time.monotonic()
        for _ in range(5):
            await limiter.acquire()
            times.append(time.monotonic())
        return started, times

    started, times = asyncio.run(main())
    assert times[-1] - started >= 4 * 0.02 - 0.002


def test_one_list_per_poll_cycle_finds_many_results(s3_bucket: str, agents: Any) -> None:
    cases = {f"d{i}": Behaviour(result={"rewards": i / 10}, delay=0.05 * (i % 6)) for i in range(30)}
    agent = agents.start(by_case(cases))
    watchers: list[Any] = []
    started = time.monotonic()
    outcomes = run(
        local_config(s3_bucket, agent.url),
        [request(c) for c in cases],
        lambda launcher: watchers.append(launcher.watcher),
    )
    elapsed = time.monotonic() - started
    assert [o.reward for o in outcomes] == [i / 10 for i in range(30)]
    [watcher] = watchers
    assert watcher.get_requests == 30
    assert 1 <= watcher.list_requests <= elapsed / 0.05 + 2  # one LIST per cycle, not per episode


def test_paginated_listing(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(lambda payload, sid: Behaviour(result={"rewards": 1.0}))

    watchers: list[Any] = []

    def small_pages(launcher: EpisodeRunner) -> None:
        launcher.watcher.page_size = 2
        watchers.append(launcher.watcher)

    outcomes = run(local_config(s3_bucket, agent.url), [request("x") for _ in range(7)], small_pages)
    assert all(o.ok for o in outcomes)
    assert watchers[0].list_requests >= 4  # 7 keys at 2 per page need 4 pages in the last cycle


def test_mixed_step_with_thirty_percent_failures(s3_bucket: str, agents: Any) -> None:
    cases = {
        "ok": Behaviour(result={"rewards": 1.0}, delay=0.05),
        "error": Behaviour(error="bad"),
        "http": Behaviour(http_status=503),
        "hang": Behaviour(result=None),
    }
    agent = agents.start(by_case(cases))
    names = ["ok"] * 7 + ["error", "http", "hang"]
    # the hung episode ends at the timeout; the others must end before it on a loaded machine too
    # (at 1.0 s all seven ok episodes failed in a CI run beside the other suites, load ~11)
    outcomes = run(local_config(s3_bucket, agent.url, acr_timeout=10.0), [request(n) for n in names])
    assert [o.ok for o in outcomes] == [True] * 7 + [False] * 3
    assert [str(o.reason).split(":")[0] for o in outcomes[7:]] == [
        "agent error result (status_code 500)",
        "invoke failed",
        "timeout",
    ]


def test_missing_bucket_fails_fast_instead_of_timing_out(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(by_case({"hang": Behaviour(result=None)}))
    started = time.monotonic()
    [outcome] = run(local_config("no-such-bucket-here", agent.url, acr_timeout=30), [request("hang")])
    assert "cannot list s3://no-such-bucket-here/exp-test/step-1/" in str(outcome.reason)
    assert time.monotonic() - started < 30


# --- issue 18: an invocation is never repeated, hung ones do not starve the step, results are bounded


@pytest.mark.parametrize("fault", ["gateway_timeout_sessions", "reset_sessions"])
def test_lost_reply_after_forwarding_ends_the_episode_without_a_second_run(
    s3_bucket: str, acr: Any, fault: str
) -> None:
    """The runtime forwards the payload (the agent starts) and then answers 504 or resets the
    connection. botocore would retry both in the same session, running the agent twice; the
    runner does not repeat the call: the episode is an infrastructure failure, the session stopped."""
    req = request("ok")
    plane = acr.start(by_case({"ok": Behaviour(delay=0.05)}), **{fault: {req.session_id}})
    [outcome] = run(load_config(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket)), [req])
    assert outcome.failure == "invoke_ambiguous" and str(outcome.reason).startswith("invoke failed:")
    assert len(plane.invocations) == 1
    assert [sid for sid, _ in acr.agent.invocations] == [req.session_id]  # the agent ran exactly once
    assert plane.stops == [(ARN, req.session_id)]


def test_throttling_is_still_retried_because_it_never_reaches_the_agent(s3_bucket: str, acr: Any) -> None:
    req = request("ok")
    plane = acr.start(by_case({"ok": Behaviour()}), throttle_first=2)
    [outcome] = run(load_config(make_args(agent_runtime_arn=ARN, s3_bucket=s3_bucket)), [req])
    assert outcome.ok, outcome.reason
    assert [i.status for i in plane.invocations] == [429, 429, 200]
    assert len(acr.agent.invocations) == 1


def test_huge_integer_reward_is_a_bad_reward_not_a_crash() -> None:
    reward, reason = extract_reward({"rewards": 10**400})
    assert reward is None and "an integer of 401 digits, not a finite number" in str(reason)
    reward, reason = extract_reward({"rewards": [0, 10**400]})
    assert reward is None and "not a finite number" in str(reason)


def test_huge_integer_reward_in_s3_fails_only_its_episode(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(by_case({"big": Behaviour(result={"rewards": 10**400}), "ok": Behaviour()}))
    outcomes = run(local_config(s3_bucket, agent.url), [request("big"), request("ok")])
    assert outcomes[0].failure == "bad_reward" and outcomes[1].ok


def test_a_cost_outside_the_ceiling_fails_only_its_episode(s3_bucket: str, agents: Any) -> None:
    """A reported cost that is not a number in 0..MAX_AGENT_COST_USD (10**400 made the step
    raise OverflowError; 1e308 made the run's total inf) is bad input: that episode fails with
    bad_cost and a message that names the figure, its sibling goes on."""
    cases = {
        "huge": Behaviour(result={"rewards": 1.0, "cost_usd": 10**400}),
        "inf": Behaviour(result={"rewards": 1.0, "cost_usd": 1e308}),
        "over": Behaviour(result={"rewards": 1.0, "cost_usd": MAX_AGENT_COST_USD + 1}),
        "text": Behaviour(result={"rewards": 1.0, "cost_usd": "lots"}),
        "ok": Behaviour(result={"rewards": 1.0, "cost_usd": MAX_AGENT_COST_USD}),
    }
    agent = agents.start(by_case(cases))
    outcomes = run(local_config(s3_bucket, agent.url), [request(case) for case in cases])
    assert [o.failure for o in outcomes] == ["bad_cost"] * 4 + [None]
    assert "result 'cost_usd' is 1e+308, not a number in 0..100" in str(outcomes[1].reason)
    assert outcomes[0].reward is None and outcomes[4].reward == 1.0


def test_oversized_result_is_unreadable(s3_bucket: str, agents: Any) -> None:
    agent = agents.start(by_case({"big": Behaviour(result={"rewards": 1.0, "blob": "x" * 5000})}))

    def small_limit(runner: EpisodeRunner) -> None:
        runner.watcher.max_result_bytes = 4096

    [outcome] = run(local_config(s3_bucket, agent.url), [request("big")], small_limit)
    assert outcome.failure == "result_unreadable" and "larger than 4096 bytes" in str(outcome.reason)
