"""The shared stand-ins behave like the real things they replace.

The toy tokenizer must load offline like a Qwen2.5 model directory; the fake SGLang server
must follow SGLang's /generate wire format (reference §5): stop token kept in output_ids,
one logprob entry per id, max_new_tokens -> length, 400s on context overflow, 503 faults.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fakes.sglang_server import Completion, FakeRouter, FakeSGLang, text_policy
from fakes.toy_tokenizer import SPECIAL_TOKENS, build_toy_tokenizer


def test_toy_tokenizer_is_a_qwen25_like_model_dir(model_dir, tokenizer) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.unk_token_id is None
    for special in SPECIAL_TOKENS:
        ids = tokenizer.encode(special, add_special_tokens=False)
        assert ids == [tokenizer.convert_tokens_to_ids(special)], special
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nYou are Qwen")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_toy_tokenizer_is_deterministic(tmp_path, model_dir) -> None:
    again = build_toy_tokenizer(tmp_path / "again")
    assert (again / "tokenizer.json").read_text() == (
        model_dir / "tokenizer.json"
    ).read_text()


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/generate", json=body, timeout=10)


def test_text_policy_keeps_stop_token_and_logprobs(tokenizer) -> None:
    with FakeSGLang(
        text_policy(tokenizer, lambda prompt: "four"), tokenizer=tokenizer
    ) as fake:
        body = {
            "input_ids": [1, 2, 3],
            "return_logprob": True,
            "sampling_params": {"max_new_tokens": 50},
        }
        out = _post(fake.url, body).json()
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert out["output_ids"][-1] == stop_id
    assert tokenizer.decode(out["output_ids"][:-1]) == "four"
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": stop_id}
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(e[0] <= 0 for e in meta["output_token_logprobs"])
    assert meta["completion_tokens"] == len(out["output_ids"])
    assert fake.requests == [body]


def test_max_new_tokens_gives_length_without_stop_token(tokenizer) -> None:
    with FakeSGLang(text_policy(tokenizer, lambda p: "a long answer " * 10)) as fake:
        out = _post(
            fake.url, {"input_ids": [1], "sampling_params": {"max_new_tokens": 3}}
        ).json()
    assert len(out["output_ids"]) == 3
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert "output_token_logprobs" not in out["meta_info"]


def test_default_max_new_tokens_is_128() -> None:
    with FakeSGLang(
        lambda ids, sp: Completion(
            list(range(10, 300)), {"type": "stop", "matched": 299}
        )
    ) as fake:
        out = _post(fake.url, {"input_ids": [1]}).json()
    assert len(out["output_ids"]) == 128
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_stop_string_is_kept_through_completing_token(tokenizer) -> None:
    with FakeSGLang(
        text_policy(tokenizer, lambda p: "one two STOP three"), tokenizer=tokenizer
    ) as fake:
        out = _post(
            fake.url, {"input_ids": [1], "sampling_params": {"stop": ["STOP"]}}
        ).json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "STOP"}
    assert tokenizer.decode(out["output_ids"]).endswith("STOP")


@pytest.mark.parametrize(
    ("n_in", "max_new", "needle"),
    [
        (100, 1, "longer than the model's context length"),
        (60, 50, "Requested token count exceeds"),
    ],
)
def test_context_overflow_is_400(n_in: int, max_new: int, needle: str) -> None:
    policy = lambda ids, sp: Completion([5], {"type": "stop", "matched": 5})  # noqa: E731
    with FakeSGLang(policy, context_length=100) as fake:
        resp = _post(
            fake.url,
            {"input_ids": [1] * n_in, "sampling_params": {"max_new_tokens": max_new}},
        )
    assert resp.status_code == 400
    assert needle in resp.json()["error"]["message"]


def test_faults_and_side_endpoints() -> None:
    policy = lambda ids, sp: Completion([5, 6, 7, 8], {"type": "stop", "matched": 8})  # noqa: E731
    with FakeSGLang(policy, fail_first=1, abort_first=2, context_length=4096) as fake:
        assert _post(fake.url, {"input_ids": [1]}).status_code == 503
        aborted = _post(fake.url, {"input_ids": [1]}).json()
        assert aborted["meta_info"]["finish_reason"]["type"] == "abort"
        assert _post(fake.url, {"input_ids": [1], "text": "x"}).status_code == 400
        assert httpx.get(f"{fake.url}/health").status_code == 200
        assert (
            httpx.get(f"{fake.url}/v1/models").json()["data"][0]["max_model_len"]
            == 4096
        )
        assert httpx.get(f"{fake.url}/model_info").json()["is_generation"] is True
        assert (
            httpx.post(f"{fake.url}/abort_request", json={"rid": "r1"}).status_code
            == 200
        )
        assert fake.aborted_rids == ["r1"]


@pytest.mark.parametrize(
    ("version", "finish_type"), [("0.5.13", "length"), ("0.5.23", "stop")]
)
def test_stop_token_on_the_cap_follows_the_version(
    tokenizer, version: str, finish_type: str
) -> None:
    """0.5.13 checks the length cap before stop tokens (schedule_batch.py:1314-1335), 0.5.23 after."""
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    n = len(tokenizer.encode("four", add_special_tokens=False)) + 1
    policy = text_policy(tokenizer, lambda p: "four")
    with FakeSGLang(policy, tokenizer=tokenizer, sglang_version=version) as fake:
        body = {
            "input_ids": [1],
            "sampling_params": {"max_new_tokens": n, "stop_token_ids": [stop_id]},
        }
        out = _post(fake.url, body).json()
        ready = httpx.get(f"{fake.url}/ready").status_code
        info = httpx.get(f"{fake.url}/model_info").json()
    assert out["output_ids"][-1] == stop_id and len(out["output_ids"]) == n
    assert out["meta_info"]["finish_reason"]["type"] == finish_type
    assert ready == (404 if version == "0.5.13" else 200)  # 0.5.13 has no /ready route
    assert ("served_model_name" in info) == (version != "0.5.13")


def test_stop_token_id_mid_output_cuts_there(tokenizer) -> None:
    def policy(ids, sp):
        return Completion([5, 6, 7, 8], {"type": "stop", "matched": 8})

    with FakeSGLang(policy) as fake:
        out = _post(
            fake.url, {"input_ids": [1], "sampling_params": {"stop_token_ids": [6]}}
        ).json()
    assert out["output_ids"] == [5, 6]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 6}
    assert {"num_retractions", "reasoning_tokens", "cached_tokens"} <= set(
        out["meta_info"]
    )


def test_fake_router_behaves_like_sglang_router_032() -> None:
    def policy(ids, sp):
        return Completion([5, 6], {"type": "stop", "matched": 6})

    with (
        FakeSGLang(policy, context_length=4096) as w0,
        FakeSGLang(policy) as w1,
        FakeRouter([w0, w1]) as router,
    ):
        assert httpx.get(f"{router.url}/health").text == "OK"
        assert (
            "max_model_len"
            not in httpx.get(f"{router.url}/v1/models").json()["data"][0]
        )
        workers = httpx.get(f"{router.url}/workers").json()["workers"]
        assert [w["url"] for w in workers] == [w0.url, w1.url]
        assert (
            httpx.post(f"{router.url}/abort_request", json={"rid": "r"}).status_code
            == 404
        )
        assert httpx.get(f"{router.url}/model_info").status_code == 404
        assert httpx.get(f"{router.url}/get_model_info").json()["is_generation"] is True
        params = {
            "max_new_tokens": 4,
            "spaces_between_special_tokens": False,
            "no_stop_trim": True,
        }
        for _ in range(3):
            resp = httpx.post(
                f"{router.url}/generate",
                json={"input_ids": [1], "sampling_params": params},
                headers={"X-SMG-Routing-Key": "k"},
            )
            assert resp.json()["output_ids"] == [5, 6]
        (served,) = [w for w in (w0, w1) if w.requests]
        assert len(served.requests) == 3
        assert served.headers[0]["X-SMG-Routing-Key"] == "k"
        assert served.requests[0]["sampling_params"] == {
            "max_new_tokens": 4,
            "no_stop_trim": True,
        }
