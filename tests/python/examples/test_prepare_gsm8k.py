"""Tests of examples/prepare_gsm8k.py on small local JSONL and parquet files (no network)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import prepare_gsm8k
import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SAMPLE = EXAMPLES / "data" / "gsm8k_sample.jsonl"


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    ("solution", "final"),
    [
        ("3 + 4 = <<3+4=7>>7\n#### 7", "7"),
        ("lots of steps\n#### 1,250", "1250"),
        ("#### -3", "-3"),
        ("#### 2.5", "2.5"),
        ("#### +8", "8"),
        ("#### $40", "40"),
        ("first #### 1 then\n#### 2", "2"),
    ],
)
def test_extract_final_answer_reads_the_last_marker(solution: str, final: str) -> None:
    assert prepare_gsm8k.extract_final_answer(solution) == final


@pytest.mark.parametrize("solution", ["no marker 42", "#### ", "#### forty", "#### 3 apples", "#### 1.2.3"])
def test_extract_final_answer_rejects_non_numbers(solution: str) -> None:
    with pytest.raises(ValueError, match="####"):
        prepare_gsm8k.extract_final_answer(solution)


def test_jsonl_to_train_and_validation_rows(tmp_path: Path) -> None:
    validation = _write_jsonl(tmp_path / "test.jsonl", [{"question": " What is 2+2? ", "answer": "#### 4"}])
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--validation", str(validation),
                               "--out-dir", str(tmp_path / "out")]) == 0
    train = _read_jsonl(tmp_path / "out" / "train.jsonl")
    raw = _read_jsonl(SAMPLE)
    assert len(train) == len(raw)
    for row, source in zip(train, raw, strict=True):
        assert row == {"prompt": source["question"],
                       "metadata": {"prompt": source["question"],
                                    "answer": source["answer"].rsplit("####", 1)[1].strip().replace(",", "")}}
    assert _read_jsonl(tmp_path / "out" / "validation.jsonl") == [
        {"prompt": "What is 2+2?", "metadata": {"prompt": "What is 2+2?", "answer": "4"}}
    ]


def test_limit_keeps_the_first_rows_of_each_split(tmp_path: Path) -> None:
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--validation", str(SAMPLE), "--limit", "3",
                               "--validation-limit", "2", "--out-dir", str(tmp_path)]) == 0
    raw = _read_jsonl(SAMPLE)
    assert [r["prompt"] for r in _read_jsonl(tmp_path / "train.jsonl")] == [r["question"] for r in raw[:3]]
    assert len(_read_jsonl(tmp_path / "validation.jsonl")) == 2


def test_parquet_input(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = _read_jsonl(SAMPLE)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    argv = ["--train", str(tmp_path / "train.parquet"), "--out-dir", str(tmp_path / "o")]
    assert prepare_gsm8k.main(argv) == 0
    out = _read_jsonl(tmp_path / "o" / "train.jsonl")
    assert [r["metadata"]["answer"] for r in out] == ["216", "37", "210", "27", "870", "116", "143", "16"]
    assert not (tmp_path / "o" / "validation.jsonl").exists()


def test_unparseable_row_is_a_clear_error_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "q1", "answer": "#### 1"},
                                                {"question": "q2", "answer": "the answer is 2"}])
    assert prepare_gsm8k.main(["--train", str(bad), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"prepare_gsm8k.py: {bad}:2: answer has no '#### <number>' final line" in err
    assert "--skip-invalid" in err
    assert not (tmp_path / "out").exists()


def test_skip_invalid_drops_bad_rows(tmp_path: Path) -> None:
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "q1", "answer": "x"},
                                                {"question": "q2", "answer": "#### 2"}])
    assert prepare_gsm8k.main(["--train", str(bad), "--skip-invalid", "--out-dir", str(tmp_path)]) == 0
    assert [r["metadata"]["answer"] for r in _read_jsonl(tmp_path / "train.jsonl")] == ["2"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q"}\n', "row has no 'answer'"),
        ('["q", "#### 1"]\n', "row is a list"),
        ('{"question": "", "answer": "#### 1"}\n', "'question' must be a non-empty string"),
        ('{"question": "q", "answer": 7}\n', "'answer' must be a string"),
        ("{not json\n", "not valid JSON"),
        ("\n\n", "no valid rows"),
    ],
)
def test_malformed_input_messages(tmp_path: Path, capsys, content: str, message: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(content, encoding="utf-8")
    assert prepare_gsm8k.main(["--train", str(path), "--out-dir", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_missing_file_and_unknown_suffix(tmp_path: Path, capsys) -> None:
    assert prepare_gsm8k.main(["--train", str(tmp_path / "nope.jsonl"), "--out-dir", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    csv = tmp_path / "x.csv"
    csv.write_text("question,answer\n", encoding="utf-8")
    assert prepare_gsm8k.main(["--train", str(csv), "--out-dir", str(tmp_path)]) == 2
    assert "give a .jsonl or .parquet file" in capsys.readouterr().err


def test_existing_output_is_kept_unless_force(tmp_path: Path, capsys) -> None:
    target = tmp_path / "train.jsonl"
    target.write_text("my edits\n", encoding="utf-8")
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--out-dir", str(tmp_path)]) == 2
    assert "already exist" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "my edits\n"
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--out-dir", str(tmp_path), "--force"]) == 0
    assert len(_read_jsonl(target)) == 8


def test_hub_without_datasets_library_says_how_to_fix(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    assert prepare_gsm8k.main(["--hub", "--out-dir", str(tmp_path)]) == 2
    assert "pip install datasets" in capsys.readouterr().err


def test_hub_path_uses_train_and_test_splits(tmp_path: Path, monkeypatch) -> None:
    """The `datasets` call is replaced by a stand-in returning rows, as load_dataset's splits would."""
    calls: list[tuple] = []

    class FakeDatasets:
        @staticmethod
        def load_dataset(name: str, config: str, split: str) -> list[dict]:
            calls.append((name, config, split))
            return [{"question": f"{split} q", "answer": "#### 5"}]

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    assert prepare_gsm8k.main(["--hub", "--out-dir", str(tmp_path)]) == 0
    assert calls == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    assert _read_jsonl(tmp_path / "validation.jsonl")[0]["prompt"] == "test q"


def test_usage_error_exits_2() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLES / "prepare_gsm8k.py"), "--out-dir", "x"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "one of the arguments --train --hub is required" in proc.stderr


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_out_dir_that_is_a_file_is_a_clear_error(tmp_path: Path, capsys, force: list[str]) -> None:
    """Issue 18, defect 16: `--out-dir <an existing file> --force` ended in a FileExistsError
    traceback. The file is not touched, with or without --force."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("mine\n", encoding="utf-8")
    for out_dir in (blocker, blocker / "sub"):
        assert prepare_gsm8k.main(["--train", str(SAMPLE), "--out-dir", str(out_dir), *force]) == 2
        err = capsys.readouterr().err
        assert f"{blocker} exists and is not a directory (choose a directory for --out-dir" in err
        assert "Traceback" not in err
    assert blocker.read_text(encoding="utf-8") == "mine\n"


def test_out_dir_through_a_dangling_link_or_an_output_that_is_a_directory(tmp_path: Path, capsys) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    dangling = tmp_path / "dangling"
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--out-dir", str(dangling), "--force"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    (tmp_path / "out" / "train.jsonl").mkdir(parents=True)
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--out-dir", str(tmp_path / "out"), "--force"]) == 2
    assert f"{tmp_path / 'out' / 'train.jsonl'} is a directory" in capsys.readouterr().err


def test_out_dir_that_cannot_be_written_is_a_clear_error(tmp_path: Path, capsys, monkeypatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(prepare_gsm8k.tempfile, "mkstemp", refuse)
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path / 'out' / 'train.jsonl'}: Permission denied (check that --out-dir" in err


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_get_the_mode_the_umask_gives(tmp_path: Path, umask: int, mode: int) -> None:
    """Not the 0600 of the temporary file they are written to (other users of a shared node
    and containers running as another uid read the data)."""
    import os

    old = os.umask(umask)
    try:
        assert prepare_gsm8k.main(["--train", str(SAMPLE), "--validation", str(SAMPLE),
                                   "--out-dir", str(tmp_path / "out")]) == 0
    finally:
        os.umask(old)
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / "out" / name).stat().st_mode & 0o777 == mode


def test_force_without_validation_removes_the_stale_validation_file(tmp_path: Path, capsys, caplog) -> None:
    out = tmp_path / "out"
    args = ["--train", str(SAMPLE), "--out-dir", str(out)]
    assert prepare_gsm8k.main([*args, "--validation", str(SAMPLE)]) == 0
    # without --force, an earlier validation.jsonl alone is reason enough to stop
    (out / "train.jsonl").unlink()
    assert prepare_gsm8k.main(args) == 2
    assert f"{out / 'validation.jsonl'} already exist(s)" in capsys.readouterr().err
    assert prepare_gsm8k.main([*args, "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl"]
    assert f"removed {out / 'validation.jsonl'}: it came from an earlier run" in caplog.text


def test_skip_invalid_warnings_do_not_suggest_skip_invalid(tmp_path: Path, caplog) -> None:
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "q1", "answer": "x"},
                                                {"question": "q2", "answer": "#### 2"}])
    assert prepare_gsm8k.main(["--train", str(bad), "--skip-invalid", "--out-dir", str(tmp_path)]) == 0
    assert f"skipped {bad}:1: answer has no '#### <number>' final line" in caplog.messages
    assert "--skip-invalid" not in caplog.text
