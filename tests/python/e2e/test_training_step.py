"""End-to-end rehearsal of one training step's rollout on a CPU machine, on loopback only.

This is the executable version of docs/how-a-training-step-works.md. Real parts, unchanged:
``examples/prepare_gsm8k.py`` (builds the dataset), the example math agent
(``examples/math_agent``: agentcore-rl-toolkit's ``AgentCoreRLApp`` served by uvicorn as
``app.run`` serves it, Strands with the ``openai`` SDK, the calculator tool, the exact-match
reward), botocore writing/reading S3, the toolkit's gateway (started by the rollout's own
``default_gateway_factory``), launcher (local transport and ACR transport), trace merging and
``normalize_episode_rewards``, all called through ``generate_rollout`` exactly as slime calls it.

Stand-ins (each speaks the real protocol over real HTTP):

- S3: moto's server mode (``fakes.s3.LocalS3``), reached through ``AWS_ENDPOINT_URL_S3``.
- The GPU engine: ``fakes.sglang_server.FakeSGLang`` (SGLang's ``/generate``) with the locally
  built Qwen2.5-like toy tokenizer; :class:`ScriptedPolicy` below plays a small policy model.
- slime: the slime stand-in's ``Sample``/output types, a slime-shaped ``args`` namespace and a
  data source that hands out prompt groups like slime's ``RolloutDataSource``.
- ACR: ``fakes.acr_dataplane.AcrDataPlane`` (the boto3 data-plane wire protocol), reached through
  ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``, forwarding to the same agent server.

The policy: for every problem the first turn calls the calculator with the problem's last GSM8K
calculation; the second turn answers with the tool's result (right) or the result plus one
(wrong). Per prompt group the plan is: always right, always wrong, right then wrong, and
"fail first" (the first episode of that group rambles until the conversation no longer fits the
model's context, so the agent fails; the other episode is right).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import prepare_gsm8k
import pytest
from agentcore_slime import rollout
from agentcore_slime.episodes.log_ids import short_id
from agentcore_slime.rollout import runtime
from agentcore_slime.rollout.rewards import normalize_episode_rewards
from fakes.acr_dataplane import AcrDataPlane, AgentServer
from fakes.data_source import ListDataSource
from fakes.s3 import LocalS3
from fakes.sglang_server import Completion, FakeSGLang, fake_logprob
from fakes.toy_tokenizer import build_toy_tokenizer
from slime.utils.types import Sample

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "data" / "gsm8k_sample.jsonl"
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/gsm8k_math_agent-AbCdEf1234"
CONTEXT_LENGTH = 640  # first prompts are ~450-480 toy tokens; a normal episode needs ~530
TRAIN_PLANS = ("right", "wrong", "alternate", "fail_first")
EVAL_PLANS = ("right", "wrong", "right", "right")
N_SAMPLES = 2
FILLER = "Let me think about this very carefully before I compute anything at all. " * 40


@dataclass(frozen=True)
class Problem:
    """One GSM8K-style problem and what the scripted policy does with it."""

    question: str
    answer: str
    expression: str
    plan: str


def _problems(rows: list[dict[str, Any]], plans: tuple[str, ...]) -> list[Problem]:
    problems = []
    for row, plan in zip(rows, plans, strict=True):
        expression = re.findall(r"<<([^=<>]+)=", row["answer"])[-1]
        final = prepare_gsm8k.extract_final_answer(row["answer"])
        problems.append(Problem(row["question"].strip(), final, expression, plan))
    return problems


@dataclass
class ScriptedPolicy:
    """A policy for FakeSGLang: ``(input_ids, sampling_params) -> Completion``.

    :param tokenizer: the toy tokenizer (decodes the prompt, encodes the reply).
    :param problems: question -> problem.
    """

    tokenizer: Any
    problems: dict[str, Problem]
    compact_tool_json: bool = False
    sampled: set[tuple[int, ...]] = field(default_factory=set)
    first_turns: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, compact_tool_json: bool = False) -> None:
        """Forget the counters; ``compact_tool_json`` writes tool calls unlike the chat template."""
        with self._lock:
            self.compact_tool_json = compact_tool_json
            self.first_turns.clear()
            self.answers.clear()

    def _tool_call(self, expression: str) -> str:
        call = {"name": "calculator", "arguments": {"expression": expression}}
        if self.compact_tool_json:  # a model may write JSON the template would render differently
            return f"<tool_call>\n{json.dumps(call, separators=(',', ':'))}\n</tool_call>"
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    def _first_turn(self, problem: Problem, max_new_tokens: int) -> list[int]:
        ids = self.tokenizer.encode(self._tool_call(problem.expression), add_special_tokens=False)
        number = self.first_turns[problem.question]
        self.first_turns[problem.question] += 1
        if problem.plan == "fail_first" and number == 0:
            filler = self.tokenizer.encode(FILLER, add_special_tokens=False)
            ids = filler[: max_new_tokens - len(ids) - 1] + ids  # fills the context to the brim
        return ids

    def _answer(self, problem: Problem, prompt: str) -> list[int]:
        result = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)[-1].strip()
        number = self.answers[problem.question]
        self.answers[problem.question] += 1
        wrong = problem.plan == "wrong" or (problem.plan == "alternate" and number % 2 == 1)
        value = str(int(result) + 1) if wrong else result
        text = f"The calculator says {result}, so the answer is \\boxed{{{value}}}."
        return self.tokenizer.encode(text, add_special_tokens=False)

    def __call__(self, input_ids: list[int], sampling_params: dict[str, Any]) -> Completion:
        prompt = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        question = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        problem = self.problems[question]
        stop = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        with self._lock:
            if "<tool_response>" in prompt:
                ids = self._answer(problem, prompt)
            else:
                ids = self._first_turn(problem, int(sampling_params["max_new_tokens"]))
            ids.append(stop)
            self.sampled.add(tuple(ids))
        return Completion(ids, {"type": "stop", "matched": stop})


@dataclass
class Stand:
    """Everything running for the module."""

    s3: LocalS3
    bucket: str
    agent_url: str
    engine: FakeSGLang
    policy: ScriptedPolicy
    model_dir: Path
    train_path: Path
    validation_path: Path
    problems: dict[str, Problem]


def _prepare_dataset(workdir: Path) -> tuple[Path, Path, dict[str, Problem]]:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    raw_validation = workdir / "raw_test.jsonl"
    raw_validation.write_text("".join(json.dumps(r) + "\n" for r in rows[4:8]), encoding="utf-8")
    out = workdir / "gsm8k"
    argv = ["--train", str(SAMPLE), "--validation", str(raw_validation), "--limit", "4"]
    assert prepare_gsm8k.main([*argv, "--out-dir", str(out)]) == 0
    problems = _problems(rows[:4], TRAIN_PLANS) + _problems(rows[4:8], EVAL_PLANS)
    return out / "train.jsonl", out / "validation.jsonl", {p.question: p for p in problems}


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    import agent as math_agent
    from transformers import AutoTokenizer

    workdir = tmp_path_factory.mktemp("e2e")
    train_path, validation_path, problems = _prepare_dataset(workdir)
    model_dir = build_toy_tokenizer(workdir / "toy-qwen2.5")
    policy = ScriptedPolicy(AutoTokenizer.from_pretrained(str(model_dir)), problems)
    with pytest.MonkeyPatch.context() as env, LocalS3() as s3:
        for key, value in s3.env().items():
            env.setenv(key, value)
        for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", "TRACE_LOG", "AGENT_URL",
                    "AGENT_RUNTIME_ARN", "S3_BUCKET", "EXP_ID"):
            env.delenv(key, raising=False)
        bucket = s3.create_bucket()  # moto's servers share one in-process backend: a fresh name
        engine = FakeSGLang(policy, tokenizer=policy.tokenizer, context_length=CONTEXT_LENGTH)
        with engine, AgentServer(math_agent.create_app()) as agent:
            yield Stand(s3, bucket, agent.url, engine, policy, model_dir, train_path, validation_path,
                        problems)


@pytest.fixture
def fresh_rollout(stand: Stand) -> Iterator[Any]:
    """The rollout's state holder with its production factories, torn down after the test."""
    state = runtime._STATE
    state.reset()
    state.gateway_factory = runtime.default_gateway_factory
    yield state
    state.reset()


def slime_args(stand: Stand, exp_id: str, **overrides: Any) -> SimpleNamespace:
    """slime's args after ``--custom-config-path toolkit.yaml``: the toolkit keys plus slime's own."""
    from slime.utils.eval_config import EvalDatasetConfig

    host, port = stand.engine.url.removeprefix("http://").rsplit(":", 1)
    values: dict[str, Any] = {
        # toolkit.yaml
        "agent_runtime_arn": None, "agent_url": stand.agent_url, "s3_bucket": stand.bucket,
        "exp_id": exp_id, "gateway_port": 0, "gateway_host": "127.0.0.1", "acr_timeout": 60,
        "model_id": "default", "acr_tps_limit": 1000, "max_concurrent": 16, "max_pool_connections": None,
        "reward_postprocessing": "grpo", "cumulative_token_mode": True, "renderer_family": "auto",
        "gateway_log_level": "warning", "sglang_tool_call_parser": "qwen", "sglang_reasoning_parser": None,
        "result_poll_interval": 0.05, "custom_config_path": f"runs/{exp_id}/toolkit.yaml",
        # slime
        "hf_checkpoint": str(stand.model_dir), "sglang_router_ip": host, "sglang_router_port": int(port),
        "sglang_context_length": CONTEXT_LENGTH, "rollout_batch_size": len(TRAIN_PLANS),
        "n_samples_per_prompt": N_SAMPLES, "rollout_temperature": 1.0, "rollout_top_p": 1.0,
        "rollout_top_k": -1, "rollout_max_response_len": 1024, "actor_num_nodes": 1,
        "actor_num_gpus_per_node": 1, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1, "micro_batch_size": 1, "global_batch_size": None,
        "use_dynamic_batch_size": False, "advantage_estimator": "grpo", "grpo_std_normalization": True,
        "reward_key": None, "n_samples_per_eval_prompt": 1, "input_key": "prompt",
        "eval_datasets": [
            EvalDatasetConfig(name="gsm8k", path=str(stand.validation_path), input_key="prompt")
        ],
    }
    values.update(overrides)
    return SimpleNamespace(**values)


# ---------------------------------------------------------------------------------- checks


def _results(stand: Stand, exp_id: str) -> dict[str, dict[str, Any]]:
    """Every result object the agent wrote under ``exp_id/``, by session id."""
    client = stand.s3.client()
    listing = client.list_objects_v2(Bucket=stand.bucket, Prefix=f"{exp_id}/")
    keys = [item["Key"] for item in listing.get("Contents", [])]
    return {
        key.rsplit("/", 1)[1].removesuffix(".json"): json.loads(
            client.get_object(Bucket=stand.bucket, Key=key)["Body"].read()
        )
        for key in keys
    }


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal mask values as ``(value, start, end)``."""
    runs: list[tuple[int, int, int]] = []
    for i, value in enumerate(mask):
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1], i + 1)
        else:
            runs.append((value, i, i + 1))
    return runs


def check_masks(sample: Sample, policy: ScriptedPolicy, calls: int) -> list[int]:
    """The loss mask is 1 on exactly the tokens the engine sampled; returns the last completion."""
    n = sample.response_length
    assert n >= 1 and len(sample.tokens) - n >= 1
    assert len(sample.loss_mask) == n and len(sample.rollout_log_probs) == n
    response = sample.tokens[-n:]
    runs = _runs(sample.loss_mask)
    sampled = [(s, e) for v, s, e in runs if v == 1]
    assert runs[0][0] == 1 and runs[-1][0] == 1, "the response must start and end with sampled tokens"
    assert len(sampled) == calls
    for start, end in sampled:
        ids = response[start:end]
        assert tuple(ids) in policy.sampled, "a masked-in run is not a completion the engine sampled"
        assert sample.rollout_log_probs[start:end] == [fake_logprob(t, i) for i, t in enumerate(ids)]
    for value, start, end in runs:
        if value == 0:
            assert sample.rollout_log_probs[start:end] == [0.0] * (end - start)
    start, end = sampled[-1]
    return response[start:end]


def _final_number(policy: ScriptedPolicy, completion: list[int]) -> str | None:
    found = re.findall(r"\\boxed\{([^}]*)\}", policy.tokenizer.decode(completion, skip_special_tokens=True))
    return found[-1] if found else None


def check_training_step(stand: Stand, args: SimpleNamespace, output: Any, segments: int) -> dict[str, Any]:
    """Everything issue 6 asks of one step; returns the failed episode's session id and results."""
    groups = output.samples
    assert len(groups) == len(TRAIN_PLANS)
    flat = [s for group in groups for s in group]
    episodes: dict[str, list[Sample]] = {}
    for sample in flat:
        episodes.setdefault(sample.session_id, []).append(sample)
    assert len(episodes) == len(TRAIN_PLANS) * N_SAMPLES
    rollout_ids = [ss[0].rollout_id for ss in episodes.values()]
    assert len(set(rollout_ids)) == len(rollout_ids), "every episode is its own rollout"
    results = _results(stand, args.exp_id)
    assert set(results) == set(episodes), "every episode's result came from S3"

    failed: list[str] = []
    for index, group in enumerate(groups):
        problem = stand.problems[group[0].prompt]
        assert problem.plan == TRAIN_PLANS[index], "groups keep the data source's order"
        assert {s.group_index for s in group} == {group[0].group_index}
        assert all(s.prompt == problem.question and s.metadata["answer"] == problem.answer for s in group)
        rewards = []
        for sid in dict.fromkeys(s.session_id for s in group):
            samples, result = episodes[sid], results[sid]
            assert {s.rollout_id for s in samples} == {samples[0].rollout_id}
            assert result["payload"]["_rollout"]["base_url"].endswith(f"/sessions/{sid}/v1")
            assert result["payload"]["_rollout"]["model_id"] == args.model_id
            assert result["payload"]["answer"] == problem.answer
            if samples[0].status == Sample.Status.FAILED:
                failed.append(sid)
                assert result["status_code"] == 500 and "context" in result["stop_reason"].lower()
                [sample] = samples
                assert sample.loss_mask == [0] and sample.remove_sample and sample.reward == 0.0
                assert sample.metadata["agentcore"]["kind"] == "failed"
                assert "status_code 500" in sample.metadata["agentcore"]["reason"]
                rewards.append(None)
                continue
            assert len(samples) == segments
            assert [s.metadata["agentcore"]["segment"] for s in samples] == list(range(segments))
            last = None
            for sample in samples:
                assert sample.status == Sample.Status.COMPLETED
                assert sample.reward == result["rewards"]
                prompt_ids = sample.tokens[: len(sample.tokens) - sample.response_length]
                assert problem.question in policy_text(stand, prompt_ids)
                last = check_masks(sample, stand.policy, calls=2 // segments)
            correct = _final_number(stand.policy, last) == problem.answer
            assert result["rewards"] == (1.0 if correct else 0.0), "reward matches the agent's correctness"
            rewards.append(result["rewards"])
        expected = {"right": [1.0, 1.0], "wrong": [0.0, 0.0], "alternate": [0.0, 1.0],
                    "fail_first": [None, 1.0]}[problem.plan]
        assert sorted(rewards, key=lambda r: (r is not None, r)) == expected
    assert len(failed) == 1
    check_normalization(args, flat, groups)
    return {"failed": failed[0], "results": results, "episodes": episodes}


def policy_text(stand: Stand, ids: list[int]) -> str:
    return stand.policy.tokenizer.decode(ids, skip_special_tokens=False)


def check_normalization(args: SimpleNamespace, flat: list[Sample], groups: list[list[Sample]]) -> None:
    """``normalize_episode_rewards`` centres each group, one value per episode."""
    raw, normalized = normalize_episode_rewards(args, flat)
    assert raw == [s.reward for s in flat]
    position = 0
    for group in groups:
        per_episode: dict[str, float] = {}
        for sample in group:
            value = normalized[position]
            assert per_episode.setdefault(sample.session_id, value) == value
            position += 1
        assert sum(per_episode.values()) == pytest.approx(0.0, abs=1e-9)
    alternate = groups[TRAIN_PLANS.index("alternate")]
    values = sorted({normalized[flat.index(s)] for s in alternate})
    assert values == pytest.approx([-0.5 / (0.5**0.5 + 1e-6), 0.5 / (0.5**0.5 + 1e-6)])


def check_evaluation(stand: Stand, args: SimpleNamespace, data_source: ListDataSource) -> None:
    """The eval path returns per-dataset rewards in row order."""
    output = rollout.generate_rollout(args, 0, data_source, evaluation=True)
    assert list(output.data) == ["gsm8k"]
    gsm8k = output.data["gsm8k"]
    assert gsm8k["rewards"] == [1.0 if plan == "right" else 0.0 for plan in EVAL_PLANS]
    assert gsm8k["truncated"] == [False] * len(EVAL_PLANS)
    eval_problems = list(stand.problems.values())[len(TRAIN_PLANS):]
    assert [s.prompt for s in gsm8k["samples"]] == [p.question for p in eval_problems]
    assert [s.metadata["answer"] for s in gsm8k["samples"]] == [p.answer for p in eval_problems]
    assert output.metrics["eval/gsm8k/accuracy"] == pytest.approx(0.75)


# ---------------------------------------------------------------------------------- tests


def test_training_step_with_a_local_agent(
    stand: Stand, fresh_rollout: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Cumulative token mode: each episode's two calls merge into one sample."""
    caplog.set_level(logging.INFO, logger="agentcore_slime.rollout")
    stand.policy.reset()
    args = slime_args(stand, "e2e-local")
    data_source = ListDataSource.from_jsonl(stand.train_path, N_SAMPLES)
    output = rollout.generate_rollout(args, 0, data_source, evaluation=False)
    step = check_training_step(stand, args, output, segments=1)
    assert f"episode failed: session {short_id(step['failed'])} " in caplog.text
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("agentcore_slime")]
    assert not any(step["failed"] in line for line in ours)  # a live session id is never logged whole
    assert output.metrics["agentcore/failed_episodes"] == 1
    check_evaluation(stand, args, data_source)


@pytest.mark.parametrize("protocol", ["responses", "anthropic", "bedrock"])
def test_training_step_with_each_agent_protocol(
    stand: Stand, fresh_rollout: Any, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """The same step with the example agent on OpenAI Responses, Anthropic Messages and Bedrock
    ConverseStream (``MATH_AGENT_PROTOCOL``): its only change is the protocol; the samples, masks,
    rewards and the failed episode are those of chat completions."""
    monkeypatch.setenv("MATH_AGENT_PROTOCOL", protocol)
    stand.policy.reset()
    args = slime_args(stand, f"e2e-{protocol}")
    data_source = ListDataSource.from_jsonl(stand.train_path, N_SAMPLES)
    output = rollout.generate_rollout(args, 0, data_source, evaluation=False)
    check_training_step(stand, args, output, segments=1)


def test_prefix_break_splits_an_episode_into_two_samples(stand: Stand, fresh_rollout: Any) -> None:
    """Rendered mode + a tool call written unlike the chat template: the second prompt does not
    extend the first call's tokens, so each episode becomes two samples sharing a rollout id."""
    stand.policy.reset(compact_tool_json=True)
    args = slime_args(stand, "e2e-break", cumulative_token_mode=False)
    data_source = ListDataSource.from_jsonl(stand.train_path, N_SAMPLES)
    output = rollout.generate_rollout(args, 0, data_source, evaluation=False)
    check_training_step(stand, args, output, segments=2)


def test_cumulative_mode_keeps_the_same_episode_in_one_sample(stand: Stand, fresh_rollout: Any) -> None:
    """The same non-template tool-call JSON in cumulative mode: no break, one sample per episode."""
    stand.policy.reset(compact_tool_json=True)
    args = slime_args(stand, "e2e-bridged")
    data_source = ListDataSource.from_jsonl(stand.train_path, N_SAMPLES)
    output = rollout.generate_rollout(args, 0, data_source, evaluation=False)
    check_training_step(stand, args, output, segments=1)


def test_training_step_through_the_acr_transport(
    stand: Stand, fresh_rollout: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same step with ``agent_runtime_arn``: boto3's bedrock-agentcore client, via the data plane."""
    stand.policy.reset()
    with AcrDataPlane({ARN: stand.agent_url}) as plane:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.url)
        args = slime_args(stand, "e2e-acr", agent_runtime_arn=ARN, agent_url=None)
        data_source = ListDataSource.from_jsonl(stand.train_path, N_SAMPLES)
        output = rollout.generate_rollout(args, 0, data_source, evaluation=False)
        step = check_training_step(stand, args, output, segments=1)
        sessions = set(step["episodes"])
        assert {c.session_id for c in plane.invocations} == sessions
        assert all(c.arn == ARN and c.status == 200 for c in plane.invocations)
        assert {sid for arn, sid in plane.stops} == sessions, "every session is stopped, the failed one too"
        for call in plane.invocations:
            payload = json.loads(call.body)
            assert payload["_rollout"]["s3_bucket"] == stand.bucket
            assert payload["_rollout"]["exp_id"] == "e2e-acr"


def test_the_run_directory_records_what_the_rehearsal_ran(
    stand: Stand, fresh_rollout: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """metrics.jsonl, episodes/ and the report of one training and one eval step match the
    episodes the agent really ran (rewards from S3, the failed episode's reason code)."""
    from agentcore_slime.observe import read_json_lines
    from agentcore_slime.report import write_report
    from agentcore_slime.rollout.samples import ShimRecord

    stand.policy.reset()
    run_dir = tmp_path / "runs" / "e2e-metrics"
    run_dir.mkdir(parents=True)
    args = slime_args(stand, "e2e-metrics", custom_config_path=str(run_dir / "toolkit.yaml"), num_rollout=3)
    data_source = ListDataSource.from_jsonl(stand.train_path, N_SAMPLES)
    output = rollout.generate_rollout(args, 0, data_source, evaluation=False)
    step = check_training_step(stand, args, output, segments=1)
    rollout.generate_rollout(args, 0, data_source, evaluation=True)

    train, evaluation = list(read_json_lines(run_dir / "metrics.jsonl"))
    rewards = [r["rewards"] for sid, r in step["results"].items() if sid != step["failed"]]
    [failed_sample] = step["episodes"][step["failed"]]
    episodes = train["episodes"]
    assert (episodes["started"], episodes["succeeded"], episodes["failed"]) == (8, 7, 1)
    assert episodes["failed_by_reason"] == {ShimRecord.of(failed_sample).failure: 1}
    assert episodes["failed_by_class"] == {"infrastructure": 1}
    assert train["reward"]["mean"] == pytest.approx(sum(rewards) / len(rewards)) == pytest.approx(4 / 7)
    assert train["groups_without_signal"] == 2  # "right" and "wrong"; fail_first has one valid episode
    assert train["samples"] == 7 and train["gateway"]["calls"] >= 14
    assert train["sampling"]["groups_trained"] == len(TRAIN_PLANS)
    assert (evaluation["kind"], evaluation["dataset"]) == ("eval", "gsm8k")
    assert evaluation["reward"]["mean"] == pytest.approx(0.75)
    assert "[agentcore] train step 0 (1 of 3) | reward 0.571" in capsys.readouterr().err

    recorded = list(read_json_lines(run_dir / "episodes" / "train-000000.jsonl"))
    assert step["failed"] in {r["session_id"] for r in recorded}, "every failed episode is recorded"
    assert all(r["calls"] for r in recorded if r["failure_class"] is None)
    page = write_report(run_dir).read_text()
    assert step["failed"] in page and "Evaluation: gsm8k" in page
