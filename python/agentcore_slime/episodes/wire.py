"""The wire contract between the rollout and an agent built on agentcore-rl-toolkit.

What goes to the agent (the row's metadata plus ``_rollout``), where it writes its result
(``{exp_id}/{input_id}/{session_id}.json``), how its immediate reply and its result are read,
and the errors an invocation can end with. Both transports parse replies with
:func:`parse_reply`, so they cannot drift apart.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
MIN_SESSION_ID, MAX_SESSION_ID = 33, 256
#: the agent's immediate reply is a small acknowledgement ({"status": "processing", ...})
MAX_REPLY_BYTES = 1024**2
#: a result object holds the reward, metrics and the echoed payload; anything bigger is a bug
MAX_RESULT_BYTES = 16 * 1024**2


class InvokeError(RuntimeError):
    """The agent was not started: the runtime refused the call or it never reached it.

    :param message: what happened.
    :param code: the failure reason counted in the step's log line (``invoke_error``,
        ``throttled``).
    :param retryable: the call certainly did not reach the agent and may be repeated.
    """

    def __init__(self, message: str, code: str = "invoke_error", retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class AmbiguousInvokeError(InvokeError):
    """The runtime may have started the agent but the reply was lost (504, reset, read timeout).

    Repeating the call would run the agent a second time against the same gateway session,
    so such a call is never retried: the episode ends as an infrastructure failure.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invoke_ambiguous")


def new_session_id() -> str:
    """A fresh session id valid for ACR (36 chars: within 33-256) and safe in URLs and S3 keys."""
    session_id = str(uuid.uuid4())
    assert MIN_SESSION_ID <= len(session_id) <= MAX_SESSION_ID
    return session_id


def result_key(exp_id: str, input_id: str, session_id: str) -> str:
    """The S3 key an ``AgentCoreRLApp`` writes the episode's result to."""
    return f"{exp_id}/{input_id}/{session_id}.json"


def agent_sampling_params(sampling: dict[str, Any]) -> dict[str, Any]:
    """The trainer's sampling params in the OpenAI form agents forward to the gateway.

    ``max_new_tokens`` becomes ``max_tokens``; ``top_k`` is dropped (not an OpenAI chat
    parameter); the gateway applies the trainer's values anyway.

    :param sampling: ``{"temperature", "top_p", "top_k", "max_new_tokens"}``.
    """
    params = {k: sampling[k] for k in ("temperature", "top_p") if sampling.get(k) is not None}
    if sampling.get("max_new_tokens") is not None:
        params["max_tokens"] = sampling["max_new_tokens"]
    return params


def protocol_urls(base_url: str) -> dict[str, str]:
    """The session's address for each model client besides OpenAI's ``base_url`` (docs/agents.md).

    :param base_url: the session's OpenAI base URL, ``<gateway>/sessions/<sid>/v1``.
    :returns: ``anthropic_base_url`` (the anthropic SDK appends ``/v1/messages``) and
        ``bedrock_endpoint_url`` (boto3 ``bedrock-runtime`` appends ``/model/<id>/converse``;
        ``AnthropicBedrock`` takes it as ``base_url``): both ``<gateway>/sessions/<sid>``.
    """
    root = base_url.removesuffix("/")
    root = root.removesuffix("/v1")
    return {"anthropic_base_url": root, "bedrock_endpoint_url": root}


def build_payload(
    metadata: dict[str, Any],
    *,
    exp_id: str,
    input_id: str,
    s3_bucket: str,
    base_url: str,
    model_id: str,
    sampling: dict[str, Any],
    episode_timeout: float | None = None,
) -> dict[str, Any]:
    """The invocation payload: a shallow copy of the row's metadata plus ``_rollout``.

    :param metadata: the dataset row's ``metadata`` dict (the agent's input).
    :param exp_id: experiment id (first part of the result key).
    :param input_id: the step's input id (second part of the result key).
    :param s3_bucket: bucket the agent writes its result to.
    :param base_url: the gateway session's OpenAI base URL (ends in ``/v1``); the other
        protocols' addresses are derived from it (:func:`protocol_urls`).
    :param model_id: the model name the agent sends.
    :param sampling: the trainer's sampling params (see :func:`agent_sampling_params`).
    :param episode_timeout: seconds the rollout waits for the result (``acr_timeout``), sent as
        ``_rollout.episode_timeout`` so an agent can bound its model calls below it (agents
        that do not read it ignore it, as they do any extra ``_rollout`` key).
    """
    payload = dict(metadata)
    payload["_rollout"] = {
        "exp_id": exp_id,
        "input_id": input_id,
        "s3_bucket": s3_bucket,
        "base_url": base_url,
        **protocol_urls(base_url),
        "model_id": model_id,
        "sampling_params": agent_sampling_params(sampling),
    }
    if episode_timeout is not None:
        payload["_rollout"]["episode_timeout"] = episode_timeout
    return payload


def parse_reply(raw: bytes | str) -> dict[str, Any]:
    """The agent's immediate reply as a dict (a non-object JSON value is kept under ``reply``).

    :param raw: the reply body.
    :raises InvokeError: the reply is too large or not JSON.
    """
    if len(raw) > MAX_REPLY_BYTES:
        raise InvokeError(f"agent reply is larger than {MAX_REPLY_BYTES} bytes")
    try:
        reply = json.loads(raw)
    except ValueError as exc:
        raise InvokeError(f"agent reply is not JSON: {raw[:200]!r}") from exc
    return reply if isinstance(reply, dict) else {"reply": reply}


def parse_result(body: bytes, key: str, limit: int = MAX_RESULT_BYTES) -> dict[str, Any]:
    """The agent's result object read from S3.

    :param body: the object's bytes (at most ``limit`` + 1 were read).
    :param key: the object's key, for messages.
    :param limit: the largest result accepted, in bytes.
    :raises ValueError: too large, not JSON (including integers too long to parse), not an object.
    """
    if len(body) > limit:
        raise ValueError(f"result {key} is larger than {limit} bytes (the agent's result must be small)")
    result = json.loads(body)
    if not isinstance(result, dict):
        raise ValueError(f"result {key} is {type(result).__name__} JSON, not an object")
    return result


def _short(value: Any) -> str:
    if isinstance(value, int) and abs(value) >= 10**60:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _finite_float(value: int | float) -> float | None:
    try:
        number = float(value)  # an int beyond ~1e308 raises OverflowError
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def extract_reward(result: dict[str, Any]) -> tuple[float | None, str | None]:
    """The episode's reward from the agent's result, or why there is none.

    A ``status_code`` other than 200 is a failed episode; ``rewards`` may be a number or
    a non-empty list (its last element counts). Booleans, non-numbers and non-finite
    numbers (including integers too large for a float) are rejected: they are contract
    bugs, not a reward of 0.

    :returns: ``(reward, None)`` or ``(None, reason)``.
    """
    status = result.get("status_code", 200)
    if status != 200:
        return None, f"agent error result (status_code {status}): {str(result.get('stop_reason', ''))[:200]}"
    if "rewards" not in result:
        return None, "result has no 'rewards' key (the agent must return {'rewards': <number>})"
    value = result["rewards"]
    if isinstance(value, list):
        if not value:
            return None, "result 'rewards' is an empty list"
        value = value[-1]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"result 'rewards' is {_short(value)}, not a number"
    number = _finite_float(value)
    if number is None:
        return None, f"result 'rewards' is {_short(value)}, not a finite number"
    return number, None
