#!/usr/bin/env python3
# Summary: the example GSM8K math agent for Amazon Bedrock AgentCore Runtime (ACR)
# Usage: agent.py [--host HOST] [--port PORT] [--s3-bucket BUCKET]
#
#   --host HOST         address to listen on (default: 0.0.0.0 in a container, else 127.0.0.1)
#   --port PORT         port to listen on (default: 8080, the port ACR calls; 0: a free one, named
#                       on stderr as `agent.py: listening on port N`)
#   --s3-bucket BUCKET  check at start-up that this bucket (the env file's S3_BUCKET) is
#                       reachable with the agent's credentials (default: $AGENT_S3_BUCKET;
#                       unset = only check that AWS credentials exist)
"""The example math agent: a Strands agent with a calculator, scored by exact match.

Built on agentcore-rl-toolkit's ``AgentCoreRLApp``: the trainer invokes it with the dataset row's
``metadata`` (``{"prompt": ..., "answer": ...}``) plus a ``_rollout`` dict (``exp_id``, ``input_id``,
``s3_bucket``, ``base_url``, ``model_id``, ``sampling_params``). The app answers at once; in the
background the agent solves the problem by talking to the policy model at ``_rollout.base_url``
(the training gateway, OpenAI-compatible) and the returned ``{"rewards": ...}`` is written to
``s3://{s3_bucket}/{exp_id}/{input_id}/{session_id}.json`` by the app.

The agent's model client speaks the protocol named by ``MATH_AGENT_PROTOCOL`` (``chat``, the
default: Strands' ``OpenAIModel``; ``responses``: ``OpenAIResponsesModel``; ``anthropic``:
``AnthropicModel``; ``bedrock``: ``BedrockModel``), pointed at the session's address for it
(``_rollout.base_url``, ``anthropic_base_url``, ``bedrock_endpoint_url``): the one setting that
differs between four otherwise identical agents (docs/agents.md).

Every model call is bounded: the OpenAI client gets a timeout and a retry count that fit in
the time the trainer waits for a result (``_rollout.episode_timeout``, the env file's
ACR_TIMEOUT), and the whole episode stops at 90% of it with an error result that names the
URL of the model, so a gateway that never answers costs one episode, not half an hour.

Run it locally for debugging (then set ``AGENT_URL=http://127.0.0.1:8080`` in the env file)::

    python examples/math_agent/agent.py --port 8080 --s3-bucket my-bucket
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

import grading
from calculator import calculator
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a careful math tutor. Solve the problem step by step. Use the calculator tool for "
    "every arithmetic step. Finish with the final numeric answer written as \\boxed{N}."
)

# Request parameters the OpenAI chat API accepts as keyword arguments; anything else in
# _rollout.sampling_params (e.g. top_k) is forwarded in the request body through extra_body.
OPENAI_CHAT_PARAMS = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
    "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias",
})


#: the model protocols the agent speaks (MATH_AGENT_PROTOCOL), each through a Strands model provider
PROTOCOLS = ("chat", "responses", "anthropic", "bedrock")
PROTOCOL_ENV = "MATH_AGENT_PROTOCOL"

#: the trainer's default ACR_TIMEOUT, for a caller that does not send _rollout.episode_timeout
DEFAULT_EPISODE_TIMEOUT = 900.0
#: the episode stops at this fraction of episode_timeout, so its error result reaches S3 before
#: the trainer gives up on it
EPISODE_DEADLINE_FRACTION = 0.9


class RolloutSettings(BaseModel):
    """The ``_rollout`` keys the agent itself reads (the app reads exp_id/input_id/s3_bucket).

    :param base_url: OpenAI-compatible base URL including ``/v1`` (the gateway's session URL).
    :param model_id: the ``model`` name to send.
    :param sampling_params: OpenAI request parameters merged into every chat request.
    :param api_key: optional; the gateway ignores it.
    :param episode_timeout: seconds the trainer waits for this episode's result (ACR_TIMEOUT).
    :param request_timeout: seconds one model call may take (default: what fits
        ``max_retries + 1`` attempts into the episode's deadline).
    :param max_retries: retries of a model call that failed to connect or timed out.
    """

    model_config = ConfigDict(extra="allow")

    base_url: StrictStr = Field(pattern=r"^https?://")
    anthropic_base_url: StrictStr | None = Field(default=None, pattern=r"^https?://")
    bedrock_endpoint_url: StrictStr | None = Field(default=None, pattern=r"^https?://")
    model_id: StrictStr = Field(min_length=1)
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    api_key: StrictStr | None = None
    episode_timeout: PositiveFloat = DEFAULT_EPISODE_TIMEOUT
    request_timeout: PositiveFloat | None = None
    max_retries: NonNegativeInt = 2

    @property
    def deadline(self) -> float:
        """Seconds the whole episode may take before the agent gives up on it."""
        return self.episode_timeout * EPISODE_DEADLINE_FRACTION

    @property
    def session_root(self) -> str:
        """The session's address without ``/v1`` (what the Anthropic and Bedrock clients take)."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    @property
    def call_timeout(self) -> float:
        """Seconds one model call may take: every attempt of one call fits in the deadline."""
        return self.request_timeout or self.deadline / (self.max_retries + 1)


class MathRequest(BaseModel):
    """The invocation payload: a GSM8K row's metadata plus ``_rollout``.

    ``prompt`` must be a string: a Strands content block (e.g. ``toolUse``) in its place would let
    a caller dispatch a tool directly, so anything else is rejected before the agent runs.

    :param prompt: the question.
    :param answer: the reference final number (string, or an integer in hand-written data).
    :param rollout: the ``_rollout`` settings.
    """

    model_config = ConfigDict(extra="ignore")

    prompt: StrictStr = Field(min_length=1)
    answer: StrictStr | StrictInt
    rollout: RolloutSettings = Field(alias="_rollout")

    @field_validator("answer")
    @classmethod
    def _answer_is_a_number(cls, value: str | int) -> str:
        text = str(value)
        if grading.to_decimal(text) is None:
            raise ValueError(f"answer {text!r} is not a number (prepare data with examples/prepare_gsm8k.py)")
        return text


def parse_request(payload: Any) -> MathRequest:
    """Validate the payload, with an error message that names every bad field.

    :param payload: the decoded invocation body.
    :raises ValueError: when the payload is not a valid math request.
    """
    if not isinstance(payload, dict):
        raise ValueError(f"payload must be a JSON object, got {type(payload).__name__}")
    try:
        return MathRequest.model_validate(payload)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in err.errors()
        )
        raise ValueError(f"invalid math agent payload: {problems}") from None


def model_params(sampling_params: dict[str, Any]) -> dict[str, Any]:
    """Split trainer sampling params into OpenAI keyword arguments plus ``extra_body`` for the rest.

    :param sampling_params: ``_rollout.sampling_params`` as the trainer sent them.
    """
    params = {k: v for k, v in sampling_params.items() if k in OPENAI_CHAT_PARAMS}
    extra = {k: v for k, v in sampling_params.items() if k not in OPENAI_CHAT_PARAMS}
    if extra:
        params["extra_body"] = extra
    return params


def protocol() -> str:
    """The protocol named by ``MATH_AGENT_PROTOCOL`` (default ``chat``).

    :raises ValueError: for a name that is not one of :data:`PROTOCOLS`.
    """
    name = os.environ.get(PROTOCOL_ENV, "").strip() or "chat"
    if name not in PROTOCOLS:
        raise ValueError(f"{PROTOCOL_ENV}={name!r} is not one of {', '.join(PROTOCOLS)}")
    return name


def build_model(settings: RolloutSettings, name: str) -> Any:
    """The Strands model provider for protocol ``name``, pointed at the session's address for it.

    Each client's timeout and retries fit in the episode's deadline (the SDKs' defaults, 600 s
    and 2 retries, would outlast the trainer's timeout). The trainer's sampling params are
    spelled as each protocol spells them (the gateway enforces the trainer's values anyway).
    """
    sampling = settings.sampling_params
    if name == "chat":
        from strands.models.openai import OpenAIModel

        return OpenAIModel(client_args=_openai_client_args(settings), model_id=settings.model_id,
                           params=model_params(sampling))
    if name == "responses":
        from strands.models.openai_responses import OpenAIResponsesModel

        params = {k: v for k, v in sampling.items() if k in ("temperature", "top_p")}
        if sampling.get("max_tokens"):
            params["max_output_tokens"] = sampling["max_tokens"]
        return OpenAIResponsesModel(client_args=_openai_client_args(settings), model_id=settings.model_id,
                                    params=params)
    if name == "anthropic":
        from strands.models.anthropic import AnthropicModel

        base_url = settings.anthropic_base_url or settings.session_root
        client_args = {**_openai_client_args(settings), "base_url": base_url}
        params = {k: v for k, v in sampling.items() if k in ("temperature", "top_p", "top_k")}
        return AnthropicModel(client_args=client_args, model_id=settings.model_id,
                              max_tokens=int(sampling.get("max_tokens") or 4096), params=params)
    from botocore.config import Config
    from strands.models.bedrock import BedrockModel

    config = Config(read_timeout=settings.call_timeout, connect_timeout=min(settings.call_timeout, 60),
                    retries={"max_attempts": settings.max_retries + 1, "mode": "standard"})
    bedrock = {k: sampling[k] for k in ("temperature", "top_p", "max_tokens") if k in sampling}
    return BedrockModel(endpoint_url=settings.bedrock_endpoint_url or settings.session_root,
                        boto_client_config=config, model_id=settings.model_id, **bedrock)


def _openai_client_args(settings: RolloutSettings) -> dict[str, Any]:
    return {
        "base_url": settings.base_url,
        "api_key": settings.api_key or "EMPTY",
        "timeout": settings.call_timeout,
        "max_retries": settings.max_retries,
    }


def build_agent(settings: RolloutSettings) -> Any:
    """A fresh Strands agent talking to the policy model through the rollout's session address.

    The conversation is never trimmed (``NullConversationManager``): an episode that outgrows
    the model's context fails loudly instead of silently training on a rewritten history.

    :param settings: the validated ``_rollout`` settings.
    :raises ValueError: ``MATH_AGENT_PROTOCOL`` names no protocol.
    """
    from strands import Agent
    from strands.agent.conversation_manager import NullConversationManager

    return Agent(
        model=build_model(settings, protocol()),
        tools=[calculator],
        system_prompt=SYSTEM_PROMPT,
        callback_handler=None,
        conversation_manager=NullConversationManager(),
    )


class ModelCallError(RuntimeError):
    """The policy model could not be reached or did not answer in time; names its URL."""


def _connection_error(err: BaseException) -> BaseException | None:
    """The connection or timeout error behind ``err`` (Strands may wrap it), if any: openai's,
    anthropic's (their timeout errors are connection errors too) or botocore's."""
    import openai
    from botocore.exceptions import ConnectionError as BotocoreConnectionError
    from botocore.exceptions import ReadTimeoutError

    unreachable: tuple[type[BaseException], ...] = (openai.APIConnectionError, BotocoreConnectionError,
                                                     ReadTimeoutError)
    try:
        import anthropic

        unreachable += (anthropic.APIConnectionError,)
    except ImportError:  # the anthropic protocol's package is optional
        pass
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, unreachable):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def loopback_s3_endpoint() -> str | None:
    """``AWS_ENDPOINT_URL_S3`` when it names this machine (a local S3-compatible store), else None."""
    from urllib.parse import urlparse

    url = os.environ.get("AWS_ENDPOINT_URL_S3", "").strip()
    host = urlparse(url).hostname if url else None
    return url if host in ("127.0.0.1", "localhost", "::1") or (host or "").startswith("127.") else None


def session_needs_placeholder_credentials() -> bool:
    """True when results go to a store on loopback and no AWS credentials exist: such a store
    (``bin/eval --rehearse``'s) checks none, so the agent must not stop for want of them."""
    import boto3

    return loopback_s3_endpoint() is not None and boto3.Session().get_credentials() is None


def check_s3_access(bucket: str | None) -> str | None:
    """Check at start-up that results can be written: credentials exist, the bucket answers.

    Without this a missing credential shows only when the first episode's result is written,
    as a traceback in the log and no result for the trainer. With ``AWS_ENDPOINT_URL_S3`` on
    loopback (a local store, e.g. ``bin/eval --rehearse``'s) no credentials are needed: placeholder
    ones are set for this process.

    :param bucket: the results bucket, or ``None`` to check only the credentials.
    :returns: ``None`` when fine, else one line saying what is wrong and how to fix it.
    """
    import boto3
    import botocore.exceptions

    if session_needs_placeholder_credentials():
        # a store on loopback (bin/eval --rehearse's, moto) checks no signature: any key signs
        os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "loopback"
    session = boto3.Session()
    if session.get_credentials() is None:
        return ("no AWS credentials found: the agent writes each result to S3 (on ACR give the "
                "runtime's execution role S3 access; locally export AWS_PROFILE or AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY)")
    if bucket is None:
        return None
    try:
        session.client("s3").head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as err:
        code = err.response.get("Error", {}).get("Code", "error")
        return (f"cannot access s3://{bucket}: {code} (check the bucket name, its region, and that "
                "these credentials may write to it)")
    except botocore.exceptions.BotoCoreError as err:
        return f"cannot reach S3 for s3://{bucket}: {err} (check the network and AWS_ENDPOINT_URL_S3)"
    return None


def count_tool_calls(messages: Sequence[dict[str, Any]]) -> int:
    """Number of tool calls the model made in a Strands conversation.

    :param messages: ``agent.messages``.
    """
    return sum(1 for m in messages if m.get("role") == "assistant" for block in m.get("content", [])
               if "toolUse" in block)


async def close_model(model: Any) -> None:
    """Close the model's HTTP client when its provider keeps one for its lifetime (Strands'
    ``AnthropicModel`` does; the others open one per call): its pooled connections would
    otherwise outlive the episode."""
    close = getattr(getattr(model, "client", None), "close", None)
    if close is not None and asyncio.iscoroutinefunction(close):
        await close()


async def solve(payload: dict[str, Any]) -> dict[str, Any]:
    """Handle one rollout: validate, run the agent, score its final answer.

    :param payload: the invocation body (row metadata + ``_rollout``).
    :returns: ``{"rewards": 1.0 | 0.0, "predicted": ..., "answer": ..., "metrics": {...}}``.
    """
    request = parse_request(payload)
    settings = request.rollout
    agent = build_agent(settings)
    try:
        async with asyncio.timeout(settings.deadline):
            result = await agent.invoke_async(request.prompt)
    except TimeoutError as err:
        raise ModelCallError(
            f"the episode took longer than {settings.deadline:g}s (90% of _rollout.episode_timeout "
            f"{settings.episode_timeout:g}s) talking to the policy model at {settings.base_url}"
        ) from err
    except Exception as err:
        unreachable = _connection_error(err)
        if unreachable is None:
            raise
        raise ModelCallError(
            f"cannot reach the policy model at {settings.base_url}: {unreachable} "
            f"({settings.max_retries + 1} attempts of at most {settings.call_timeout:g}s each)"
        ) from err
    finally:
        await close_model(agent.model)
    final_text = str(result)
    reward = grading.score(final_text, str(request.answer))
    turns = sum(1 for m in agent.messages if m.get("role") == "assistant")
    return {
        "rewards": reward,
        "predicted": grading.extract_final_number(final_text),
        "answer": str(request.answer),
        "metrics": {"turns": turns, "tool_calls": count_tool_calls(agent.messages)},
    }


def create_app() -> Any:
    """Build the ACR app with the rollout entrypoint registered.

    The app creates its S3 client here, so ``AWS_ENDPOINT_URL_S3`` and credentials must be set
    before this is called (tests point it at a local moto server this way).
    """
    from agentcore_rl_toolkit import AgentCoreRLApp

    app = AgentCoreRLApp()

    @app.rollout_entrypoint
    async def invoke(payload: dict[str, Any]) -> dict[str, Any]:
        return await solve(payload)

    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the agent (``POST /invocations``, ``GET /ping``) until interrupted."""
    parser = argparse.ArgumentParser(prog="agent.py", description="Serve the example math agent.")
    parser.add_argument("--host", default=None, help="listen address (default: auto, like ACR)")
    parser.add_argument("--port", type=int, default=8080,
                        help="listen port (default: %(default)s; 0: a free one, said on stderr)")
    parser.add_argument("--s3-bucket", default=os.environ.get("AGENT_S3_BUCKET") or None,
                        help="results bucket to check at start-up (default: $AGENT_S3_BUCKET)")
    options = parser.parse_args(argv)
    if not 0 <= options.port < 65536:
        parser.error(f"--port must be between 0 and 65535, got {options.port}")
    try:
        protocol()
    except ValueError as err:
        print(f"agent.py: {err} (unset it for chat completions)", file=sys.stderr)
        return 2
    problem = check_s3_access(options.s3_bucket)
    if problem is not None:
        print(f"agent.py: {problem}", file=sys.stderr)
        return 1
    if options.port:
        create_app().run(port=options.port, host=options.host)
        return 0
    # port 0: bind a free port here and say it (bin/eval --rehearse reads the line), then serve it
    listener = socket.create_server((options.host or "127.0.0.1", 0))
    print(f"agent.py: listening on port {listener.getsockname()[1]}", file=sys.stderr, flush=True)
    create_app().run(fd=listener.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
