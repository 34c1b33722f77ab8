"""Rollout routing replay: the flags bin/train refuses, and the rollout's own check of slime's
args (a hand-edited train.sh), as ``--rollout-top-p`` below 1 is refused in both places."""

from __future__ import annotations

import pytest
from agentcore_slime.errors import ConfigError
from agentcore_slime.settings.config import check_slime_args
from agentcore_slime.settings.validate import slime_flag_problems
from fakes.standins import make_args


def test_the_engine_flag_slime_owns_is_refused_with_the_slime_flag_to_use() -> None:
    (problem,) = slime_flag_problems(["--sglang-enable-return-routed-experts"])
    assert "--use-rollout-routing-replay" in str(problem)
    assert slime_flag_problems(["--use-rollout-routing-replay", "--use-routing-replay"]) == []


def test_the_rollout_refuses_replay_without_an_moe_shape() -> None:
    with pytest.raises(ConfigError, match="needs an MoE model"):
        check_slime_args(make_args(use_rollout_routing_replay=True, num_layers=28, moe_router_topk=None))
    check_slime_args(
        make_args(use_rollout_routing_replay=True, num_layers=48, moe_router_topk=8, num_experts=128)
    )
    check_slime_args(make_args(use_routing_replay=True))  # the trainer-side variant needs nothing
