"""The slime stand-in matches slime at the pinned commit fa3c990 where the shim can notice.

Expected values were read in ``slime/utils/types.py:93-251``, ``slime/utils/eval_config.py:119-263``
and ``slime/rollout/base_types.py`` at fa3c990 (written out here, not imported: slime needs torch).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput, call_rollout_fn
from slime.utils.eval_config import EvalDatasetConfig, build_eval_dataset_configs
from slime.utils.types import Sample

SAMPLE_FIELDS = [
    ("group_index", None),
    ("index", None),
    ("rollout_id", None),
    ("prompt", ""),
    ("tokens", []),
    ("multimodal_inputs", None),
    ("multimodal_train_inputs", None),
    ("multimodal_train_input_id", None),
    ("apply_chat_template_kwargs", {}),
    ("response", ""),
    ("response_length", 0),
    ("label", None),
    ("reward", None),
    ("loss_mask", None),
    ("weight_versions", []),
    ("rollout_log_probs", None),
    ("rollout_top_p_token_ids", None),
    ("rollout_top_p_token_offsets", None),
    ("rollout_routed_experts", None),
    ("remove_sample", False),
    ("teacher_log_probs", None),
    ("status", Sample.Status.PENDING),
    ("metadata", {}),
    ("generate_function_path", None),
    ("custom_rm_path", None),
    ("train_metadata", None),
    ("session_id", None),
    ("non_generation_time", 0.0),
    ("spec_info", Sample.SpecInfo()),
    ("prefix_cache_info", Sample.PrefixCacheInfo()),
]

EVAL_FIELDS = (
    "name path rm_type custom_rm_path input_key label_key tool_key metadata_key multimodal_keys "
    "apply_chat_template apply_chat_template_kwargs n_samples_per_eval_prompt temperature top_p top_k "
    "max_response_len stop stop_token_ids min_new_tokens repetition_penalty skip_special_tokens "
    "no_stop_trim custom_generate_function_path app_service eval_task_timeout min_eval_samples "
    "eval_early_stop_remaining eval_early_stop_idle_timeout message_processor reward_model "
    "remote_environment metadata_overrides"
).split()


def test_sample_fields_defaults_and_order() -> None:
    sample = Sample()
    assert [f.name for f in dataclasses.fields(Sample)] == [name for name, _ in SAMPLE_FIELDS]
    assert [(name, getattr(sample, name)) for name, _ in SAMPLE_FIELDS] == SAMPLE_FIELDS
    assert {s.name: s.value for s in Sample.Status} == {
        "PENDING": "pending",
        "COMPLETED": "completed",
        "TRUNCATED": "truncated",
        "ABORTED": "aborted",
        "FAILED": "failed",
    }


def test_metrics_fields_every_sample_carries() -> None:
    """slime's rollout metrics read these from every returned sample (rollout.py:1467-1475)."""
    sample = Sample()
    assert sample.prefix_cache_info.prefix_cache_hit_rate == 0.0
    assert sample.spec_info.spec_accept_rate == 0.0 and sample.spec_info.spec_accept_length == 0.0


def test_to_dict_from_dict_round_trip() -> None:
    sample = Sample(index=3, tokens=[1, 2], response_length=1, status=Sample.Status.TRUNCATED, reward=1.0)
    data = sample.to_dict()
    assert data["status"] == "truncated" and data["prefix_cache_info"] == {
        "cached_tokens": 0,
        "total_prompt_tokens": 0,
    }
    again = Sample.from_dict({**data, "extra_key": 5})
    assert again.status is Sample.Status.TRUNCATED and again.tokens == [1, 2]
    assert again.extra_key == 5  # type: ignore[attr-defined]


def test_get_reward_value_reads_args_reward_key() -> None:
    assert Sample(reward=0.5).get_reward_value(SimpleNamespace(reward_key=None)) == 0.5
    assert Sample(reward={"acc": 1.0}).get_reward_value(SimpleNamespace(reward_key="acc")) == 1.0
    with pytest.raises(AttributeError):  # slime always defines args.reward_key
        Sample(reward=0.5).get_reward_value(SimpleNamespace())


def test_append_response_tokens_meta_info() -> None:
    sample = Sample(tokens=[1])
    meta = {
        "finish_reason": {"type": "length"},
        "weight_version": "7",
        "cached_tokens": 1,
        "prompt_tokens": 1,
    }
    sample.append_response_tokens(tokens=[2, 3], log_probs=[-0.1, -0.2], meta_info=meta, text="ab")
    assert sample.status is Sample.Status.TRUNCATED and sample.weight_versions == ["7"]
    assert sample.prefix_cache_info.cached_tokens == 1 and sample.response == "ab"
    sample.append_response_tokens(tokens=[4], trainable=False, meta_info={"finish_reason": {"type": "x"}})
    assert sample.loss_mask == [1, 1, 0] and sample.rollout_log_probs == [-0.1, -0.2, 0.0]
    assert sample.status is Sample.Status.TRUNCATED  # an unknown finish reason keeps the status
    with pytest.raises(ValueError, match="require rollout log probabilities"):
        sample.append_response_tokens(tokens=[5])
    with pytest.raises(ValueError, match="loss_mask length"):
        Sample(response_length=2, loss_mask=[1])._validate_response_metadata_lengths()


def test_eval_dataset_config_matches_fa3c990() -> None:
    config = EvalDatasetConfig(name="n", path="p")
    assert [f.name for f in dataclasses.fields(EvalDatasetConfig)] == EVAL_FIELDS
    assert all(getattr(config, f) is None for f in EVAL_FIELDS[2:-1])
    assert config.metadata_overrides == {} and config.cache_key == ("n", "p", None, None, None, None)
    assert EvalDatasetConfig(name="n", path="p", metadata_overrides=None).metadata_overrides == {}
    with pytest.raises(TypeError, match="metadata_overrides must be a mapping"):
        EvalDatasetConfig(name="n", path="p", metadata_overrides=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_eval_samples must be positive"):
        EvalDatasetConfig(name="n", path="p", min_eval_samples=0)
    with_rm = EvalDatasetConfig(name="n", path="p", rm_type="math", metadata_overrides={"k": 1})
    assert with_rm.inject_metadata("not a dict") == {"rm_type": "math", "k": 1}
    assert with_rm.inject_metadata({"a": 2, "k": 0}) == {"a": 2, "k": 1, "rm_type": "math"}


def test_build_eval_dataset_configs_resolution_order() -> None:
    args = SimpleNamespace(
        n_samples_per_eval_prompt=1,
        n_samples_per_prompt=8,
        eval_temperature=None,
        rollout_temperature=0.7,
        eval_input_key="prompt",
        input_key="input",
        metadata_key="metadata",
        tool_key="tools",
    )
    [first, second] = build_eval_dataset_configs(
        args, [{"name": "a", "path": "x", "temperature": 0.0}, {"name": "b", "path": "y"}], {"top_k": 5}
    )
    assert (first.temperature, second.temperature) == (0.0, 0.7)
    assert first.n_samples_per_eval_prompt == 1  # --n-samples-per-eval-prompt defaults to 1
    assert first.input_key == "prompt" and first.tool_key == "tools" and first.top_k == 5


def test_call_rollout_fn_wraps_legacy_returns() -> None:
    def fn(args: object, rollout_id: int, data_source: object, evaluation: bool = False) -> object:
        return {"d": {"rewards": [1.0]}} if evaluation else [[Sample()]]

    assert isinstance(call_rollout_fn(fn, None, 0, None, evaluation=True), RolloutFnEvalOutput)
    train = call_rollout_fn(fn, None, 0, None, evaluation=False)
    assert isinstance(train, RolloutFnTrainOutput) and train.metrics is None


def test_dynamic_filter_types_match_fa3c990() -> None:
    """``slime/rollout/filter_hub/base_types.py`` and ``dynamic_sampling_filters.py`` at fa3c990."""
    from slime.rollout.filter_hub.base_types import DynamicFilterOutput, MetricGatherer, call_dynamic_filter
    from slime.rollout.filter_hub.dynamic_sampling_filters import check_reward_nonzero_std

    assert [(f.name, f.default) for f in dataclasses.fields(DynamicFilterOutput)] == [
        ("keep", dataclasses.MISSING),
        ("reason", None),
    ]
    assert call_dynamic_filter(None, "args", []) == DynamicFilterOutput(keep=True)
    assert call_dynamic_filter(lambda *a: False, "args", []) == DynamicFilterOutput(keep=False)
    args = SimpleNamespace(reward_key=None)
    flat = [Sample(reward=1.0), Sample(reward=1.0)]
    assert check_reward_nonzero_std(args, flat) == DynamicFilterOutput(keep=False, reason="zero_std_1.0")
    assert check_reward_nonzero_std(args, [Sample(reward=1.0), Sample(reward=0.0)]).keep
    assert not check_reward_nonzero_std(args, [Sample(reward=0.5)]).keep  # torch: std of one is NaN
    gatherer = MetricGatherer()
    gatherer.on_dynamic_filter_drop("zero_std_1.0")
    gatherer.on_dynamic_filter_drop(None)
    assert gatherer.collect() == {"rollout/dynamic_filter/drop_zero_std_1.0": 1}


def test_post_process_rewards_matches_fa3c990() -> None:
    """``RolloutManager._post_process_rewards`` (``slime/ray/rollout.py:686-711``): positional
    groups of n_samples_per_prompt when the count is n * rollout_batch_size, else one row."""
    from slime.ray.rollout import RolloutManager

    args = SimpleNamespace(
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
        n_samples_per_prompt=2, rollout_batch_size=2, reward_key=None,
    )
    samples = [Sample(reward=r) for r in (1.0, 0.0, 1.0, 1.0)]
    raw, rewards = RolloutManager(args)._post_process_rewards(samples)
    assert raw == [1.0, 0.0, 1.0, 1.0]
    assert rewards == pytest.approx([0.70710, -0.70710, 0.0, 0.0], abs=1e-4)
    _, uneven = RolloutManager(args)._post_process_rewards(samples[:3])  # one row of 3
    assert uneven == pytest.approx([0.57735, -1.15470, 0.57735], abs=1e-4)
    args.advantage_estimator = "ppo"
    assert RolloutManager(args)._post_process_rewards(samples) == (raw, raw)
    hook = RolloutManager(args, lambda a, s: ([9.0], [8.0]))
    assert hook._post_process_rewards(samples) == ([9.0], [8.0])
