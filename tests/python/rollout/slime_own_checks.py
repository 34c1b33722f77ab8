"""slime's own code over the rollout's samples: run by test_slime_own_checks.py with a python
that has torch, against a slime checkout (``TOOLKIT_SLIME_SRC``), never imported by pytest.

    python slime_own_checks.py <slime checkout> <samples.pickle>

The pickle holds plain data (lists, numpy arrays): each sample's fields, and for an episode's
samples the engine's calls as the gateway recorded them (prompt, completion, logprobs, the
routed-experts start and the base64 the engine sent). Nothing of slime is copied here: its
modules are imported from the checkout, and the two methods slime defines on classes that need
Ray or Megatron to build (``RolloutManager._convert_samples_to_train_data`` with
``_post_process_rewards``, the fa3c990 actor's ``fill_routing_replay``) are read from its source
with ``ast`` and run on a stand-in ``self``. Megatron's ``mpu`` is stood in (one rank: TP, CP and
DP sizes 1); RoutingReplay records on the CPU (its own ``record`` pins memory, which needs CUDA).

Prints one JSON object: each check's name -> "ok" or the error.
"""

from __future__ import annotations

import ast
import base64
import json
import pickle
import sys
import traceback
import types
from argparse import Namespace
from pathlib import Path
from typing import Any


def stub_megatron() -> None:
    sizes = {"world_size": 1, "rank": 0}
    mpu = types.ModuleType("megatron.core.mpu")
    for group in ("tensor_model_parallel", "context_parallel", "data_parallel", "pipeline_model_parallel"):
        for what, value in sizes.items():
            setattr(mpu, f"get_{group}_{what}", lambda *a, _v=value, **k: _v)
        setattr(mpu, f"get_{group}_group", lambda *a, **k: None)  # one rank: no collective runs
    transformer = types.ModuleType("megatron.core.transformer")
    block = types.ModuleType("megatron.core.transformer.transformer_block")
    block.get_num_layers_to_build = lambda config, vp_stage=None: config.num_layers  # type: ignore[attr-defined]
    layer = types.ModuleType("megatron.core.transformer.transformer_layer")
    layer.get_transformer_layer_offset = lambda config, vp_stage=None: 0  # type: ignore[attr-defined]
    core = types.ModuleType("megatron.core")
    core.mpu = mpu  # type: ignore[attr-defined]
    megatron = types.ModuleType("megatron")
    megatron.core = core  # type: ignore[attr-defined]
    sys.modules.update(
        {
            "megatron": megatron,
            "megatron.core": core,
            "megatron.core.mpu": mpu,
            "megatron.core.transformer": transformer,
            "megatron.core.transformer.transformer_block": block,
            "megatron.core.transformer.transformer_layer": layer,
        }
    )


def method_source(path: Path, cls: str, name: str) -> str:
    """The source of ``cls.name`` in ``path``, dedented to a module-level function."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return ast.unparse(item)
    raise LookupError(f"{cls}.{name} not in {path}")


def module_names(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    """Run the module-level definitions ``names`` of ``path`` into ``namespace``."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if getattr(node, "name", None) in names or set(targets) & set(names):
            exec(compile(ast.Module([node], []), str(path), "exec"), namespace)


def make_samples(Sample: Any, rows: list[dict[str, Any]]) -> list[Any]:
    samples = []
    for row in rows:
        fields = {k: v for k, v in row.items() if k not in ("calls", "status", "train_log_probs")}
        sample = Sample(**fields)
        sample.status = Sample.Status(row["status"])
        samples.append(sample)
    return samples


def check_decoding(slime: Path, Sample: Any, rows: list[dict[str, Any]], layout: dict[str, int]) -> str:
    """Each episode sample rebuilt as slime's own multi-turn rollout builds one (bridge tokens
    appended untrained, each call's completion with the engine's meta_info): its tokens, loss
    mask, log probs and, where slime decodes a start (v0.3.1 on), its routed experts equal ours.
    At fa3c990 (the whole array reshaped) the sample's full array is decoded as one answer."""
    import numpy as np

    honours_start = "routed_experts_start_len" in (slime / "slime/utils/types.py").read_text()
    args = Namespace(
        num_layers=layout["layers"], moe_router_topk=layout["topk"], sglang_speculative_algorithm=None
    )
    checked = 0
    for row in rows:
        calls = row["calls"]
        if not calls or (honours_start and calls[0]["start"] != 0):
            continue  # a zero-gradient sample, or a fork's segment (its first rows are held before it)
        sample = Sample(tokens=list(calls[0]["prompt"]))
        for number, call in enumerate(calls):
            bridge = call["prompt"][len(sample.tokens) :]
            if number:
                sample.append_response_tokens(args, tokens=bridge, trainable=False)
            meta: dict[str, Any] = {"finish_reason": {"type": "stop"}}
            if honours_start:
                meta.update(routed_experts=call["b64"], routed_experts_start_len=call["start"])
            elif number == len(calls) - 1:
                meta["routed_experts"] = base64.b64encode(
                    np.ascontiguousarray(row["rollout_routed_experts"])
                ).decode()
            sample.append_response_tokens(
                args, tokens=call["completion"], log_probs=call["logprobs"], trainable=True, meta_info=meta
            )
        assert sample.tokens == row["tokens"] and sample.response_length == row["response_length"]
        assert list(sample.loss_mask) == row["loss_mask"]
        assert list(sample.rollout_log_probs) == row["rollout_log_probs"]
        ours, theirs = row["rollout_routed_experts"], np.asarray(sample.rollout_routed_experts)
        assert theirs.dtype == ours.dtype and theirs.shape == ours.shape and (theirs == ours).all()
        checked += 1
    assert checked, "no sample decoded"
    return f"ok ({checked} samples, {'start honoured' if honours_start else 'whole array'})"


def train_data(slime: Path, samples: list[Any], args: Namespace) -> dict[str, Any]:
    """slime's ``RolloutManager._convert_samples_to_train_data`` then its tensorization."""
    import numpy as np
    import torch
    from slime.utils.types import Sample

    path = slime / "slime/ray/rollout.py"
    namespace: dict[str, Any] = {"Sample": Sample, "torch": torch, "np": np, "Any": Any}
    if "get_source" in path.read_text():  # v0.3.1 on: source_names (slime.utils.data imports ray)
        module_names(slime / "slime/utils/data.py", ("get_source",), namespace)
    module_names(
        path,
        ("_cpu_tensor", "_tensorize_rollout_data_for_training", "_ROLLOUT_DATA_TENSOR_DTYPES"),
        namespace,
    )
    for name in ("_post_process_rewards", "_convert_samples_to_train_data"):
        exec(method_source(path, "RolloutManager", name), namespace)
    manager = types.SimpleNamespace(args=args, custom_convert_samples_to_train_data_func=None)
    manager.custom_reward_post_process_func = None
    manager._post_process_rewards = lambda s: namespace["_post_process_rewards"](manager, s)
    data = namespace["_convert_samples_to_train_data"](manager, samples)
    namespace["_tensorize_rollout_data_for_training"](data)
    return data


def check_actor(slime: Path, data: dict[str, Any], layout: dict[str, int]) -> str:
    """The actor's check of every sample (rows == len(tokens) - 1) and its replay input."""
    import torch

    experts, tokens = data["rollout_routed_experts"], [torch.as_tensor(t) for t in data["tokens"]]
    cp_utils = slime / "slime/backends/megatron_utils/cp_utils.py"
    if "prepare_routed_experts_for_routing_replay" in cp_utils.read_text():  # v0.3.1 on
        from slime.backends.megatron_utils.cp_utils import prepare_routed_experts_for_routing_replay

        flat = prepare_routed_experts_for_routing_replay(
            experts, tokens, num_experts=layout["experts"], data_pad_size_multiplier=1,
            sequence_parallel=False, allgather_cp=False,
        )  # fmt: skip
    else:  # fa3c990: the assertion and padding live in the actor's fill_routing_replay
        from slime.backends.megatron_utils.cp_utils import slice_with_cp
        from slime.utils import routing_replay

        routing_replay.RoutingReplay.all_routing_replays = []
        replays = [routing_replay.RoutingReplay() for _ in range(layout["layers"])]
        for replay in replays:  # record on the CPU (slime pins memory: CUDA)
            replay.record = replay.top_indices_list.append
        namespace = {"torch": torch, "mpu": sys.modules["megatron.core.mpu"], "slice_with_cp": slice_with_cp}
        path = slime / "slime/backends/megatron_utils/actor.py"
        exec(method_source(path, "MegatronTrainRayActor", "fill_routing_replay"), namespace)
        batch = {"rollout_routed_experts": experts, "tokens": tokens}
        iterator = types.SimpleNamespace(
            reset=lambda: None, get_next=lambda keys: {k: batch[k] for k in keys}
        )
        config = types.SimpleNamespace(num_layers=layout["layers"], moe_layer_freq=1)
        actor = types.SimpleNamespace(
            args=Namespace(
                num_experts=layout["experts"], data_pad_size_multiplier=1, sequence_parallel=False
            ),
            model=[types.SimpleNamespace(module=types.SimpleNamespace(config=config))],
        )
        namespace["fill_routing_replay"](actor, [iterator], [1], {"rollout_routed_experts": experts})
        flat = torch.stack([r.top_indices_list[0] for r in replays], dim=1)
    ours = torch.cat([torch.as_tensor(e) for e in experts])
    rows = sum(len(t) for t in tokens)  # each sample's rows + the last token's pad row
    assert flat.shape[0] >= rows and (flat[: len(ours) + len(experts)].shape[1:] == ours.shape[1:])
    start = 0
    for sample_rows in experts:
        assert torch.equal(flat[start : start + len(sample_rows)], torch.as_tensor(sample_rows))
        start += len(sample_rows) + 1  # slime pads one row for the last token
    return f"ok ({len(experts)} samples, {flat.shape[0]} rows replayed)"


def call_positions(row: dict[str, Any]) -> list[tuple[int, float]]:
    """(response position, the engine's logprob) of every sampled token, from the calls alone
    (each call's completion sits at its prompt's end): the independent side of the TIS checks."""
    first = len(row["calls"][0]["prompt"])
    return [
        (len(call["prompt"]) - first + i, logprob)
        for call in row["calls"]
        for i, logprob in enumerate(call["logprobs"])
    ]


def check_importance_sampling(slime: Path, rows: list[dict[str, Any]], total: list[int]) -> str:
    """Each importance-sampling flag's slime function over the samples' ``rollout_log_probs`` and
    loss masks, against the same quantity computed from the engine's logprobs in the calls."""
    import math

    import torch
    from slime.backends.megatron_utils.loss import icepop_function, vanilla_tis_function
    from slime.utils.ppo_utils import compute_opsm_mask

    sys.path.insert(0, str(slime / "examples" / "train_infer_mismatch_helper"))
    import mis  # the --custom-tis-function-path example: compute_mis_weights_with_cp

    episodes = [row for row in rows if row["calls"]]
    train = [torch.tensor(row["train_log_probs"]) for row in episodes]
    rollout = [torch.tensor(row["rollout_log_probs"]) for row in episodes]
    masks = [torch.tensor(row["loss_mask"]) for row in episodes]
    sampled = [call_positions(row) for row in episodes]
    for row, positions in zip(episodes, sampled, strict=True):  # --use-rollout-logprobs reads these
        assert sorted(p for p, _ in positions) == [i for i, m in enumerate(row["loss_mask"]) if m]
        assert all(row["rollout_log_probs"][p] == lp for p, lp in positions)

    def ratios(i: int) -> list[tuple[int, float]]:
        return [(p, float(train[i][p]) - lp) for p, lp in sampled[i]]

    seq_kls = [-sum(r for _, r in ratios(i)) / len(ratios(i)) for i in range(len(episodes))]
    # the median: OPSM masks some sequences and keeps others
    args = Namespace(tis_clip=1.5, tis_clip_low=0.7, opsm_delta=sorted(seq_kls)[len(seq_kls) // 2])
    every = [math.exp(r) for i in range(len(episodes)) for _, r in ratios(i)]
    assert min(every) < 0.7 and max(every) > 1.5 and any(0.7 <= r <= 1.5 for r in every)  # both clips bite
    ones = torch.ones(sum(len(t) for t in train), dtype=torch.float64)
    for function, keep in ((vanilla_tis_function, "clamp"), (icepop_function, "zero")):
        weights, out_masks, _ = function(
            args, pg_loss=ones, train_log_probs=train, rollout_log_probs=rollout, loss_masks=masks
        )
        assert all(torch.equal(a, b) for a, b in zip(out_masks, masks, strict=True))
        start = 0
        for i in range(len(episodes)):
            for position, log_ratio in ratios(i):
                r = math.exp(log_ratio)
                want = min(max(r, 0.7), 1.5) if keep == "clamp" else (r if 0.7 <= r <= 1.5 else 0.0)
                assert math.isclose(float(weights[start + position]), want, rel_tol=1e-5), (
                    function,
                    i,
                    position,
                )
            start += len(train[i])
    advantages = [torch.full_like(t, -1.0) for t in train]
    opsm, _ = compute_opsm_mask(args, train, rollout, advantages, masks)
    start, kept = 0, set()
    for i in range(len(episodes)):
        want = 0.0 if seq_kls[i] > args.opsm_delta else 1.0
        assert torch.all(opsm[start : start + len(train[i])] == want)
        kept.add(want)
        start += len(train[i])
    assert kept == {0.0, 1.0}
    levels = {"token": None, "sequence": sum, "geometric": lambda v: sum(v) / len(v)}
    for level, reduce in levels.items():
        mis_args = Namespace(
            use_tis=True, use_rs=False, tis_level=level, tis_mode="truncate", tis_upper_bound=1.5,
            tis_lower_bound=None, rs_lower_bound=None, rs_upper_bound=None, tis_batch_normalize=False,
        )  # fmt: skip
        weights, _, metrics = mis.compute_mis_weights_with_cp(
            mis_args, pg_loss=ones, train_log_probs=train, rollout_log_probs=rollout, loss_masks=masks,
            total_lengths=[total[i] for i in range(len(episodes))], response_lengths=[len(t) for t in train],
        )  # fmt: skip
        start = 0
        for i in range(len(episodes)):
            values = [r for _, r in ratios(i)]
            for position, log_ratio in ratios(i):
                want = min(math.exp(log_ratio if reduce is None else reduce(values)), 1.5)
                assert math.isclose(float(weights[start + position]), want, rel_tol=1e-5), (level, i)
            masked = [p for p in range(len(train[i])) if p not in dict(ratios(i))]
            assert all(float(weights[start + p]) == 0.0 for p in masked)  # truncate zeroes masked tokens
            engine = [lp for _, lp in sampled[i]]
            assert math.isclose(
                float(metrics["mis_rollout_log_ppl"][start]), -sum(engine) / len(engine), rel_tol=1e-5
            )
            start += len(train[i])
    return f"ok ({len(episodes)} samples, {sum(len(s) for s in sampled)} sampled tokens)"


def main() -> None:
    slime, data_path = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(slime))
    stub_megatron()
    from slime.utils.types import Sample

    payload = pickle.loads(data_path.read_bytes())
    rows, layout = payload["samples"], payload["layout"]
    results: dict[str, str] = {}

    def run(name: str, check: Any) -> Any:
        try:
            value = check()
            results[name] = value if isinstance(value, str) else "ok"
            return value
        except Exception:  # reported, not raised: every check runs
            results[name] = traceback.format_exc(limit=4)
            return None

    run("sample_decoding", lambda: check_decoding(slime, Sample, rows, layout))
    args = Namespace(
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True, reward_key=None,
        n_samples_per_prompt=payload["n_samples_per_prompt"], rollout_batch_size=1, rollout_top_p=1.0,
    )  # fmt: skip
    data = run("train_data", lambda: train_data(slime, make_samples(Sample, rows), args))

    def converted() -> str:
        assert data is not None and len(data["rollout_routed_experts"]) == len(rows)
        assert all(t.dtype.is_floating_point is False for t in data["rollout_routed_experts"])
        return f"ok (rollout_routed_experts for all {len(rows)} samples)"

    run("train_data_has_routing", converted)
    if data is not None:
        run("actor", lambda: check_actor(slime, data, layout))
    totals = [len(row["tokens"]) for row in rows if row["calls"]]
    run("importance_sampling", lambda: check_importance_sampling(slime, rows, totals))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
