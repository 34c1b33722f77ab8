"""runs/<EXP_ID>/env reproduces the configuration it records (issue 18, defect 13): single-
quoted values are literal (no ``${...}`` resolution, as in the shell) and a CR in a value is
kept. The end-to-end check through bin/train is tests/bats/train_rundir.bats (#13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentcore_slime.scripts.render import env_text
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.errors import ConfigError
from agentcore_slime.settings.validate import resolve
from hypothesis import given, settings
from hypothesis import strategies as st

BASE = {
    "EXP_ID": "rt",
    "S3_BUCKET": "my-bucket",
    "AGENT_URL": "http://127.0.0.1:8080",
    "MODEL_DIR": "/m",
    "DATA_PATH": "/d.jsonl",
    "MODEL_TYPE": "qwen2.5-3B",
}


def test_single_quoted_values_are_literal_and_others_resolve(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_bytes(b"A=1\nB='${A} ${NOPE} ${A:-d}'\nC=\"${A}\"\nD=${A}\n export E = '${A}'\nF='a\rb'\r\n")
    values = {key: entry.value for key, entry in read_env_file(path).items()}
    assert values == {"A": "1", "B": "${A} ${NOPE} ${A:-d}", "C": "1", "D": "1", "E": "${A}", "F": "a\rb"}


def test_a_reference_to_an_unknown_key_outside_single_quotes_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_text('A="${NOPE}"\n')
    with pytest.raises(ConfigError, match=r"refers to \$\{NOPE\}"):
        read_env_file(path)


_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(model_id=_TEXT, group=_TEXT)
def test_env_text_reads_back_to_the_same_configuration(tmp_path_factory, model_id: str, group: str) -> None:
    """Any printable or control text (CR, ``${...}``, quotes, backslashes) set with --set
    comes back from runs/<EXP_ID>/env as the same resolved value, and the file re-renders
    byte for byte."""
    if not model_id.strip() or not group.strip():
        return  # blank means unset: the default applies, which env_text then records
    tmp = tmp_path_factory.mktemp("rt")
    first = resolve({}, {**BASE, "MODEL_ID": model_id, "WANDB_GROUP": group}, tmp / "x.env", tmp / "runs")
    path = tmp / "env"
    path.write_text(env_text(first), encoding="utf-8", newline="")
    second = resolve(read_env_file(path), {}, path, tmp / "runs")
    assert second.values == first.values
    assert env_text(second) == env_text(first)
