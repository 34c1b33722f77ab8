"""Stand-ins for the rollout shim's tests: an agent app, a gateway, a data source, slime args.

- :class:`StandinAgent` behaves like an agentcore-rl-toolkit ``AgentCoreRLApp`` container
  (agentcore-contract.md sections 1.2-1.5): ``POST /invocations`` with the session header
  validates ``_rollout``, answers ``{"status": "processing", "s3_bucket", "result_key"}`` at
  once, and later writes the result JSON (with ``status_code``, ``stop_reason``,
  ``input_id``, ``s3_bucket``, ``result_key``, ``payload`` injected like ``save_result``)
  to ``{exp_id}/{input_id}/{session_id}.json`` in S3 through boto3 (the local moto server).
  What it does per episode is scripted by a :class:`Behaviour`.
- :class:`StandinGateway` has the gateway's session API (create_session / traces /
  delete_session / shutdown). It does not serve HTTP: the stand-in agent records the
  episode's scripted :class:`CallTrace` list into it, as the real gateway would while the
  agent talks to it. The real gateway is exercised by the end-to-end test.
- :class:`ListDataSource` hands out prompt groups like slime's RolloutDataSource.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from agentcore_slime.gateway.trace import CallTrace
from aiohttp import web

from fakes.acr_dataplane import SESSION_HEADER
from fakes.http import ThreadedAiohttpServer


def call(prompt: list[int], completion: list[int], finish: str = "stop", mode: str = "bridged") -> CallTrace:
    """A CallTrace with deterministic logprobs (-0.01 * token id)."""
    return CallTrace(
        prompt_token_ids=list(prompt),
        completion_token_ids=list(completion),
        logprobs=[-0.01 * t for t in completion],
        finish_reason=finish,  # type: ignore[arg-type]
        response_message={"role": "assistant", "content": f"<{len(completion)} tokens>"},
        token_mode=mode,  # type: ignore[arg-type]
    )


def multi_turn(
    turns: int, start: int = 100, prompt_len: int = 3, bridge: int = 2, completion: int = 2
) -> list[CallTrace]:
    """An unbroken multi-turn episode: every prompt extends the previous prompt + completion."""
    traces, seq, token = [], [], start
    for turn in range(turns):
        new = prompt_len if turn == 0 else bridge
        seq += list(range(token, token + new))
        token += new
        out = list(range(token, token + completion))
        token += completion
        traces.append(call(seq, out, mode="rendered" if turn == 0 else "bridged"))
        seq = seq + out
    return traces


@dataclass
class Behaviour:
    """What the stand-in agent does for one invocation.

    :param result: the handler's return value (None: never write a result, i.e. hang).
    :param delay: seconds before the result is written.
    :param error: the handler raises this message: an error result (status_code 500) is written.
    :param http_status: reply status of the invocation itself (not 200: the invoke fails).
    :param traces: the calls the stand-in gateway records for this session.
    :param chat: user turns the agent sends, one chat call each, to ``_rollout.base_url``
        (for tests with the real gateway), before writing the result.
    """

    result: dict[str, Any] | None = field(default_factory=lambda: {"rewards": 1.0})
    delay: float = 0.0
    error: str | None = None
    http_status: int = 200
    traces: list[CallTrace] = field(default_factory=lambda: multi_turn(2))
    chat: list[str] = field(default_factory=list)


Script = Callable[[dict[str, Any], str], Behaviour]


class StandinGateway:
    """The gateway's session API over in-memory traces (thread-safe, like the real one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sampling: dict[str, dict[str, Any]] = {}
        self.recorded: dict[str, list[CallTrace]] = {}
        self.deleted: list[str] = []
        self.aborted: list[str] = []
        self.live = 0
        self.max_live = 0
        self.closed = False

    def create_session(self, session_id: str, sampling_params: dict[str, Any]) -> str:
        with self._lock:
            self.sampling[session_id] = dict(sampling_params)
            self.live += 1
            self.max_live = max(self.max_live, self.live)
        return f"http://127.0.0.1:9/sessions/{session_id}/v1"

    def record(self, session_id: str, traces: list[CallTrace]) -> None:
        with self._lock:
            self.recorded.setdefault(session_id, []).extend(traces)

    def traces(self, session_id: str) -> list[CallTrace]:
        with self._lock:
            return list(self.recorded.get(session_id, []))

    def delete_session(self, session_id: str) -> None:
        with self._lock:
            if session_id in self.sampling and session_id not in self.deleted:
                self.deleted.append(session_id)
                self.live -= 1

    def abort_session(self, session_id: str) -> None:
        with self._lock:
            self.aborted.append(session_id)

    def shutdown(self) -> None:
        self.closed = True


class StandinAgent(ThreadedAiohttpServer):
    """An ``AgentCoreRLApp``-like HTTP agent on loopback (see the module docstring).

    :param script: ``(payload, session_id) -> Behaviour``.
    :param s3: a boto3 S3 client for writing results.
    :param gateway: where the episode's traces are recorded (optional).
    """

    def __init__(self, script: Script, s3: Any, gateway: StandinGateway | None = None) -> None:
        app = web.Application()
        app.router.add_post("/invocations", self._invoke)
        super().__init__(app, name="standin-agent")
        self.script = script
        self.s3 = s3
        self.gateway = gateway
        self.invocations: list[tuple[str, dict[str, Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def _invoke(self, request: web.Request) -> web.Response:
        session_id = request.headers.get(SESSION_HEADER, "")
        payload = json.loads(await request.read())
        self.invocations.append((session_id, payload))
        config = payload.get("_rollout", {})
        missing = [k for k in ("exp_id", "input_id", "s3_bucket") if k not in config]
        if missing:
            return web.json_response(
                {"error": f"Missing required rollout config field: {missing[0]!r}"}, status=500
            )
        behaviour = self.script(payload, session_id)
        if behaviour.http_status != 200:
            return web.json_response({"error": "scripted failure"}, status=behaviour.http_status)
        key = f"{config['exp_id']}/{config['input_id']}/{session_id}.json"
        if self.gateway is not None:
            self.gateway.record(session_id, behaviour.traces)
        task = asyncio.create_task(self._finish(behaviour, payload, config["s3_bucket"], key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.json_response(
            {"status": "processing", "s3_bucket": config["s3_bucket"], "result_key": key}
        )

    async def _talk(self, config: dict[str, Any], turns: list[str]) -> None:
        """Talk to the model like an OpenAI-SDK agent: the conversation grows turn by turn."""
        import aiohttp

        messages: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as client:
            for turn in turns:
                messages.append({"role": "user", "content": turn})
                body = {
                    "model": config["model_id"],
                    "messages": messages,
                    **config.get("sampling_params", {}),
                }
                async with client.post(f"{config['base_url']}/chat/completions", json=body) as response:
                    response.raise_for_status()
                    reply = await response.json()
                messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})

    async def _finish(self, behaviour: Behaviour, payload: dict[str, Any], bucket: str, key: str) -> None:
        await asyncio.sleep(behaviour.delay)
        if behaviour.chat:
            await self._talk(payload["_rollout"], behaviour.chat)
        if behaviour.error is not None:
            result: dict[str, Any] = {"status_code": 500, "stop_reason": behaviour.error, "traceback": "..."}
        elif behaviour.result is None:
            return
        else:
            result = copy.deepcopy(behaviour.result)
            result.setdefault("status_code", 200)
            result.setdefault("stop_reason", "end_turn")
        result.update(
            input_id=payload["_rollout"]["input_id"], s3_bucket=bucket, result_key=key, payload=payload
        )
        body = json.dumps(result, indent=2).encode()
        await asyncio.to_thread(
            self.s3.put_object, Bucket=bucket, Key=key, Body=body, ContentType="application/json"
        )


def make_args(**overrides: Any) -> SimpleNamespace:
    """slime-like args with the toolkit.yaml keys (a local agent; fast polling)."""
    values: dict[str, Any] = dict(
        agent_runtime_arn=None,
        agent_url=None,
        s3_bucket=None,
        exp_id="exp-test",
        gateway_port=0,
        gateway_host=None,
        acr_timeout=10,
        model_id="default",
        acr_tps_limit=1000,
        max_concurrent=16,
        max_pool_connections=None,
        reward_postprocessing="grpo",
        cumulative_token_mode=False,
        renderer_family="auto",
        gateway_log_level="warning",
        sglang_tool_call_parser=None,
        sglang_reasoning_parser=None,
        result_poll_interval=0.05,
        custom_config_path="runs/exp-test/toolkit.yaml",
        hf_checkpoint="/models/none",
        sglang_router_ip="127.0.0.1",
        sglang_router_port=3000,
        rollout_batch_size=2,
        n_samples_per_prompt=3,
        over_sampling_batch_size=None,
        dynamic_sampling_filter_path=None,
        partial_rollout=False,
        infra_failures="exclude",
        max_extra_groups=None,
        rollout_temperature=0.8,
        rollout_top_p=1.0,
        rollout_top_k=-1,
        rollout_max_response_len=64,
        actor_num_nodes=1,
        actor_num_gpus_per_node=1,
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        context_parallel_size=1,
        micro_batch_size=1,
        global_batch_size=None,
        use_dynamic_batch_size=False,
        grpo_std_normalization=True,
        reward_key=None,
        eval_datasets=None,
        n_samples_per_eval_prompt=1,
    )
    values.update(overrides)
    return SimpleNamespace(**values)
