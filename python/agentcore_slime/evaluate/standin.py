"""The rehearsal's stand-in policy: a tiny CPU engine that speaks SGLang's ``/generate``.

``bin/eval --rehearse`` runs the real gateway in front of this instead of SGLang, so the wiring
(agent, gateway address, payload, tools, bucket, rewards) is tried before any GPU is reserved.
The stand-in does not think. Per gateway session (the routing key the gateway sends with every
call) the first call whose prompt offers tools is answered with a call of the first of them,
once; every other answer is :data:`ANSWER` with the row's answer, or a wrong one, in turn (a
group's rewards differ, as a model's do). Both answers are written by the model's own renderer
(the one the gateway chooses, from the same settings), so the gateway parses the tool call back
exactly as it would parse the model's: a call the gateway cannot parse is a rehearsal failure,
not a silent plain-text answer.

Which tools are offered is read from the prompt text: chat templates write the tool list as
JSON objects (``{"type": "function", "function": {"name": ...}}`` or ``{"name": ...,
"parameters": ...}``). A template that writes tools another way (gpt-oss' TypeScript-like
namespace) leaves the stand-in without a tool to call; it then answers at once and the
rehearsal says the tool check did not run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agentcore_slime.gateway.engine import ROUTING_HEADER

logger = logging.getLogger(__name__)

#: the stand-in's final answer (the agent's reward for it says nothing about any model): a row's
#: answer in every other episode of its group, a wrong one in the others, so rewards differ
ANSWER = "REHEARSAL: stand-in policy, not a model. The answer is {}."
#: what the stand-in reports as its context length (/v1/models max_model_len)
CONTEXT_LENGTH = 131072
#: a probe user message, rendered to find where the assistant's turn starts
_PROBE = [{"role": "user", "content": "rehearsal"}]


@dataclass
class SessionLog:
    """What the stand-in did in one gateway session (the rehearsal's diagnosis reads it).

    :param calls: /generate calls it answered.
    :param tools_offered: tool names found in the first prompt.
    :param tool_called: the tool it called ("" when none).
    :param tool_arguments: the arguments it called the tool with (JSON text).
    :param problem: why it could not call the offered tool ("" when it could).
    :param tool_call_at: which of its calls answered with the tool call (0: none).
    :param answer: its final answer ("" until it gave one).
    """

    calls: int = 0
    tools_offered: list[str] = field(default_factory=list)
    tool_called: str = ""
    tool_arguments: str = ""
    problem: str = ""
    tool_call_at: int = 0
    answer: str = ""

    @property
    def came_back(self) -> bool:
        """Whether the agent called the model again after the stand-in's tool call."""
        return bool(self.tool_call_at) and self.calls > self.tool_call_at


def placeholder_arguments(parameters: Any) -> dict[str, Any]:
    """Arguments for a tool call: each required parameter with a harmless value of its type.

    :param parameters: the tool's JSON schema (``{"type": "object", "properties": ...}``).
    """
    if not isinstance(parameters, dict):
        return {}
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or list(properties)
    samples = {"string": "1", "number": 1, "integer": 1, "boolean": True, "array": [], "object": {}}
    arguments: dict[str, Any] = {}
    for name in required:
        schema = properties.get(name) if isinstance(properties, dict) else None
        schema = schema if isinstance(schema, dict) else {}
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            arguments[name] = schema["enum"][0]
            continue
        kind = schema.get("type", "string")
        arguments[name] = samples.get(kind if isinstance(kind, str) else "string", "1")
    return arguments


def offered_tools(prompt: str) -> list[dict[str, Any]]:
    """The tools a rendered prompt offers, as OpenAI tool specs, in prompt order.

    :param prompt: the prompt ids decoded to text.
    """
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    names: set[str] = set()
    position = prompt.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(prompt, position)
        except ValueError:
            position = prompt.find("{", position + 1)
            continue
        spec = value.get("function", value) if isinstance(value, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str) and "parameters" in spec:
            if spec["name"] not in names:
                names.add(spec["name"])
                found.append({"type": "function", "function": spec})
            position = prompt.find("{", end)
        else:
            position = prompt.find("{", position + 1)
    return found


class StandInPolicy:
    """The stand-in's answers, as token ids in the model's own format.

    :param model_dir: the model directory (its tokenizer and chat template; no weights read).
    :param renderer_family: ``RENDERER_FAMILY`` (``auto`` infers it, as the gateway does).
    :param tool_call_parser: ``SGLANG_TOOL_CALL_PARSER`` (chat-template models).
    :param reasoning_parser: ``SGLANG_REASONING_PARSER``.
    :param answers: each row's prompt -> its answer (rows without one are answered 1 or 2 in turn).
    """

    def __init__(
        self,
        model_dir: str,
        renderer_family: str = "auto",
        tool_call_parser: str | None = None,
        reasoning_parser: str | None = None,
        answers: dict[str, str] | None = None,
    ) -> None:
        from agentcore_slime.gateway.family import choose_renderer, load_tokenizer
        from agentcore_slime.gateway.rendering import PromptBuilder

        self.tokenizer = load_tokenizer(model_dir)
        self.renderer, self.choice = choose_renderer(
            model_dir,
            self.tokenizer,
            renderer_family,
            tool_call_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
        )
        self.stop_ids = PromptBuilder(self.renderer, self.tokenizer, self.choice.family).stop_ids
        self.sessions: dict[str, SessionLog] = {}  # by routing key (engine.routing_key of the session id)
        self.answers = answers or {}
        self._answered: dict[str, int] = {}  # sessions answered, by row prompt
        self._lock = threading.Lock()

    def _turn(self, message: dict[str, Any], tools: list[dict[str, Any]] | None) -> list[int]:
        """The ids of one assistant turn, as the renderer writes it after a generation prompt."""
        prefix: list[int] = list(self.renderer.render_ids(_PROBE, tools=tools, add_generation_prompt=True))
        full: list[int] = list(
            self.renderer.render_ids([*_PROBE, message], tools=tools, add_generation_prompt=False)
        )
        if full[: len(prefix)] != prefix:
            raise ValueError(f"the {self.choice.family} renderer does not extend its generation prompt")
        turn = full[len(prefix) :]
        end = next((i for i, t in enumerate(turn) if t in self.stop_ids), None)
        if end is None:
            return [*turn, self.stop_ids[0]] if self.stop_ids else turn
        return turn[: end + 1]  # the stop token ends the turn; what a template adds after it is not sampled

    def tool_call(self, tool: dict[str, Any]) -> list[int]:
        """Ids of a turn that calls ``tool`` once, checked to parse back as that call.

        :raises ValueError: the renderer's own parser does not read it back as a tool call.
        """
        from agentcore_slime.gateway.parsing import parse_completion

        spec = tool["function"]
        arguments = json.dumps(placeholder_arguments(spec.get("parameters")))
        function = {"name": spec["name"], "arguments": arguments}
        call = {"id": "call_rehearsal", "type": "function", "function": function}
        message = {"role": "assistant", "content": "", "tool_calls": [call]}
        ids = self._turn(message, [tool])
        prompt = self.renderer.render_ids(_PROBE, tools=[tool], add_generation_prompt=True)
        parsed = parse_completion(self.renderer, ids, prompt, [tool])
        if [c["function"]["name"] for c in parsed.get("tool_calls", [])] != [spec["name"]]:
            raise ValueError(f"the renderer's tool call for {spec['name']!r} does not parse back as one")
        return ids

    def answer(self, log: SessionLog, input_ids: list[int]) -> list[int]:
        """Ids of the session's final answer: its row's answer, or a wrong one, in turn."""
        if not log.answer:
            prompt = self.tokenizer.decode(input_ids, skip_special_tokens=False)
            row = next((text for text in self.answers if text in prompt), "")
            with self._lock:
                turn = self._answered[row] = self._answered.get(row, -1) + 1
            right = self.answers.get(row, "1")
            log.answer = ANSWER.format(right if turn % 2 == 0 else f"{right}1")  # 18 -> 181: wrong
        return self._turn({"role": "assistant", "content": log.answer}, None)

    def complete(self, session: str, input_ids: list[int]) -> list[int]:
        """The completion for one call of ``session``.

        :param session: the gateway session (routing key).
        :param input_ids: the prompt ids.
        """
        with self._lock:
            log = self.sessions.setdefault(session, SessionLog())
            log.calls += 1
            number = log.calls
            tried = bool(log.tool_called or log.problem)
        if tried:  # one tool call per session; every later answer is the session's answer
            return self.answer(log, input_ids)
        tools = offered_tools(self.tokenizer.decode(input_ids, skip_special_tokens=False))
        if not tools:  # e.g. a planning call without tools: a later call may offer some
            return self.answer(log, input_ids)
        log.tools_offered = [t["function"]["name"] for t in tools]
        try:
            ids = self.tool_call(tools[0])
        except ValueError as exc:  # a wiring finding (no tool-call parser), not an engine error
            log.problem = str(exc)
            return self.answer(log, input_ids)
        log.tool_called, log.tool_call_at = tools[0]["function"]["name"], number
        log.tool_arguments = json.dumps(placeholder_arguments(tools[0]["function"].get("parameters")))
        return ids


class StandInEngine:
    """:class:`StandInPolicy` behind SGLang's HTTP protocol, on 127.0.0.1, in a thread of its own.

    Serves what the gateway uses: ``/health``, ``/v1/models`` (``max_model_len``),
    ``/generate`` (``input_ids`` in; ``output_ids``, ``meta_info.finish_reason`` and
    ``output_token_logprobs`` out) and ``/abort_request``.

    :param policy: the stand-in policy.
    """

    def __init__(self, policy: StandInPolicy) -> None:
        self.policy = policy
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="standin-engine", daemon=True)
        self._runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._ok)
        app.router.add_get("/health_generate", self._ok)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/abort_request", self._ok)
        app.router.add_post("/generate", self._generate)
        return app

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": "rehearsal-stand-in", "object": "model", "max_model_len": CONTEXT_LENGTH}
        return web.json_response({"object": "list", "data": [card]})

    async def _generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        session = request.headers.get(ROUTING_HEADER, "")
        try:
            ids = await asyncio.to_thread(self.policy.complete, session, list(body["input_ids"]))
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("stand-in policy: %s", exc)
            return web.json_response({"error": {"message": f"stand-in policy: {exc}"}}, status=400)
        limit = int((body.get("sampling_params") or {}).get("max_new_tokens") or len(ids))
        finish: dict[str, Any] = {"type": "stop", "matched": ids[-1]} if ids else {"type": "stop"}
        if len(ids) > limit:
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        meta = {
            "id": body.get("rid", ""),
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "output_token_logprobs": [[-0.5, t, None] for t in ids],
        }
        return web.json_response({"text": "", "output_ids": ids, "meta_info": meta})

    def start(self) -> str:
        """Serve on 127.0.0.1:<free port>; returns the URL."""
        self._thread.start()
        self._runner = web.AppRunner(self._app(), access_log=None)
        asyncio.run_coroutine_threadsafe(self._runner.setup(), self._loop).result(30)
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self._loop).result(30)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        """Stop serving and end the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


__all__ = ["ANSWER", "SessionLog", "StandInEngine", "StandInPolicy", "offered_tools", "placeholder_arguments"]
