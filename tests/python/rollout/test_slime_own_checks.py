"""The rollout's samples through slime's own code: rollout routing replay (and, with it, the
log probs importance sampling reads) checked by the slime a run uses, not by a picture of it.

slime needs torch and is not installable from a package index, so this runs only when
``TOOLKIT_SLIME_SRC`` names a slime checkout (a training node's /root/slime, or a checkout of
the pinned fa3c990 or v0.3.1) and a python with torch is at hand (``TOOLKIT_SGLANG_VENV``, the
tests' SGLang parser venv, has a CPU torch); it skips otherwise, saying so. Multi-turn episodes
(one with a fork) go through the real gateway in front of the scripted MoE engine; the merged
samples, a failed episode's and padding's, are handed to slime_own_checks.py, which runs
slime's ``Sample`` decoding, its rollout-to-training-data conversion and its actor's
per-sample check and replay input on them, and slime's importance-sampling functions (each
``--use-tis`` / ``--use-opsm`` / ``--custom-tis-function-path`` / ``--get-mismatch-metrics``
path) against the same quantities computed from the engine's logprobs. docs/rollout.md gives
the results at both commits.
"""

from __future__ import annotations

import base64
import json
import math
import os
import pickle
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from agentcore_slime.gateway import Gateway, GatewayConfig
from agentcore_slime.rollout.routing import RoutingLayout, attach_routing, fill_routing
from agentcore_slime.rollout.samples import KIND_FAILED, KIND_PADDING, ShimRecord, zero_gradient_sample
from agentcore_slime.rollout.traces import merge_traces_to_samples
from fakes.sglang_server import FakeSGLang, MoeShape, text_policy
from fakes.toy_tokenizer import build_toy_tokenizer
from slime.utils.types import Sample

SLIME = os.environ.get("TOOLKIT_SLIME_SRC", "")
TORCH_PYTHON = Path(os.environ.get("TOOLKIT_SGLANG_VENV", ".venv-sglang")) / "bin" / "python"
SHAPE = MoeShape(layers=4, topk=2, experts=8)
LAYOUT = RoutingLayout(SHAPE.layers, SHAPE.topk, SHAPE.experts)

pytestmark = pytest.mark.skipif(
    not (SLIME and Path(SLIME, "slime", "utils", "types.py").is_file() and TORCH_PYTHON.is_file()),
    reason="slime's own checks need TOOLKIT_SLIME_SRC (a slime checkout) and a python with torch",
)


def _talk(base: str, turns: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        resp = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
        messages.append({"role": "assistant", "content": resp.json()["choices"][0]["message"]["content"]})
    return messages


def _episodes(model_dir: Path) -> list[tuple[str, list[Any]]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    policy = text_policy(tokenizer, lambda prompt: f"answer {len(prompt) % 11} " * 3)
    config = GatewayConfig(
        str(model_dir),
        host="127.0.0.1",
        port=0,
        routed_experts_layers=SHAPE.layers,
        routed_experts_topk=SHAPE.topk,
    )
    with FakeSGLang(policy, tokenizer=tokenizer, routed_experts=SHAPE) as engine:
        gateway = Gateway(config)
        gateway.start(engine.url)
        try:
            _talk(gateway.create_session("long"), ["first", "second", "third", "fourth"])
            fork = gateway.create_session("fork")
            messages = _talk(fork, ["one", "two"])
            messages[0]["content"] = "one, rewritten"  # the agent edits its history: a second sample
            messages.append({"role": "user", "content": "three"})
            httpx.post(f"{fork}/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
            return [(sid, gateway.traces(sid)) for sid in ("long", "fork")]
        finally:
            gateway.shutdown()


def _trainer_log_probs(sample: Any, calls: list[Any]) -> list[float]:
    """What Megatron's log-prob pass might give: the engine's logprob moved by up to +-0.9 on
    each sampled token (ratios inside and outside every clip), -1.5 on bridge tokens."""
    out = [-1.5] * sample.response_length
    first = len(calls[0].prompt_token_ids) if calls else 0
    for number, call in enumerate(calls):
        offset = len(call.prompt_token_ids) - first
        for i, logprob in enumerate(call.logprobs):
            out[offset + i] = logprob + 0.9 * math.sin(7 * number + 3 * i + 1)
    return out


def _row(sample: Any, traces: list[Any]) -> dict[str, Any]:
    record = ShimRecord.of(sample)
    calls = [
        {
            "prompt": traces[i].prompt_token_ids,
            "completion": traces[i].completion_token_ids,
            "logprobs": traces[i].logprobs,
            "start": traces[i].routed_experts_start,
            "b64": base64.b64encode(traces[i].routed_experts).decode(),
        }
        for i in record.calls
    ]
    names = ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward", "rollout_id", "index")
    row = {name: getattr(sample, name) for name in names}
    row["train_log_probs"] = _trainer_log_probs(sample, [traces[i] for i in record.calls])
    row.update(
        remove_sample=sample.remove_sample,
        status=sample.status.value,
        rollout_routed_experts=sample.rollout_routed_experts,
        calls=calls,
    )
    return row


def test_slimes_own_code_accepts_the_samples(tmp_path: Path) -> None:
    model_dir = build_toy_tokenizer(tmp_path / "model")
    template = Sample(index=0, group_index=0, prompt="p", metadata={})
    groups, rows = [], []
    for number, (sid, traces) in enumerate(_episodes(model_dir)):
        samples = merge_traces_to_samples(
            traces, template, session_id=sid, reward=float(number), rollout_id=number
        )
        assert attach_routing(traces, samples, LAYOUT) is None
        groups.append(samples)
        rows += [(s, traces) for s in samples]
    assert [len(g) for g in groups] == [1, 2]  # the fork is a second sample
    failed = zero_gradient_sample(
        Sample,
        template=template,
        record=ShimRecord(kind=KIND_FAILED),
        rollout_id=2,
        status=Sample.Status.FAILED,
    )
    padding = zero_gradient_sample(
        Sample,
        template=template,
        record=ShimRecord(kind=KIND_PADDING),
        rollout_id=2,
        status=Sample.Status.FAILED,
    )
    groups.append([failed, padding])
    assert fill_routing(groups, LAYOUT) == 2
    rows += [(failed, []), (padding, [])]
    payload = {
        "samples": [_row(sample, traces) for sample, traces in rows],
        "layout": {"layers": SHAPE.layers, "topk": SHAPE.topk, "experts": SHAPE.experts},
        "n_samples_per_prompt": 1,
    }
    data = tmp_path / "samples.pickle"
    data.write_bytes(pickle.dumps(payload))
    checker = Path(__file__).with_name("slime_own_checks.py")
    done = subprocess.run(
        [str(TORCH_PYTHON), str(checker), SLIME, str(data)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(results, indent=1))  # the figures docs/rollout.md quotes (pytest -s shows them)
    assert all(value.startswith("ok") for value in results.values()), results
    assert set(results) == {
        "sample_decoding",
        "train_data",
        "train_data_has_routing",
        "actor",
        "importance_sampling",
    }
    assert np.array_equal(padding.rollout_routed_experts, failed.rollout_routed_experts)
