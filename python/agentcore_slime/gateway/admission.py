"""What an agent's call passes before it is built: a bound on the body bytes its session holds,
a body that arrives in time, the stored reply for an idempotent retry, the final reply once the
session reached its cap. And writing a reply to the client.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging

from aiohttp import web

from .build import LARGE_BODY_BYTES
from .caps import cap_reached, final_reply
from .config import GatewayConfig, short_id
from .protocols.base import Protocol
from .sessions import Session
from .wire import ChatRequest

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024**2  # aiohttp's client_max_size: a larger body gets 413


def redacted(request: web.Request) -> str:
    """The request's path with its session id shortened (logs must not carry live ids)."""
    sid = request.match_info.get("sid")
    return request.path.replace(sid, short_id(sid)) if sid else request.path


def unknown_session(sid: str, protocol: Protocol) -> web.Response:
    return protocol.error(
        404,
        f"unknown session {sid!r} (sessions are created by the trainer's rollout)",
        "invalid_request_error",
        code="session_not_found",
    )


def body_size(request: web.Request) -> int:
    """The bytes a call's body will hold: what it declares, or the largest allowed when it does not."""
    return request.content_length if request.content_length is not None else MAX_BODY_BYTES


def over_body_bytes(session: Session, size: int, limit: int, protocol: Protocol) -> web.Response | None:
    """The 429 when the session's calls in progress hold too many body bytes for one of ``size`` more."""
    if session.bytes_in_flight + size <= limit:
        return None
    return protocol.error(
        429,
        f"this session's calls in progress already hold {session.bytes_in_flight} bytes of request "
        f"bodies; a call of {size} more is over the session's {limit} (wait for them to finish)",
        "rate_limit_error",
        code="session_bodies_in_flight",
        retry=True,
    )


async def read_body(request: web.Request, protocol: Protocol, timeout: float) -> bytes | web.Response:
    """The body, or the answer when it did not arrive in time (or the client went away)."""
    try:  # a client that stalls mid-body must not hold a connection (and a file) forever
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        return protocol.error(
            408,
            f"the request body did not arrive within {timeout:g} s",
            "invalid_request_error",
            code="request_timeout",
        )
    except (ConnectionResetError, RuntimeError) as err:
        # the client went away mid-body, or was closed to make room; aiohttp says
        # RuntimeError("Connection closed.") when the read starts after that
        transport = request.transport
        if isinstance(err, RuntimeError) and transport is not None and not transport.is_closing():
            raise
        logger.debug("client of %s went away before its body arrived", redacted(request))
        return web.Response(status=499)


def _body_digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


async def digest(raw: bytes) -> bytes:
    """What ties an Idempotency-Key to its body (a large body is hashed off the loop)."""
    if len(raw) > LARGE_BODY_BYTES:
        return await asyncio.to_thread(_body_digest, raw)
    return _body_digest(raw)


async def replay(
    request: web.Request, session: Session, key: str, body_digest: bytes, protocol: Protocol
) -> web.StreamResponse:
    """The reply stored under ``key``, if the retry sent the same body (else 422)."""
    stored, reply = session.replies[key]
    if not hmac.compare_digest(stored, body_digest):
        return protocol.error(
            422,
            f"the Idempotency-Key {key[:64]!r} was used before with a different request body "
            "(a retry sends the same body; a new request needs a new key)",
            "invalid_request_error",
            code="idempotency_key_reused",
        )
    return await send(request, *reply) or web.Response(status=499)


def reached_cap(session: Session, config: GatewayConfig) -> bool:
    """Whether the session used up its calls or tokens (see caps.py); logged once."""
    cap = cap_reached(
        len(session.store),
        session.sampled_tokens,
        config.max_calls_per_episode,
        config.max_tokens_per_episode,
    )
    if cap is not None and session.capped is None:
        session.capped = cap
        logger.info(
            "session %s: reached its cap on %s; later calls get the final reply", short_id(session.sid), cap
        )
    return cap is not None


async def capped(
    request: web.Request, chat: ChatRequest, protocol: Protocol, model_id: str
) -> web.StreamResponse:
    """A capped session's call: the final reply in its protocol, not sampled, not recorded."""
    reply = final_reply(protocol, chat, chat.model or model_id)
    return await send(request, *reply) or web.Response(status=499)


async def send(
    request: web.Request, content: bytes | list[bytes], content_type: str
) -> web.StreamResponse | None:
    """Send a body (bytes, or SSE events written one by one); None when the client is gone."""
    try:
        if isinstance(content, bytes):
            response = web.StreamResponse(headers={"Content-Type": content_type})
            response.content_length = len(content)
            await response.prepare(request)
            await response.write(content)
        else:
            response = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
            await response.prepare(request)
            for event in content:
                await response.write(event)
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        logger.info("client of a session went away before the reply was written")
        return None
    return response
