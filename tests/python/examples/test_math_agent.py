"""The example math agent served over HTTP, against a scripted OpenAI-compatible model and moto S3.

Real parts: the agent module, agentcore-rl-toolkit's ``AgentCoreRLApp`` served by uvicorn (as
``app.run`` serves it), Strands with its OpenAI model (the ``openai`` SDK, streamed SSE), botocore
writing the result to a moto S3 server on loopback through ``AWS_ENDPOINT_URL_S3``. Stand-in: the
policy model is a scripted OpenAI chat-completions SSE server (aiohttp) that first calls the
calculator and then answers with the tool's result (or a wrong one), so the reward checked here
is computed from what really flowed through the tool.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import agent as math_agent
import boto3
import httpx
import pytest
from aiohttp import web
from fakes.acr_dataplane import AgentServer
from fakes.http import ThreadedAiohttpServer
from fakes.s3 import LocalS3

SID = "sess-00000000-0000-0000-0000-000000000001"
QUESTION = "A baker makes 12 trays of muffins with 18 muffins on each tray. How many muffins?"


@dataclass
class ScriptedLLM:
    """OpenAI chat-completions (streaming) stand-in: tool call first, then an answer.

    :param expression: the calculator expression to request on the first turn.
    :param wrong: answer with the tool result plus one instead of the result.
    """

    expression: str = "12 * 18"
    wrong: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        return app

    def _delta(self, body: dict) -> tuple[dict, str]:
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_results:
            arguments = json.dumps({"expression": self.expression})
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "calculator", "arguments": arguments}}
            return {"role": "assistant", "tool_calls": [call]}, "tool_calls"
        content = tool_results[-1]["content"]
        text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
        value = int(text) + (1 if self.wrong else 0)
        return {"role": "assistant", "content": f"12 trays of 18 is {value}. \\boxed{{{value}}}"}, "stop"

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.auth.append(request.headers.get("Authorization", ""))
        delta, finish = self._delta(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        for choice in ({"index": 0, "delta": delta, "finish_reason": None},
                       {"index": 0, "delta": {}, "finish_reason": finish}):
            await response.write(f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode())
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        await response.write(f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response


@dataclass
class Bucket:
    """A fresh bucket on the local S3 server and a client for it."""

    name: str
    client: Any


@pytest.fixture(scope="module")
def local_s3() -> Iterator[LocalS3]:
    with LocalS3() as server:
        yield server


@pytest.fixture
def s3(local_s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """The agent's boto3 S3 client (created by create_app) reaches the local server through env."""
    for key, value in local_s3.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return Bucket(local_s3.create_bucket(), boto3.client("s3"))


@pytest.fixture
def agent_url(s3: Bucket) -> Iterator[str]:
    with AgentServer(math_agent.create_app()) as server:
        yield server.url


def _serve_llm(llm: ScriptedLLM) -> ThreadedAiohttpServer:
    server = ThreadedAiohttpServer(llm.app(), name="scripted-llm")
    server.start()
    return server


def _payload(llm_url: str, bucket: str, **overrides: Any) -> dict[str, Any]:
    rollout = {"exp_id": "math-test", "input_id": "input-1", "s3_bucket": bucket,
               "base_url": f"{llm_url}/v1", "model_id": "policy",
               "sampling_params": {"temperature": 0.7, "max_tokens": 256, "top_k": 20}}
    payload = {"prompt": QUESTION, "answer": "216", "_rollout": rollout}
    payload.update(overrides)
    return payload


def _invoke(agent_url: str, payload: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(f"{agent_url}/invocations", json=payload, timeout=10,
                       headers={"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": SID})
    assert reply.status_code == 200, reply.text
    return reply.json()


def _wait_for_result(s3: Bucket, key: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(s3.client.get_object(Bucket=s3.name, Key=key)["Body"].read())
        except s3.client.exceptions.NoSuchKey:
            time.sleep(0.05)
    raise AssertionError(f"no result at s3://{s3.name}/{key} after {timeout}s")


@pytest.mark.parametrize(("wrong", "reward", "predicted"), [(False, 1.0, "216"), (True, 0.0, "217")])
def test_rollout_writes_the_reward_to_s3(s3: Bucket, agent_url: str, wrong: bool, reward: float,
                                         predicted: str) -> None:
    llm = ScriptedLLM(wrong=wrong)
    server = _serve_llm(llm)
    try:
        reply = _invoke(agent_url, _payload(server.url, s3.name))
        key = f"math-test/input-1/{SID}.json"
        assert reply == {"status": "processing", "s3_bucket": s3.name, "result_key": key}
        result = _wait_for_result(s3, key)
    finally:
        server.stop()
    assert result["status_code"] == 200
    assert (result["rewards"], result["predicted"], result["answer"]) == (reward, predicted, "216")
    assert result["metrics"] == {"turns": 2, "tool_calls": 1}
    first, second = llm.requests
    assert first["model"] == "policy" and first["stream"] is True
    assert (first["temperature"], first["max_tokens"], first["top_k"]) == (0.7, 256, 20)
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator"]
    assert first["messages"][0]["role"] == "system"
    assert second["messages"][-1]["role"] == "tool"
    assert llm.auth == ["Bearer EMPTY", "Bearer EMPTY"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"prompt": {"toolUse": {"name": "calculator"}}}, "prompt: Input should be a valid string"),
        ({"answer": "two hundred"}, "answer: Value error, answer 'two hundred' is not a number"),
        ({"answer": None}, "answer"),
    ],
)
def test_invalid_payload_is_an_error_result_and_the_model_is_never_called(
        s3: Bucket, agent_url: str, overrides: dict[str, Any], message: str) -> None:
    llm = ScriptedLLM()
    server = _serve_llm(llm)
    try:
        reply = _invoke(agent_url, _payload(server.url, s3.name, **overrides))
        result = _wait_for_result(s3, reply["result_key"])
    finally:
        server.stop()
    assert result["status_code"] == 500
    assert "invalid math agent payload" in result["stop_reason"]
    assert message in result["stop_reason"]
    assert llm.requests == []


def test_parse_request_names_each_bad_rollout_field() -> None:
    payload = {"prompt": "q", "answer": 3, "_rollout": {"base_url": "localhost:9090", "model_id": ""}}
    with pytest.raises(ValueError) as caught:
        math_agent.parse_request(payload)
    text = str(caught.value)
    assert "_rollout.base_url: String should match pattern" in text
    assert "_rollout.model_id: String should have at least 1 character" in text
    with pytest.raises(ValueError, match="_rollout: Field required"):
        math_agent.parse_request({"prompt": "q", "answer": "3"})
    with pytest.raises(ValueError, match="payload must be a JSON object"):
        math_agent.parse_request(["q"])


def test_parse_request_accepts_integer_answers_and_extra_keys() -> None:
    request = math_agent.parse_request({"prompt": "q", "answer": 3, "source": "mine",
                                        "_rollout": {"base_url": "http://h:1/v1", "model_id": "m",
                                                     "exp_id": "e", "input_id": "i", "s3_bucket": "b"}})
    assert (request.answer, request.rollout.model_id, request.rollout.sampling_params) == ("3", "m", {})


def test_model_params_forward_non_openai_keys_in_extra_body() -> None:
    params = math_agent.model_params({"temperature": 1.0, "top_p": 0.9, "top_k": 20, "max_tokens": 8})
    assert params == {"temperature": 1.0, "top_p": 0.9, "max_tokens": 8, "extra_body": {"top_k": 20}}
    assert math_agent.model_params({"temperature": 1.0}) == {"temperature": 1.0}


class SilentGateway:
    """A gateway stand-in that accepts connections and never answers (a hung gateway or
    SGLang behind it): the socket listens, so the kernel completes every handshake, and
    nothing ever reads or replies."""

    def __enter__(self) -> str:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # every call times out; 2 attempts of 0.5 s, far inside the 60 s episode
        ({"request_timeout": 0.5, "max_retries": 1, "episode_timeout": 60},
         "cannot reach the policy model at {url}/v1: Request timed out. (2 attempts of at most 0.5s each)"),
        # a call that would wait 60 s is cut off by the episode's own deadline (90% of 2 s)
        ({"request_timeout": 60, "max_retries": 0, "episode_timeout": 2},
         "the episode took longer than 1.8s (90% of _rollout.episode_timeout 2s) talking to the "
         "policy model at {url}/v1"),
    ],
)
def test_a_gateway_that_never_answers_costs_seconds_and_the_result_names_its_url(
        s3: Bucket, agent_url: str, settings: dict[str, Any], message: str) -> None:
    """The OpenAI SDK's defaults (600 s timeout, 2 retries) kept such an episode silent for
    about 30 minutes; bounded by the _rollout settings it ends in seconds with an error result
    (_wait_for_result gives up after 10 s)."""
    with SilentGateway() as url:
        payload = _payload(url, s3.name)
        payload["_rollout"].update(settings)
        reply = _invoke(agent_url, payload)
        result = _wait_for_result(s3, reply["result_key"], timeout=10.0)
    assert result["status_code"] == 500
    assert result["stop_reason"] == message.format(url=url)


def test_default_model_call_budget_fits_in_the_episode_timeout() -> None:
    """Without request_timeout, max_retries + 1 attempts fit in the episode's deadline, which
    is below the trainer's ACR_TIMEOUT (sent as _rollout.episode_timeout, default 900 s)."""
    rollout = {"base_url": "http://h:1/v1", "model_id": "m"}
    for extra in ({}, {"episode_timeout": 120}, {"episode_timeout": 120, "max_retries": 5}):
        settings = math_agent.RolloutSettings.model_validate({**rollout, **extra})
        attempts = settings.max_retries + 1
        assert settings.call_timeout * attempts <= settings.deadline < settings.episode_timeout
    client = math_agent.build_agent(math_agent.RolloutSettings.model_validate(
        {**rollout, "episode_timeout": 300})).model.client_args
    assert (client["timeout"], client["max_retries"]) == (90.0, 2)


def _no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_start_up_without_aws_credentials_is_one_line_and_serves_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _no_aws_credentials(monkeypatch, tmp_path)
    monkeypatch.setattr(math_agent, "create_app", lambda: pytest.fail("the agent must not start"))
    assert math_agent.main(["--port", "8080"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("agent.py: no AWS credentials found: the agent writes each result to S3")
    assert err.count("\n") == 1


def test_start_up_checks_the_results_bucket(s3: Bucket, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Against the local S3 server (moto): a bucket that is not there is one line at start-up."""
    assert math_agent.check_s3_access(s3.name) is None
    assert math_agent.check_s3_access(None) is None
    monkeypatch.setattr(math_agent, "create_app", lambda: pytest.fail("the agent must not start"))
    monkeypatch.setenv("AGENT_S3_BUCKET", "no-such-bucket-here")
    assert math_agent.main([]) == 1
    err = capsys.readouterr().err
    assert err == ("agent.py: cannot access s3://no-such-bucket-here: 404 (check the bucket name, its "
                   "region, and that these credentials may write to it)\n")


def test_an_unknown_protocol_stops_the_agent_at_start_up(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MATH_AGENT_PROTOCOL", "grpc")
    assert math_agent.main(["--port", "8080"]) == 2
    error = capsys.readouterr().err
    assert "MATH_AGENT_PROTOCOL='grpc' is not one of chat, responses, anthropic, bedrock" in error


def test_start_up_without_aws_credentials_serves_a_loopback_store(
        s3: Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Results written to a store on this machine (bin/eval --rehearse's) need no credentials: the
    agent starts, and its app's S3 client signs with placeholder ones the store does not check."""
    endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # restored after the test, whatever
        monkeypatch.setenv(key, "before")                       # the agent sets in between
    _no_aws_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    assert math_agent.check_s3_access(s3.name) is None
    started: list[bool] = []
    monkeypatch.setattr(math_agent, "create_app",
                        lambda: SimpleNamespace(run=lambda **kw: started.append(True)))
    assert math_agent.main(["--port", "8080"]) == 0 and started == [True]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com")  # not loopback: still refused
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert (math_agent.check_s3_access(None) or "").startswith("no AWS credentials found")
