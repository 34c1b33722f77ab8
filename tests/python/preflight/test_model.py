"""Model checks: config.json, tokenizer, and the model script (sourced by bash) against config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentcore_slime.preflight.model import check_model, compare, last_values, read_model_args
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import MakeContext, by_name


def test_the_known_trap_qwen25_32b_instruct_norm_epsilon_fails_with_the_fix(
    make_context: MakeContext,
) -> None:
    results = by_name(check_model(make_context()))
    eps = results["model.norm-epsilon"]
    assert eps.status is Status.FAIL
    assert "--norm-epsilon 1e-5" in eps.found and "config.json has 1e-6" in eps.found
    assert eps.fix.startswith("add --norm-epsilon 1e-6 to EXTRA_FLAGS")
    others = [r for name, r in results.items() if name != "model.norm-epsilon"]
    assert all(r.status is Status.PASS for r in others), [r.line() for r in others]


def test_the_fix_in_extra_flags_makes_every_model_check_pass(make_context: MakeContext) -> None:
    results = check_model(make_context(EXTRA_FLAGS="--norm-epsilon 1e-6"))
    assert [r.line() for r in results if r.status is not Status.PASS] == []
    assert "model.norm-epsilon" in by_name(results)


def test_flags_after_double_dash_count_too(make_context: MakeContext) -> None:
    results = by_name(check_model(make_context(slime_flags=["--norm-epsilon=1e-6"])))
    assert results["model.norm-epsilon"].status is Status.PASS


def test_the_base_model_config_passes(make_context: MakeContext, install: Path) -> None:
    results = check_model(make_context(MODEL_DIR=str(install / "hf" / "qwen2.5-32b")))
    assert all(r.status is Status.PASS for r in results), [r.line() for r in results]


def test_the_script_is_sourced_with_its_sibling_and_variables(
    make_context: MakeContext, install: Path
) -> None:
    ctx = make_context()
    words, error = read_model_args(ctx, install / "slime" / "scripts" / "models" / "qwen2.5-32B.sh")
    assert error == "" and words is not None
    flags = last_values(words)
    assert flags["--ffn-hidden-size"] == ["27648"]  # $((NHIDDEN * 27 / 5))
    assert flags["--num-query-groups"] == ["8"]  # $((NHEADS / 5))
    assert flags["--normalization"] == ["RMSNorm"]  # from the sourced sibling
    assert "--untie-embeddings-and-output-weights" in flags


@pytest.mark.parametrize(
    ("key", "value", "check", "fix"),
    [
        ("num_hidden_layers", 48, "model.num-layers", "add --num-layers 48"),
        ("hidden_size", 4096, "model.hidden-size", "add --hidden-size 4096"),
        ("intermediate_size", 13824, "model.ffn-hidden-size", "add --ffn-hidden-size 13824"),
        ("num_attention_heads", 32, "model.attention-heads", "add --num-attention-heads 32"),
        ("rope_theta", 10000.0, "model.rotary-base", "add --rotary-base 10000"),
        ("tie_word_embeddings", True, "model.tied-embeddings", "copy the model script"),
        ("num_key_value_heads", 4, "model.query-groups", "add --group-query-attention --num-query-groups 4"),
        ("vocab_size", 151936, "model.vocab-size", "add --vocab-size 151936"),
    ],
)
def test_each_mismatch_is_named_with_both_values_and_the_fix(
    make_context: MakeContext, install: Path, key: str, value: object, check: str, fix: str
) -> None:
    config = install / "hf" / "qwen2.5-32b" / "config.json"
    data = json.loads(config.read_text())
    data[key] = value
    config.write_text(json.dumps(data))
    results = by_name(check_model(make_context(MODEL_DIR=str(config.parent))))
    assert results[check].status is Status.FAIL, results[check].line()
    assert results[check].fix.startswith(fix)
    failing = [name for name, r in results.items() if r.status is Status.FAIL]
    assert failing == [check]


def test_another_model_than_model_type_is_one_fail_not_a_fix_per_flag(
    make_context: MakeContext, install: Path
) -> None:
    """A 3B's config.json (36 layers, hidden 2048) where the 32B script is named: one line that
    says MODEL_DIR is another model (before: a FAIL per value, each "add --num-layers 36 ...")."""
    config = install / "hf" / "qwen2.5-32b" / "config.json"
    data = json.loads(config.read_text())
    data.update(num_hidden_layers=36, hidden_size=2048, intermediate_size=11008, num_attention_heads=16)
    config.write_text(json.dumps(data))
    results = by_name(check_model(make_context(MODEL_DIR=str(config.parent))))
    failing = [name for name, r in results.items() if r.status is Status.FAIL]
    assert failing == ["model.shape"], [r.line() for r in results.values()]
    shape = results["model.shape"]
    assert shape.found.startswith("MODEL_DIR is not the model qwen2.5-32B.sh describes: config.json has 36")
    assert shape.fix.startswith("set MODEL_TYPE to the model script of this model (one with --num-layers 36")


def test_untied_config_without_the_untie_flag_fails() -> None:
    results = by_name(compare({"tie_word_embeddings": False}, ["--num-layers", "2"], "x.sh"))
    assert results["model.tied-embeddings"].status is Status.FAIL
    assert results["model.tied-embeddings"].fix == "add --untie-embeddings-and-output-weights to EXTRA_FLAGS"


def test_missing_flags_are_compared_at_megatron_defaults() -> None:
    """slime compares config.json with args; a flag the script leaves out has Megatron's default."""
    results = by_name(compare({"rms_norm_eps": 1e-5, "rope_theta": 10000.0}, [], "x.sh"))
    assert results["model.norm-epsilon"].status is Status.PASS
    assert results["model.rotary-base"].status is Status.PASS
    results = by_name(compare({"rms_norm_eps": 1e-6}, [], "x.sh"))
    assert results["model.norm-epsilon"].status is Status.FAIL


def test_multimodal_configs_are_read_from_text_config(make_context: MakeContext, install: Path) -> None:
    config = install / "hf" / "qwen2.5-32b" / "config.json"
    config.write_text(json.dumps({"model_type": "vl", "text_config": json.loads(config.read_text())}))
    results = check_model(make_context(MODEL_DIR=str(config.parent)))
    assert all(r.status is Status.PASS for r in results), [r.line() for r in results]


def test_missing_config_and_tokenizer_fail(make_context: MakeContext, tmp_path: Path) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    results = by_name(check_model(make_context(MODEL_DIR=str(empty))))
    assert (
        results["model.config"].status is Status.FAIL
        and "config.json does not exist" in results["model.config"].found
    )
    assert results["model.tokenizer"].status is Status.FAIL


def test_model_dir_naming_its_config_json_says_to_name_the_folder(
    make_context: MakeContext, install: Path
) -> None:
    """Not `.../config.json/config.json does not exist`: the folder to name instead."""
    config = Path(str(make_context().value("MODEL_DIR"))) / "config.json"
    result = by_name(check_model(make_context(MODEL_DIR=str(config))))["model.config"]
    assert result.status is Status.FAIL
    assert result.found == f"MODEL_DIR {config} is a file, not the model's folder (MODEL_DIR={config.parent})"


def test_a_failing_model_script_fails_with_train_sh_message(make_context: MakeContext) -> None:
    results = by_name(check_model(make_context(MODEL_TYPE="broken")))
    script = results["model.script"]
    assert script.status is Status.FAIL
    assert script.found.startswith("model script ") and "broken.sh failed with status" in script.found


def test_a_missing_model_script_fails(make_context: MakeContext) -> None:
    script = by_name(check_model(make_context(MODEL_TYPE="no-such-model")))["model.script"]
    assert script.status is Status.FAIL and "does not exist" in script.found
