"""What the gateway does to stay fast at scale keeps its results exact.

- requests are parsed by orjson, with the standard parser behind it: the parsed body is the
  standard parser's, integers beyond 64 bits included;
- full renders of chat-template models encode the template text piece by piece, cached and
  off the GIL: the ids are the whole text's ids, and one difference switches it off;
- the trace store keeps each call's metadata as a JSON blob: it comes back equal;
- a deleted session's ids are freed, and ``/admin/stats`` says what the gateway holds.

Stand-ins as in conftest: the toy tokenizer and the scripted SGLang server.
"""

from __future__ import annotations

import gc
import json
import math
import threading
import weakref
from array import array
from typing import Any

import httpx
import pytest
from agentcore_slime.gateway.conversation import normalize_messages
from agentcore_slime.gateway.engine import generate_body
from agentcore_slime.gateway.family import choose_renderer
from agentcore_slime.gateway.parsing import MemoTokenizer, parse_completion, parsing_view
from agentcore_slime.gateway.rendering import PromptBuilder
from agentcore_slime.gateway.store import pack, unpack
from agentcore_slime.gateway.wire import BadRequest, load_json
from gateway_helpers import json_values
from hypothesis import given, settings
from hypothesis import strategies as st

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
JSON = json_values(TEXT)


def _typed(value: Any) -> Any:
    """``value`` with every number tagged by its type (1 == 1.0 must not pass)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


# --------------------------------------------------------------------- parsing
@settings(max_examples=200, deadline=None)
@given(JSON)
def test_load_json_returns_what_the_standard_parser_returns(value: Any) -> None:
    raw = json.dumps(value, ensure_ascii=False).encode()
    assert _typed(load_json(raw)) == _typed(json.loads(raw))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=300),
    st.dictionaries(st.text(max_size=8), JSON, max_size=4),
)
def test_a_generate_body_says_what_the_standard_encoder_says(ids: list[int], params: dict[str, Any]) -> None:
    """The ids go out from their buffer; the body reads back as the same JSON either way, params
    orjson refuses (lone surrogates, huge integers) included."""
    refused = {**params, "stop": ["\ud800 lone"], "huge": 2**70}  # orjson refuses both
    for sampling in (params, refused):
        expected = {"rid": "r", "input_ids": ids, "return_logprob": True, "sampling_params": sampling}
        for held in (array("i", ids), ids):
            assert _typed(json.loads(generate_body("r", held, sampling))) == _typed(expected)


def test_load_json_keeps_long_integers_exact_and_refuses_what_it_refused() -> None:
    assert load_json(b'{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
    assert load_json(b'{"s": "\\ud800"}') == {"s": "\ud800"}  # orjson refuses it; json reads it
    for raw, problem in [(b'{"x": NaN}', "NaN is not JSON"), (b"[1e999]", "out of range"), (b"[1,", "valid")]:
        with pytest.raises(BadRequest, match=problem):
            load_json(raw)
    with pytest.raises(BadRequest, match="nested deeper"):
        load_json(b"[" * 100 + b"]" * 100)


# --------------------------------------------------------------------- full renders
PIECES = st.sampled_from(
    ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "\n", " ", "  ", "\n\n", "user", "système"]
)
WORDS = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)


def _builder(model_dir: Any, tokenizer: Any) -> tuple[Any, PromptBuilder]:
    renderer, choice = choose_renderer(
        str(model_dir), tokenizer, "auto", tool_call_parser="qwen", reasoning_parser=None
    )
    return renderer, PromptBuilder(renderer, tokenizer, choice.family)


@settings(max_examples=150, deadline=None)
@given(st.lists(PIECES | WORDS, max_size=60), st.lists(PIECES | WORDS, max_size=20), st.integers(0, 2))
def test_full_renders_are_the_renderers_ids(
    model_dir: Any, tokenizer: Any, system: list[str], user: list[str], long: int
) -> None:
    """The chat template's text encoded by the Rust tokenizer (the GIL released) is exactly
    the renderer's own render, special tokens in the messages' text and long texts included."""
    renderer, builder = _builder(model_dir, tokenizer)
    assert builder.releases_gil
    messages = normalize_messages(
        [
            {"role": "system", "content": "".join(system) + "words and more words " * 400 * long},
            {"role": "user", "content": "".join(user)},
        ]
    )
    expected = list(renderer.render_ids(messages, add_generation_prompt=True))
    assert builder.render(messages, None) == expected


def test_a_tokenizer_that_encodes_otherwise_than_the_renderer_is_not_used(
    model_dir: Any, tokenizer: Any
) -> None:
    """Checked once when the builder is made: a difference leaves full renders to the renderer."""
    renderer, choice = choose_renderer(
        str(model_dir), tokenizer, "auto", tool_call_parser="qwen", reasoning_parser=None
    )
    messages = normalize_messages([{"role": "user", "content": "add 2 and 3"}])
    expected = list(renderer.render_ids(messages, add_generation_prompt=True))
    real = renderer.render_ids
    renderer.render_ids = lambda *args, **kwargs: [*real(*args, **kwargs), 0]
    try:
        builder = PromptBuilder(renderer, tokenizer, choice.family)
        assert not builder.releases_gil
        assert builder.render(messages, None) == [*expected, 0]  # the renderer's ids, whatever they are
    finally:
        del renderer.render_ids


# --------------------------------------------------------------------- stored blobs
@settings(max_examples=150, deadline=None)
@given(JSON | st.floats() | st.text())
def test_blobs_read_back_equal(value: Any) -> None:
    """orjson would write NaN and infinities as null and refuses long integers and lone
    surrogates: those go through the standard encoder."""
    back = unpack(pack(value))
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:
        assert _typed(back) == _typed(value)


def test_blobs_keep_what_orjson_cannot_write() -> None:
    for value in [{"x": math.inf}, [2**70], {"s": "\udc80"}, {"latency": -math.inf}]:
        assert json.dumps(unpack(pack(value))) == json.dumps(value)


# --------------------------------------------------------------------- memory
def _tool_turns(stand: Any, sid: str, turns: int) -> None:
    base = stand.gateway.create_session(sid)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "count to three " * 50}]
    for turn in range(turns):
        stand.script.replies.append(f"turn {turn} " * 40)
        reply = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
        assert reply.status_code == 200, reply.text
        messages += [reply.json()["choices"][0]["message"], {"role": "user", "content": "go on " * 30}]


def test_a_deleted_session_frees_its_ids_and_stats_say_what_is_held(make_stand: Any) -> None:
    stand = make_stand(cumulative_token_mode=True)
    _tool_turns(stand, "kept", 2)
    _tool_turns(stand, "gone", 3)
    session = stand.gateway.sessions.by_id["gone"]
    # the session's id sequences (one array while the calls extend each other) and logprobs
    arrays = [weakref.ref(a) for call in session.store.snapshot() for a in (call.ids, call.logprobs)]
    assert len({id(call.ids) for call in session.store.snapshot()}) == 1  # cumulative: one sequence
    admin = stand.gateway.admin_headers
    stats = httpx.get(f"{stand.gateway.url}/admin/stats?deep=1", headers=admin, timeout=30).json()
    held = stats["held_tokens"]
    assert stats["sessions"] == 2 and held > 0
    assert stats["session_bytes"] > stats["stored_bytes"] > 4 * held  # ids, logprobs, blobs, and the rest
    assert {"gc_collections", "gc_max_pause_cpu_ms", "gc_max_pause_wall_ms"} <= set(stats)

    del session
    stand.gateway.delete_session("gone")
    gc.collect()
    assert [ref() for ref in arrays] == [None] * len(arrays)
    after = stand.gateway.stats()
    assert after["sessions"] == 1 and 0 < after["held_tokens"] < held
    stand.gateway.delete_session("kept")
    assert stand.gateway.stats()["held_tokens"] == 0


def test_small_bridges_run_on_the_loop_and_long_new_text_in_a_render_thread(make_stand: Any) -> None:
    """A turn that adds little is bridged on the event loop (a thread hand-off costs more); a
    turn that adds a long tool result is tokenized in a render thread, so the loop keeps serving."""
    stand = make_stand(cumulative_token_mode=True)
    builder = stand.gateway.calls.prompts
    threads: list[str] = []
    bridge = builder.bridge

    def recording_bridge(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return bridge(*args)

    builder.bridge = recording_bridge
    base = stand.gateway.create_session("s")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for new_text in ("a short tool result", "long tool result " * 2000):
        stand.script.replies.append("next")
        reply = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
        assert reply.status_code == 200, reply.text
        messages += [reply.json()["choices"][0]["message"], {"role": "user", "content": new_text}]
    stand.script.replies.append("done")
    reply = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert [t.token_mode for t in stand.gateway.traces("s")] == ["rendered", "bridged", "bridged"]
    assert threads[0] == "agentcore-gateway"  # the event loop's thread
    assert threads[1].startswith("agentcore-gateway-render")


def test_the_render_worker_renders_as_the_renderer_does(model_dir: Any) -> None:
    """The worker process renders only when the gateway cannot encode with the Rust tokenizer
    (its encoding differs from the renderer's): it must not take that path itself."""
    from agentcore_slime.gateway import render_pool

    render_pool._init_worker(render_pool.RendererSpec(str(model_dir), "default", "qwen", None))
    try:
        assert render_pool._WORKER["builder"].rust is None
    finally:
        render_pool._WORKER.clear()


# --------------------------------------------------------------------- parsing replies
PIECES = [
    "Sure.", " ", "\n", "<think>", "</think>", "hmm", "<|im_end|>", "<|im_start|>assistant\n",
    '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>', "<tool_call>\n{bad\n</tool_call>",
    "é ü", "  spaces  ",
]


@pytest.mark.parametrize("reasoning", [None, "qwen3"])
@settings(max_examples=60, deadline=None)
@given(
    completion=st.lists(st.sampled_from(PIECES), max_size=8),
    prompt=st.lists(st.sampled_from(PIECES), max_size=6),
)
def test_replies_parse_the_same_through_the_memoized_tokenizer(
    model_dir: Any, tokenizer: Any, reasoning: str | None, completion: list[str], prompt: list[str]
) -> None:
    renderer, _ = choose_renderer(
        str(model_dir), tokenizer, "default", tool_call_parser="qwen", reasoning_parser=reasoning
    )
    view = parsing_view(renderer)
    assert isinstance(view._tokenizer, MemoTokenizer)  # the fast path is the one tested
    ids = tokenizer.encode("".join(completion), add_special_tokens=False)
    prompt_ids = tokenizer.encode("".join(prompt), add_special_tokens=False)
    for _ in range(2):  # the second parse answers from the memo
        expected = parse_completion(renderer, ids, prompt_ids, None)
        got = parse_completion(view, ids, prompt_ids, None)
        for message in (expected, got):  # minted ids differ
            for call in message.get("tool_calls", []):
                call["id"] = "x"
        assert got == expected


def test_a_request_repeating_the_conversation_holds_it_once(make_stand: Any) -> None:
    """Messages equal to the last call's become the objects the session holds (raw and
    normalized) as soon as the request is parsed; an edited history does not, and the traces
    hold what the template rendered of what the agent sent either way."""
    stand = make_stand(cumulative_token_mode=True)
    base = stand.gateway.create_session("s")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    sent = []
    for turn in range(3):
        if turn == 2:  # the agent edits its history: nothing of it may be reused
            messages[1] = {"role": "user", "content": "go, edited"}
        stand.script.replies.append(f"reply {turn}")
        reply = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
        assert reply.status_code == 200, reply.text
        sent.append(json.loads(json.dumps(messages)))
        messages += [reply.json()["choices"][0]["message"], {"role": "user", "content": f"more {turn}"}]
    session = stand.gateway.sessions.by_id["s"]
    traces = stand.gateway.traces("s")
    assert [t.messages for t in traces] == [normalize_messages(m) for m in sent]
    assert [t.token_mode for t in traces] == ["rendered", "bridged", "rendered"]
    held, chain = session.last_raw, session.chain
    assert held[0] == {"role": "system", "content": "sys"} and held[1]["content"] == "go, edited"
    assert chain.messages[1]["content"] == "go, edited"


def test_parsed_requests_reuse_the_held_messages(make_stand: Any) -> None:
    stand = make_stand(cumulative_token_mode=True)
    base = stand.gateway.create_session("s")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    seen = []
    parse = stand.gateway.calls._messages

    def recording(chat: Any, session: Any) -> Any:
        normalized = parse(chat, session)
        seen.append((list(chat.messages), normalized, list(session.last_raw), session.chain))
        return normalized

    stand.gateway.calls._messages = recording
    for turn in range(2):
        stand.script.replies.append(f"reply {turn}")
        reply = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
        assert reply.status_code == 200, reply.text
        messages += [reply.json()["choices"][0]["message"], {"role": "user", "content": f"more {turn}"}]
    raw, normalized, held, chain = seen[1]
    assert len(held) == 1 and raw[0] is held[0]  # the raw copy was dropped for the held one
    assert normalized[0] is chain.messages[0]
    assert normalized[1:] == normalize_messages(raw[1:])
