"""Data checks: JSONL rows with a string prompt and a metadata object; prompt lengths."""

from __future__ import annotations

from pathlib import Path

from agentcore_slime.preflight.data import check_data
from agentcore_slime.preflight.report import Status
from fakes.doctor_helpers import MakeContext, by_name


def test_good_rows_pass_with_their_count(make_context: MakeContext, install: Path) -> None:
    results = by_name(check_data(make_context()))
    data = results["data.DATA_PATH"]
    assert data.status is Status.PASS and data.found.startswith("3 rows of ")  # the blank line is skipped
    assert results["data.DATA_PATH.length"].status is Status.PASS


def test_bad_rows_fail_with_the_count_and_the_first_ten_line_numbers(
    make_context: MakeContext, install: Path
) -> None:
    ctx = make_context(VAL_DATA_PATH=str(install / "data" / "bad.jsonl"))
    results = by_name(check_data(ctx))
    assert results["data.DATA_PATH"].status is Status.PASS
    val = results["data.VAL_DATA_PATH"]
    assert val.status is Status.FAIL
    assert "12 of 15 rows" in val.found
    assert "(lines 2, 3, 4, 5, 6, 8, 9, 10, 11, 12 ...;" in val.found
    assert "line 2: `metadata` is missing or not an object" in val.found
    assert '"prompt"' in val.fix and '"metadata"' in val.fix


def test_missing_and_empty_files_fail(make_context: MakeContext, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    results = by_name(
        check_data(make_context(DATA_PATH=str(empty), VAL_DATA_PATH=str(tmp_path / "nope.jsonl")))
    )
    assert (
        results["data.DATA_PATH"].status is Status.FAIL and "has no rows" in results["data.DATA_PATH"].found
    )
    assert results["data.VAL_DATA_PATH"].status is Status.FAIL
    assert "does not exist" in results["data.VAL_DATA_PATH"].found


def test_prompts_longer_than_the_context_budget_are_warned(make_context: MakeContext, tmp_path: Path) -> None:
    """Budget = SGLANG_CONTEXT_LENGTH - ROLLOUT_MAX_RESPONSE_LEN; lengths counted by the model
    directory's tokenizer.json (a small word-level fixture: one token per word)."""
    data = tmp_path / "long.jsonl"
    data.write_text(
        '{"prompt": "short", "metadata": {}}\n' + '{"prompt": "%s", "metadata": {}}\n' % ("word " * 501)
    )
    ctx = make_context(DATA_PATH=str(data), SGLANG_CONTEXT_LENGTH="600", ROLLOUT_MAX_RESPONSE_LEN="100")
    length = by_name(check_data(ctx))["data.DATA_PATH.length"]
    assert length.status is Status.WARN
    assert "1 prompts exceed the 500-token budget (tokenizer.json; lines 2)" in length.found
    assert "ROLLOUT_MAX_RESPONSE_LEN" in length.fix


def test_without_a_tokenizer_json_lengths_are_estimated(make_context: MakeContext, tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    data = tmp_path / "long.jsonl"
    data.write_text('{"prompt": "%s", "metadata": {}}\n' % ("x" * 3000))  # 1000 tokens at 3 bytes each
    ctx = make_context(DATA_PATH=str(data), MODEL_DIR=str(tmp_path / "model"), SGLANG_CONTEXT_LENGTH="1100")
    length = by_name(check_data(ctx))["data.DATA_PATH.length"]
    assert length.status is Status.WARN and "(estimated; lines 1)" in length.found


def test_the_budget_comes_from_config_json_when_sglang_context_length_is_unset(
    make_context: MakeContext, tmp_path: Path
) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text('{"prompt": "hi", "metadata": {}}\n')
    length = by_name(check_data(make_context(DATA_PATH=str(data))))["data.DATA_PATH.length"]
    assert "32768" not in length.found and "31744-token budget" in length.found  # 32768 - 1024


def test_a_byte_order_mark_is_named_with_the_way_to_remove_it(make_context: MakeContext, tmp_path: Path
                                                              ) -> None:
    """slime's reader skips a first line that starts with a BOM as bad JSON: say BOM, not JSON."""
    data = tmp_path / "bom.jsonl"
    data.write_bytes(b'\xef\xbb\xbf{"prompt": "a", "metadata": {}}\n{"prompt": "b", "metadata": {}}\n')
    result = by_name(check_data(make_context(DATA_PATH=str(data))))["data.DATA_PATH"]
    assert result.status is Status.FAIL
    assert "line 1: the file starts with a UTF-8 byte-order mark (BOM)" in result.found
    assert result.fix.startswith("save it as UTF-8 without a BOM: sed -i ")


def test_a_data_file_slime_does_not_read_by_its_name_fails(make_context: MakeContext, tmp_path: Path) -> None:
    """slime's read_file takes .jsonl and .parquet only, and raises for any other name."""
    data = tmp_path / "train.json"
    data.write_text('{"prompt": "a", "metadata": {}}\n')
    result = by_name(check_data(make_context(DATA_PATH=str(data))))["data.DATA_PATH"]
    assert result.status is Status.FAIL and "ends in .json" in result.found
    assert result.fix.endswith(str(tmp_path / "train.jsonl"))
