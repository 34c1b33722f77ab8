"""Error paths over real loopback HTTP: 404, 400, 502 after bounded retries, abort, admin guard.

Engine: the scripted SGLang server with scripted faults (503s, aborts) or no server at all.
"""

from __future__ import annotations

import httpx
import openai
import pytest
from agentcore_slime.addresses import is_loopback
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.gateway.admin import AdminRoutes
from aiohttp.test_utils import make_mocked_request
from fakes.ports import free_port


def _chat(base: str, body: object, **kw) -> httpx.Response:
    return httpx.post(f"{base}/chat/completions", json=body, timeout=30, **kw)


HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_unknown_and_deleted_sessions_are_404(make_stand) -> None:
    stand = make_stand()
    gw = stand.gateway
    resp = _chat(f"{gw.url}/sessions/nope/v1", HELLO)
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "session_not_found"
    assert resp.headers["x-should-retry"] == "false"
    base = gw.create_session("gone")
    gw.delete_session("gone")
    gw.delete_session("gone")  # idempotent
    client = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(**HELLO)
    assert httpx.get(f"{base}/models").status_code == 404
    assert stand.engine.requests == []
    with pytest.raises(KeyError):
        gw.traces("gone")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "must be a JSON object"),
        ({"messages": []}, "non-empty list"),
        (
            {"messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role 'wizard'",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "only n=1"),
        (
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens must be a positive",
        ),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}],
            },
            "tools[0]",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "only text parts",
        ),
    ],
)
def test_malformed_requests_are_400(make_stand, body, needle: str) -> None:
    stand = make_stand()
    base = stand.gateway.create_session("s")
    if isinstance(body, str):
        resp = httpx.post(f"{base}/chat/completions", content=body, timeout=30)
    else:
        resp = _chat(base, body)
    assert resp.status_code == 400, resp.text
    assert needle in resp.json()["error"]["message"]
    assert resp.headers["x-should-retry"] == "false"
    assert stand.engine.requests == [] and stand.gateway.traces("s") == []


def test_prompt_over_context_is_400_context_length_exceeded(make_stand) -> None:
    stand = make_stand(context_length=20)
    resp = _chat(stand.gateway.create_session("s"), HELLO)
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "context_length_exceeded"


def test_engine_5xx_is_retried_then_recorded_once(make_stand) -> None:
    stand = make_stand(engine_retries=3, fake={"fail_first": 2})
    stand.script.replies.append("fine")
    resp = _chat(stand.gateway.create_session("s"), HELLO)
    assert resp.status_code == 200
    assert len(stand.engine.requests) == 3
    rids = [r["rid"] for r in stand.engine.requests]
    assert len(set(rids)) == 3  # a fresh rid per attempt
    assert len(stand.gateway.traces("s")) == 1


def test_engine_down_is_502_after_bounded_retries(make_stand) -> None:
    stand = make_stand(engine_retries=2, fake={"fail_first": 100})
    resp = _chat(stand.gateway.create_session("s"), HELLO)
    assert resp.status_code == 502
    assert "failed after 3 attempts" in resp.json()["error"]["message"]
    assert len(stand.engine.requests) == 3
    assert stand.gateway.traces("s") == []


def test_abort_is_502_and_nothing_recorded(make_stand) -> None:
    stand = make_stand(fake={"abort_first": 1})
    stand.script.replies += ["partial answer that gets aborted", "second try"]
    base = stand.gateway.create_session("s")
    resp = _chat(base, HELLO)
    assert resp.status_code == 502
    assert "aborted" in resp.json()["error"]["message"]
    assert stand.gateway.traces("s") == []
    assert _chat(base, HELLO).status_code == 200  # the agent's retry goes through
    assert len(stand.gateway.traces("s")) == 1


def test_start_fails_clearly_when_engine_is_down(model_dir) -> None:
    port = free_port()  # nothing listens there (and no bind to port 0 is handed it)
    gw = Gateway(
        GatewayConfig(
            str(model_dir), host="127.0.0.1", port=0, engine_health_attempts=1
        )
    )
    with pytest.raises(RuntimeError, match="is not healthy"):
        gw.start(f"http://127.0.0.1:{port}")
    assert gw.url == ""
    gw.shutdown()


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"model_dir": "/nonexistent/model"}, "does not exist"),
        ({"renderer_family": "no-such-family"}, "unknown RENDERER_FAMILY"),
        ({"tool_call_parser": "bogus"}, "SGLANG_TOOL_CALL_PARSER"),
        ({"reasoning_parser": "bogus"}, "SGLANG_REASONING_PARSER"),
    ],
)
def test_bad_configuration_fails_before_serving(
    model_dir, config: dict, needle: str
) -> None:
    gw = Gateway(
        GatewayConfig(
            **{"model_dir": str(model_dir), "host": "127.0.0.1", "port": 0, **config}
        )
    )
    with pytest.raises(ValueError, match=needle):
        gw.start("http://127.0.0.1:9")  # never contacted: validation comes first
    assert gw.url == ""


def test_session_api_validates_input(make_stand) -> None:
    gw = make_stand().gateway
    with pytest.raises(ValueError, match="must match"):
        gw.create_session("a/b")
    with pytest.raises(ValueError, match="unknown sampling params"):
        gw.create_session("ok", {"temprature": 1.0})
    with pytest.raises(ValueError, match="top_p"):
        gw.create_session("ok", {"top_p": 0})
    gw.create_session("ok")
    with pytest.raises(ValueError, match="already exists"):
        gw.create_session("ok")


def test_admin_routes_serve_loopback_only(make_stand) -> None:
    """Admin routes over real loopback HTTP work; for a non-loopback peer the guard refuses.

    The non-loopback peer is simulated with aiohttp's mocked request (its transport reports
    a 10.x peer address); no traffic goes to any non-loopback address.
    """
    stand = make_stand()
    gw = stand.gateway
    resp = httpx.post(
        f"{gw.url}/admin/sessions",
        json={"session_id": "adm", "sampling_params": {}},
        headers=gw.admin_headers,
    )
    assert resp.status_code == 200 and resp.json()["base_url"].endswith(
        "/sessions/adm/v1"
    )
    assert httpx.get(f"{gw.url}/admin/sessions/adm/traces", headers=gw.admin_headers).json() == []

    class Transport:
        def get_extra_info(self, name: str, default=None):
            return ("10.1.2.3", 40000) if name == "peername" else default

    async def handler(request):
        raise AssertionError("the admin handler must not run for a remote peer")

    import asyncio

    for method, path in (
        ("POST", "/admin/sessions"),
        ("DELETE", "/admin/sessions/adm"),
    ):
        request = make_mocked_request(method, path, transport=Transport())
        assert request.remote == "10.1.2.3"
        refused = asyncio.run(AdminRoutes(gw, gw.sessions, gw.calls).guard(request, handler))
        assert refused.status == 403
    assert httpx.delete(f"{gw.url}/admin/sessions/adm", headers=gw.admin_headers).status_code == 200
    assert (
        httpx.post(f"{gw.url}/sessions/adm/v1/chat/completions", json=HELLO).status_code
        == 404
    )


def test_loopback_check() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1")
    assert (
        not is_loopback("10.0.0.5")
        and not is_loopback(None)
        and not is_loopback("garbage")
    )


def test_health(make_stand) -> None:
    assert httpx.get(f"{make_stand().gateway.url}/health").json() == {"status": "ok"}


def test_reply_not_delivered_is_not_recorded(make_stand) -> None:
    """The agent gives up (client timeout) while the engine is still generating: the reply
    cannot be written, so nothing is recorded and the chain does not advance."""
    import time

    stand = make_stand(fake={"delay": 0.6})
    stand.script.replies += ["too late", "on time"]
    base = stand.gateway.create_session("s")
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{base}/chat/completions", json=HELLO, timeout=0.2)
    time.sleep(
        1.0
    )  # the engine answers, the gateway tries to write to the closed connection
    assert len(stand.engine.requests) == 1
    assert stand.gateway.traces("s") == []
    assert _chat(base, HELLO).status_code == 200
    [trace] = stand.gateway.traces("s")
    assert trace.response_message["content"] == "on time"
