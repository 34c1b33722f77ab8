"""The training step a rehearsal runs: slime's rollout function, called as slime calls it.

:func:`run_step` calls :func:`agentcore_slime.rollout.generate_rollout` with slime-shaped args
(the run's toolkit.yaml keys, the GPU layout of the env file, the stand-in engine as the router)
and a data source that hands out prompt groups as slime's does, so the step is training's:
over-sampling and the tail cut, the dynamic-sampling filter (slime's
``check_reward_nonzero_std``), trace merging (loss masks), data-parallel padding, the run's
records (``metrics.jsonl``, ``episodes/train-000000.jsonl``, the progress line); then the reward
hook slime calls (:func:`agentcore_slime.rollout.rewards.normalize_episode_rewards`) gives the
advantages, written with each sample's tokens and loss mask to ``samples.jsonl``.

Where slime is not installed its types come from the toolkit's stand-in of them
(``tests/python/slime_standin``: ``Sample``, the rollout's output types, the filter and its
wrapper, each checked against slime fa3c990 by its tests); the data source is always the
stand-in of ``tests/python/fakes/data_source.py`` (slime's needs its whole args and a tokenizer).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentcore_slime.observe.runlog import write_whole
from agentcore_slime.rollout.samples import ShimRecord

#: the rehearsal's step number (slime's rollout id)
STEP = 0
SAMPLES_FILE = "samples.jsonl"
#: slime's filter that drops a group whose rewards are all equal (no GRPO signal)
FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


def stand_in_slime(repo: Path) -> str:
    """Make ``import slime`` work: the real one when installed, else the toolkit's stand-in;
    put the stand-in data source on the path. Returns the stand-in line ("" for real slime)."""
    tests = repo / "tests" / "python"
    sys.path.append(str(tests))  # fakes.data_source
    if importlib.util.find_spec("slime") is not None:
        return ""
    sys.path.append(str(tests / "slime_standin"))
    return (f"slime: its Sample, rollout output types and filter from {tests / 'slime_standin'} "
            "(slime is not installed here; checked against slime fa3c990 by the toolkit's tests)")


def data_source(rows: Sequence[dict[str, Any]], samples_per_prompt: int) -> Any:
    """slime's data source, stood in: ``get_samples(n)`` hands out prompt groups of the rows, cycled."""
    module = importlib.import_module("fakes.data_source")
    return module.ListDataSource(list(rows), samples_per_prompt)


def slime_args(toolkit: dict[str, Any], layout: dict[str, int], engine_url: str, model_dir: str,
               out_dir: Path, groups: int, samples: int) -> SimpleNamespace:
    """slime's args for one step of ``groups`` prompt groups of ``samples`` episodes: toolkit.yaml's
    keys (slime loads them with ``--custom-config-path``), the flags train.sh passes, the router.

    :param layout: ``actor_num_gpus_per_node`` and ``tensor_model_parallel_size`` (NUM_GPUS, TP_SIZE).
    """
    host, port = engine_url.rsplit("//", 1)[-1].rsplit(":", 1)
    return SimpleNamespace(**{
        **toolkit,
        "gateway_port": 0,  # its own free port, reported (a rehearsal must not need 9090)
        "record_episodes": groups * samples * 4,  # every episode on the page
        "custom_config_path": str(out_dir / "toolkit.yaml"), "hf_checkpoint": model_dir,
        "sglang_router_ip": host, "sglang_router_port": int(port), "num_rollout": 1,
        "rollout_batch_size": groups, "n_samples_per_prompt": samples,
        "over_sampling_batch_size": groups + 1,  # one group more than kept: the tail cut runs
        "dynamic_sampling_filter_path": FILTER, "rollout_temperature": 1.0, "rollout_max_response_len": 1024,
        "global_batch_size": groups * samples, "use_dynamic_batch_size": True, "actor_num_nodes": 1,
        **layout,
        "advantage_estimator": "grpo", "rewards_normalization": True, "grpo_std_normalization": True,
        "reward_key": None,
    })


def run_step(args: SimpleNamespace, source: Any) -> tuple[list[Any], str]:
    """The step through the rollout function: its samples (flat, padding included) and why it
    stopped ("" when it returned)."""
    from agentcore_slime.rollout import generate_rollout

    try:
        output = generate_rollout(args, STEP, source)
    except RuntimeError as exc:  # every episode failed: recorded, then refused, as in training
        return [], str(exc)
    return [sample for group in output.samples for sample in group], ""


def _runs(mask: Sequence[int]) -> list[list[int]]:
    """The loss mask as runs ``[[bit, length], ...]``."""
    runs: list[list[int]] = []
    for bit in mask:
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([int(bit), 1])
    return runs


def sample_lines(samples: Sequence[Any], raw: Sequence[float], advantages: Sequence[float],
                 decode: Any = None) -> list[dict[str, Any]]:
    """``samples.jsonl``: one object per sample, with its loss mask and advantage.

    :param decode: a tokenizer's ``decode`` (token id -> text), to show the response's pieces.
    """
    lines = []
    for position, sample in enumerate(samples):
        record = ShimRecord.of(sample)
        cut = len(sample.tokens) - sample.response_length
        response = sample.tokens[cut:] if sample.response_length else []
        line: dict[str, Any] = {
            "session_id": sample.session_id, "group": sample.group_index, "index": sample.index,
            "kind": record.kind, "segment": record.segment, "segments": record.segments,
            "status": getattr(sample.status, "value", str(sample.status)),
            "prompt_tokens": len(sample.tokens) - sample.response_length,
            "response_tokens": sample.response_length, "trained_tokens": sum(sample.loss_mask),
            "loss_mask_runs": _runs(sample.loss_mask), "raw_reward": raw[position],
            "advantage": advantages[position], "failure": record.failure, "tokens": sample.tokens,
            "loss_mask": sample.loss_mask, "rollout_log_probs": sample.rollout_log_probs,
        }
        if decode is not None and not sample.remove_sample:
            line["response_pieces"] = _pieces(response, sample.loss_mask, decode)
        lines.append(line)
    return lines


def _pieces(response: Sequence[int], mask: Sequence[int], decode: Any) -> list[list[Any]]:
    """The response as ``[[loss mask bit, text], ...]``: consecutive tokens of one bit decoded together."""
    pieces: list[list[Any]] = []
    start = 0
    for end in range(1, len(response) + 1):
        if end == len(response) or mask[end] != mask[start]:
            pieces.append([int(mask[start]), str(decode(list(response[start:end])))])
            start = end
    return pieces


def write_samples(out_dir: Path, samples: Sequence[Any], args: Any, decode: Any = None) -> list[float]:
    """The reward hook over the step's samples, as slime calls it; ``samples.jsonl``; the advantages."""
    from agentcore_slime.rollout.rewards import normalize_episode_rewards

    raw, advantages = normalize_episode_rewards(args, list(samples)) if samples else ([], [])
    write_whole(out_dir / SAMPLES_FILE,
                "".join(json.dumps(line) + "\n" for line in sample_lines(samples, raw, advantages, decode)))
    return list(advantages)
