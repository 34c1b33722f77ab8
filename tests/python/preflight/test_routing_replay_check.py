"""Rollout routing replay refused before anything starts when the model cannot give it.

bin/train's blocking checks (and bin/doctor's table) read config.json: a dense model has no
routing to replay, and a top-k other than config.json's would not fit slime's rows. slime
itself would stop only after the first rollout (its actor: ``rollout_routed_experts is
required ...``, or a reshape error).
"""

from __future__ import annotations

from agentcore_slime.preflight.gate import blocking_checks
from agentcore_slime.preflight.report import Status
from agentcore_slime.preflight.routing import check_routing_replay
from fakes.doctor_helpers import MakeContext, by_name

REPLAY = {"--use-rollout-routing-replay": []}
QWEN3_30B_A3B = {"num_hidden_layers": 48, "num_experts": 128, "num_experts_per_tok": 8}


def test_not_asked_for_nothing_is_checked() -> None:
    assert check_routing_replay({}, {"--use-routing-replay": []}) == []


def test_a_qwen3_30b_a3b_shaped_model_passes_with_its_cost_and_the_cheaper_choice() -> None:
    (result,) = check_routing_replay(QWEN3_30B_A3B, {**REPLAY, "--moe-router-topk": ["8"]})
    assert result.status is Status.PASS
    assert "1,536 bytes per token" in result.found and "--use-routing-replay" in result.found


def test_a_dense_model_is_refused() -> None:
    (result,) = check_routing_replay({"num_hidden_layers": 28}, REPLAY)
    assert result.status is Status.FAIL and "no experts" in result.found
    assert "remove --use-rollout-routing-replay" in result.fix


def test_deepseek_and_mixtral_expert_keys_count() -> None:
    for key in ("n_routed_experts", "num_local_experts"):
        config = {"num_hidden_layers": 4, key: 8, "num_experts_per_tok": 2}
        (result,) = check_routing_replay(config, {**REPLAY, "--moe-router-topk": ["2"]})
        assert result.status is Status.PASS, result.line()


def test_a_top_k_other_than_config_json_is_refused_with_the_fix() -> None:
    (result,) = check_routing_replay(QWEN3_30B_A3B, {**REPLAY, "--moe-router-topk": ["4"]})
    assert result.status is Status.FAIL and "num_experts_per_tok 8" in result.found
    assert result.fix == "add --moe-router-topk 8 to EXTRA_FLAGS"
    (unset,) = check_routing_replay(QWEN3_30B_A3B, REPLAY)  # Megatron's default: 2
    assert unset.status is Status.FAIL and "--moe-router-topk 2" in unset.found


def test_bin_train_refuses_it_for_a_dense_model_before_anything_starts(make_context: MakeContext) -> None:
    ctx = make_context(EXTRA_FLAGS="--norm-epsilon 1e-6 --use-rollout-routing-replay")  # Qwen2.5: dense
    result = by_name(blocking_checks(ctx.config, ctx.repo, [], "sync"))["model.routing-replay"]
    assert result.status is Status.FAIL and "a dense model" in result.found
    after_dashes = blocking_checks(ctx.config, ctx.repo, ["--use-rollout-routing-replay"], "sync")
    assert by_name(after_dashes)["model.routing-replay"].status is Status.FAIL
