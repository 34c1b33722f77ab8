"""Env-file parsing and validation: python-dotenv syntax, restricted interpolation, types,
defaults, secrets, and the resolved env file that reproduces a run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from agentcore_slime.scripts.render import env_text
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.errors import ConfigError
from agentcore_slime.settings.schema import KEYS, KEYS_BY_NAME, Kind, parse_text
from agentcore_slime.settings.validate import missing_paths, parse_overrides, resolve
from dotenv import dotenv_values

BASE = """\
EXP_ID=exp-1
S3_BUCKET=my-bucket
AGENT_RUNTIME_ARN=arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/a-1
MODEL_DIR=/m
DATA_PATH=/d/train.jsonl
MODEL_TYPE=qwen2.5-3B
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.env"
    path.write_text(text)
    return path


def _resolve(tmp_path: Path, extra: str = "", overrides: dict[str, str] | None = None):
    path = _write(tmp_path, BASE + extra)
    return resolve(read_env_file(path), overrides or {}, path, tmp_path / "runs")


def test_defaults_are_the_seeds(tmp_path: Path) -> None:
    config = _resolve(tmp_path)
    assert config["NUM_GPUS"] == 8 and config["TP_SIZE"] == 2 and config["ROLLOUT_GPUS_PER_ENGINE"] == 2
    assert config["LR"] == 1e-6 and config["EPS_CLIP_HIGH"] == 0.28 and config["ADAM_BETA2"] == 0.98
    assert config["SLIME_DIR"] == "/root/slime" and config["MEGATRON_DIR"] == "/root/Megatron-LM"
    assert config["CUDA_HOME"] is None and config["GATEWAY_HOST"] is None
    assert config["MAX_POOL_CONNECTIONS"] == config["MAX_CONCURRENT"] == 100
    assert config["EVAL_MAX_RESPONSE_LEN"] == config["ROLLOUT_MAX_RESPONSE_LEN"] == 1024
    assert config["SAVE_DIR"] == str(tmp_path / "runs" / "exp-1" / "checkpoints")
    assert config["SAVE_HF"] is False and config["CUMULATIVE_TOKEN_MODE"] is True  # drift-free by default
    # chosen from MODEL_DIR (settings/model_family.py) by bin/train's check and the gateway
    assert config["SGLANG_TOOL_CALL_PARSER"] == config["SGLANG_REASONING_PARSER"] == "auto"


def test_dependent_defaults_follow_their_source(tmp_path: Path) -> None:
    config = _resolve(tmp_path, "MAX_CONCURRENT=7\nROLLOUT_MAX_RESPONSE_LEN=99\n")
    assert config["MAX_POOL_CONNECTIONS"] == 7 and config["EVAL_MAX_RESPONSE_LEN"] == 99


def test_dotenv_syntax_and_interpolation_of_earlier_keys(tmp_path: Path) -> None:
    extra = (
        "# a comment\n"
        "export WANDB_PROJECT='p # not a comment'\n"
        'WANDB_GROUP="${EXP_ID}-${MODEL_TYPE}"  # trailing comment\n'
        "MODEL_ID=${GATEWAY_HOST:-fallback}\n"
    )
    config = _resolve(tmp_path, extra)
    assert config["WANDB_PROJECT"] == "p # not a comment"
    assert config["WANDB_GROUP"] == "exp-1-qwen2.5-3B"
    assert config["MODEL_ID"] == "fallback"


def test_interpolation_never_reads_the_process_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MODEL_ROOT", "/from/env")
    with pytest.raises(ConfigError, match=r"refers to \$\{MODEL_ROOT\}, which is not a key set earlier"):
        _resolve(tmp_path, "MODEL_DIR=${MODEL_ROOT}/m\n".replace("MODEL_DIR", "VAL_DATA_PATH"))


def test_a_later_key_cannot_be_referenced(tmp_path: Path) -> None:
    path = _write(tmp_path, "WANDB_GROUP=${WANDB_PROJECT}\nWANDB_PROJECT=p\n" + BASE)
    with pytest.raises(ConfigError, match="not a key set earlier"):
        read_env_file(path)


def test_overrides_win_and_are_literal(tmp_path: Path) -> None:
    overrides = parse_overrides(["NUM_ROLLOUT=3", "MODEL_ID=${EXP_ID}", "NUM_ROLLOUT=4", "WANDB_PROJECT=a=b"])
    config = _resolve(tmp_path, "NUM_ROLLOUT=2\n", overrides)
    assert config["NUM_ROLLOUT"] == 4
    assert config["MODEL_ID"] == "${EXP_ID}"
    assert config["WANDB_PROJECT"] == "a=b"
    assert config.source["NUM_ROLLOUT"] == "--set"


@pytest.mark.parametrize("text", ["true", "True", "1", "false", "FALSE", "0"])
def test_booleans(tmp_path: Path, text: str) -> None:
    assert _resolve(tmp_path, f"SAVE_HF={text}\n")["SAVE_HF"] is (text.lower() in ("true", "1"))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("NUM_GPUS=8.0", "not an integer"),
        ("LR=nan", "not a finite number"),
        ("LR=0", "LR must be a number > 0"),
        ("WEIGHT_DECAY=-0.1", "WEIGHT_DECAY must be a number >= 0"),
        ("ADAM_BETA2=1.5", "ADAM_BETA2 must be a number > 0 and <= 1"),
        ("NUM_ROLLOUT=-1", "NUM_ROLLOUT must be an integer >= 1"),
        ("AWS_PROFILE=x", "AWS_PROFILE is a secret"),
        ("WANDB_ENTITY=x", "WANDB_ENTITY is a secret"),
        ("HF_TOKEN=x", "HF_TOKEN is a secret (not a key of the env file)"),
        ("OPENAI_API_KEY=x", "OPENAI_API_KEY is a secret"),
        ("S3_BUCKET=xn--bucket", "reserves"),
        ("S3_BUCKET=a..b", "must not contain"),
        ("S3_BUCKET=ab", "3-63 characters"),
        ("EXP_ID=.hidden", "not safe"),
        ("EXP_ID=a b", "not safe"),
        ("MODEL_TYPE=", "MODEL_TYPE is required"),
    ],
)
def test_invalid_values(tmp_path: Path, line: str, message: str) -> None:
    # appended lines override BASE keys by going through --set, so the file stays unique
    key, _, value = line.partition("=")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _resolve(tmp_path, overrides={key: value})


def test_every_gateway_process_gets_a_port(tmp_path: Path) -> None:
    """Process i of the gateway listens on GATEWAY_PORT + i (auto: up to 8 processes)."""
    for processes in ("8", "0"):
        with pytest.raises(ConfigError, match="would need ports up to 65537"):
            _resolve(tmp_path, overrides={"GATEWAY_PORT": "65530", "GATEWAY_PROCESSES": processes})
    config = _resolve(tmp_path, overrides={"GATEWAY_PORT": "65530", "GATEWAY_PROCESSES": "2"})
    assert config["GATEWAY_PROCESSES"] == 2
    assert _resolve(tmp_path, overrides={"GATEWAY_PORT": "0", "GATEWAY_PROCESSES": "64"})["GATEWAY_PORT"] == 0


def test_the_gateways_tls_certificate_and_key_go_together(tmp_path: Path) -> None:
    """Issue 43: HTTPS needs both; one alone is refused before anything starts."""
    for key in ("GATEWAY_TLS_CERT", "GATEWAY_TLS_KEY"):
        with pytest.raises(ConfigError, match=f"{key} is set without"):
            _resolve(tmp_path, overrides={key: str(tmp_path / "x.pem")})
    both = {"GATEWAY_TLS_CERT": str(tmp_path / "c.pem"), "GATEWAY_TLS_KEY": str(tmp_path / "k.pem")}
    assert _resolve(tmp_path, overrides=both)["GATEWAY_TLS_KEY"] == str(tmp_path / "k.pem")


def test_every_error_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(tmp_path, "NUMGPUS=4\n")
    assert info.value.what.endswith("unknown key NUMGPUS")
    assert info.value.how == "did you mean NUM_GPUS?"
    assert str(info.value) == f"{info.value.what} ({info.value.how})"


def test_unknown_key_without_a_close_match_points_at_the_docs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="see docs/launcher.md for the keys"):
        _resolve(tmp_path, "ZZZ=1\n")


def test_relative_paths_become_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _resolve(tmp_path, overrides={"DATA_PATH": "data/t.jsonl"})
    assert config["DATA_PATH"] == str(tmp_path / "data" / "t.jsonl")
    # missing, it is said from which folder it was taken, and that it is not the env file's
    [problem] = [str(p) for p in missing_paths(config) if str(p).startswith("DATA_PATH")]
    assert f"DATA_PATH was a relative path, taken from the current directory {tmp_path}" in problem
    assert "not the env file's folder" in problem


def test_missing_paths_lists_what_a_real_run_needs(tmp_path: Path) -> None:
    config = _resolve(tmp_path, f"SLIME_DIR={tmp_path}/slime\nVAL_DATA_PATH=/nope.jsonl\n")
    problems = [str(problem) for problem in missing_paths(config)]
    assert [p.split(":")[0] for p in problems] == [
        "MODEL_DIR",
        "DATA_PATH",
        "SLIME_DIR",
        "MODEL_TYPE",
        "MEGATRON_DIR",
        "VAL_DATA_PATH",
    ]
    assert (
        problems[3] == f"MODEL_TYPE: {tmp_path}/slime/scripts/models/qwen2.5-3B.sh does not exist "
        "(expected a slime model script)"
    )


def test_resolved_env_file_reproduces_the_config(tmp_path: Path) -> None:
    extra = (
        'EXTRA_FLAGS=\'--a "b c" --d "it\\\'s" --e \\\\x\'\nWANDB_GROUP="g\'q\\"x"\n'
        "CUDA_HOME=/usr/local/cuda-13.0\nLR=5e-7\n"
    )
    config = _resolve(tmp_path, extra)
    assert config["EXTRA_FLAGS"] == ["--a", "b c", "--d", "it's", "--e", "x"]  # shlex: \\x is x
    text = env_text(config)
    again = resolve(read_env_file(_write(tmp_path, text)), {}, tmp_path / "x.env", tmp_path / "runs")
    assert again.values == config.values
    # and python-dotenv itself reads it the same way (no interpolation surprises)
    raw = dotenv_values(stream=io.StringIO(text))
    assert raw["WANDB_GROUP"] == "g'q\"x"


def test_schema_is_consistent() -> None:
    assert len(KEYS_BY_NAME) == len(KEYS)
    for key in KEYS:
        assert key.name.isupper() and key.help
        if key.choices:
            assert key.kind is Kind.STR and key.default in (*key.choices, None)
        if key.required:
            assert key.default is None
        if key.default is not None:
            assert parse_text(key, key.default) is not None  # every declared default is valid
        if key.default_from:
            assert key.default is None and KEYS_BY_NAME[key.default_from].kind is key.kind


#: each file with generated blocks -> their kinds, in order (a block that moves, moves here too)
GENERATED_IN = {
    "docs/launcher.md": ["env"],
    "docs/rollout.md": ["rollout"],
    "docs/gateway.md": ["gateway", "names"],
    "python/agentcore_slime/settings/config.py": ["toolkit-fields"],
    "python/agentcore_slime/gateway/config.py": ["gateway-fields"],
}


@pytest.mark.parametrize("path", GENERATED_IN)
def test_generated_blocks_are_current(path: str) -> None:
    """The docs' tables and the config classes' fields are what the schema generates now (rewrite
    them all with ``PYTHONPATH=python python3 -m agentcore_slime.settings.schema --write README.md
    docs/*.md python/agentcore_slime/*/config.py``)."""
    import re

    from agentcore_slime.settings.schema import regenerate

    text = (Path(__file__).resolve().parents[3] / path).read_text(encoding="utf-8")
    assert re.findall(r"settings\.schema ([\w-]+) \(tests check it\)", text) == GENERATED_IN[path]
    assert regenerate(text) == text


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    """A file with several mistakes lists them all, one `<what> (<how>)` line each."""
    from agentcore_slime.settings.errors import ConfigErrors

    path = _write(tmp_path, "EXP_ID=exp-1\nNUM_GPU=8\nLR=fast\nS3_BUCKET=ab\nDATA_PATH=/d.jsonl\n")
    with pytest.raises(ConfigErrors) as info:
        resolve(read_env_file(path), {"TP_SIZE": "two"}, path, tmp_path / "runs")
    lines = str(info.value).splitlines()
    assert [e.what for e in info.value.errors] == [
        f"{path}:2: unknown key NUM_GPU",
        "TP_SIZE='two' (--set): not an integer",
        f"LR='fast' ({path}:3): not a number",
        "MODEL_DIR is required",
        "MODEL_TYPE is required",
        "S3_BUCKET='ab' is not a valid S3 bucket name",
        "set exactly one of AGENT_RUNTIME_ARN and AGENT_URL",
    ]
    assert len(lines) == 7 and all(line.endswith(")") for line in lines)
    assert info.value.how == "did you mean NUM_GPUS?"


def test_relations_between_keys_are_checked_together_after_the_values(tmp_path: Path) -> None:
    from agentcore_slime.settings.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as info:
        _resolve(tmp_path, overrides={"S3_BUCKET": "ab", "EXP_ID": "a b", "AGENT_URL": "http://x:1"})
    whats = [e.what for e in info.value.errors]
    assert whats[0].startswith("EXP_ID='a b' is not safe")
    assert whats[1].startswith("S3_BUCKET='ab' is not a valid S3 bucket name")
    assert whats[2].startswith("set exactly one of AGENT_RUNTIME_ARN and AGENT_URL (both are set)")


def test_one_pass_reports_file_syntax_values_and_relations_together(tmp_path: Path) -> None:
    """Parse errors, repeated keys, bad references, bad values and relations between keys of
    one file all come out of one run, one line each (the issue's five-mistake file gave three)."""

    text = (
        "EXP_ID=a b\nS3_BUCKET=AB\nMODEL_DIR=/m\nDATA_PATH=/d\nMODEL_TYPE=q\nAGENT_URL=http://x:1\n"
        'NUM_GPUS=x\nLR=-1\nNUM_GPUS=4\nWANDB_GROUP=${NOPE}\nMODEL_ID="open\n'
    )
    path = _write(tmp_path, text)
    problems: list[ConfigError] = []
    resolve(read_env_file(path, problems), {}, path, tmp_path / "runs", problems)
    assert [p.what.split(" ")[0] for p in problems] == [
        f"{path}:9:",  # NUM_GPUS set twice
        f"{path}:10:",  # ${NOPE}
        f"{path}:11:",  # unterminated quote
        "NUM_GPUS='x'",
        "LR=-1",
        "EXP_ID='a",
        "S3_BUCKET='AB'",
    ]
    assert "WANDB_GROUP" not in " ".join(p.what for p in problems[3:])  # its line is reported once


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("AGENT_ARN", "AGENT_RUNTIME_ARN"),
        ("num_gpus", "NUM_GPUS"),
        ("Num_Gpus", "NUM_GPUS"),
        ("NUMGPUS", "NUM_GPUS"),
        ("NUM_GPU", "NUM_GPUS"),
        ("TOTAL_NUM_GPUS", "NUM_GPUS"),
        ("agent_url", "AGENT_URL"),
        ("TEMPERATURE", "ROLLOUT_TEMPERATURE"),
    ],
)
def test_unknown_keys_get_case_and_word_aware_suggestions(tmp_path: Path, name: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(tmp_path, f"{name}=1\n")
    assert info.value.what.endswith(f"unknown key {name}")
    assert info.value.how == f"did you mean {suggestion}?"


def test_a_suggested_required_key_is_not_also_reported_missing(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace("MODEL_TYPE=", "model_type="))
    with pytest.raises(ConfigError) as info:
        resolve(read_env_file(path), {}, path, tmp_path / "runs")
    assert str(info.value) == f"{path}:6: unknown key model_type (did you mean MODEL_TYPE?)"


def test_a_byte_order_mark_is_tolerated(tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a BOM; it is not part of the first key's name."""
    path = tmp_path / "x.env"
    path.write_bytes(b"\xef\xbb\xbf" + BASE.encode())
    config = resolve(read_env_file(path), {}, path, tmp_path / "runs")
    assert config["EXP_ID"] == "exp-1"


def test_invisible_characters_in_a_key_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(tmp_path, "NUM\u200bGPUS=4\n")
    assert "contains the invisible or non-ASCII character(s) U+200B" in info.value.what
    assert "did you mean" not in str(info.value)


def test_an_empty_file_says_an_agent_key_is_needed(tmp_path: Path) -> None:
    from agentcore_slime.settings.errors import ConfigErrors

    path = _write(tmp_path, "# nothing yet\n")
    with pytest.raises(ConfigErrors) as info:
        resolve(read_env_file(path), {}, path, tmp_path / "runs")
    whats = [e.what for e in info.value.errors]
    assert whats[0] == f"{path} sets no keys"
    assert "set exactly one of AGENT_RUNTIME_ARN and AGENT_URL" in whats
    assert [w for w in whats if w.endswith("is required")] == [
        f"{key.name} is required" for key in KEYS if key.required
    ]


@pytest.mark.parametrize("text", ["1e23", "100000000000000000000000", "2147483648"])
def test_integers_must_be_plain_and_fit_32_bits(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"NUM_ROLLOUT.*(not an integer|too large)"):
        _resolve(tmp_path, overrides={"NUM_ROLLOUT": text})
    assert _resolve(tmp_path, overrides={"NUM_ROLLOUT": "2147483647"})["NUM_ROLLOUT"] == 2**31 - 1


def _flag_values(config, variant: str) -> dict[str, list[str]]:
    from agentcore_slime.scripts.render import flag_groups
    from agentcore_slime.settings.variants import VARIANTS

    lines = [line for _, group in flag_groups(config, Path("/run"), VARIANTS[variant]) for line in group]
    return {line[0]: line[1:] for line in lines}


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value * 2 if value else value + 1
    return f"{value}x"


#: flags that follow a key without being that key's alone (computed from several keys)
_COMPUTED_FLAGS = {
    ("--global-batch-size", "ROLLOUT_BATCH_SIZE"),
    ("--global-batch-size", "N_SAMPLES_PER_PROMPT"),
    ("--actor-num-gpus-per-node", "ROLLOUT_NUM_GPUS"),  # async: NUM_GPUS - ROLLOUT_NUM_GPUS
    ("--save-hf", "SAVE_DIR"),  # SAVE_DIR/hf/{rollout_id}
    ("--rollout-num-gpus", "NUM_NODES"),  # colocated on several nodes: NUM_NODES x NUM_GPUS
}


@pytest.mark.parametrize("variant", ["sync", "async"])
def test_flags_owned_by_keys_match_what_the_render_derives_from_each_key(
    tmp_path: Path, variant: str
) -> None:
    """Change each key alone and see which rendered flags change: each must be in
    FLAGS_OWNED_BY_KEYS under that key (so EXTRA_FLAGS cannot silently override it), and each
    table entry must really follow its key (wandb's two are rendered by the script at run time)."""
    from agentcore_slime.settings.validate import _FLAGS_OWNED_ELSEWHERE, FLAGS_OWNED_BY_KEYS

    every_optional = (
        "VAL_DATA_PATH=/v.jsonl\nSGLANG_CONTEXT_LENGTH=4096\nSGLANG_REASONING_PARSER=qwen3\n"
        "ROLLOUT_NUM_GPUS=4\nSAVE_HF=true\n"
    )
    config = _resolve(tmp_path, every_optional)
    base = _flag_values(config, variant)
    followed: set[tuple[str, str]] = set()
    for key in KEYS:
        if key.kind is Kind.WORDS:
            continue
        original = config.values[key.name]
        config.values[key.name] = _changed(original)
        changed = _flag_values(config, variant)
        config.values[key.name] = original
        for flag in set(base) | set(changed):
            if base.get(flag) != changed.get(flag):
                followed.add((flag, key.name))
    unowned = {
        (flag, key)
        for flag, key in followed - _COMPUTED_FLAGS
        if FLAGS_OWNED_BY_KEYS.get(flag) != key and flag not in _FLAGS_OWNED_ELSEWHERE
    }
    assert unowned == set()
    at_run_time = {"--wandb-project", "--wandb-group"}
    rendered_here = {flag for flag, _ in followed}
    if variant == "async":
        assert {(f, k) for f, k in FLAGS_OWNED_BY_KEYS.items() if f not in at_run_time} <= followed
    else:  # the colocated render has no --rollout-num-gpus
        assert set(FLAGS_OWNED_BY_KEYS) - at_run_time - {"--rollout-num-gpus"} <= rendered_here
    job = (Path(__file__).resolve().parents[3] / "templates" / "train.sh.j2").read_text()
    assert '--wandb-project "$WANDB_PROJECT"' in job and '--wandb-group "$WANDB_GROUP"' in job


def test_extra_flags_that_an_env_key_owns_are_named_with_the_key(tmp_path: Path) -> None:
    from agentcore_slime.settings.validate import slime_flag_problems

    problems = slime_flag_problems(["--num-rollout", "50", "--lr=1e-5", "--kl-loss-coef", "0.01"])
    assert [p.what for p in problems] == [
        "--num-rollout in EXTRA_FLAGS or after -- duplicates the env key NUM_ROLLOUT",
        "--lr in EXTRA_FLAGS or after -- duplicates the env key LR",
    ]
    assert problems[0].how.startswith("set NUM_ROLLOUT in the env file (or --set NUM_ROLLOUT=...)")


def test_agent_url_ending_in_invocations_is_refused_with_the_root(tmp_path: Path) -> None:
    """The local transport posts to <AGENT_URL>/invocations: a URL that names that path already
    made every episode post to /invocations/invocations (HTTP 501), found only by a rehearsal."""
    base = "".join(line for line in BASE.splitlines(keepends=True) if not line.startswith("AGENT_RUNTIME"))
    path = _write(tmp_path, base + "AGENT_URL=http://10.0.0.7:8080/invocations/\n")
    root = r"AGENT_URL=http://10\.0\.0\.7:8080\)"
    with pytest.raises(ConfigError, match=r"ends in /invocations.*" + root) as caught:
        resolve(read_env_file(path), {}, path, tmp_path / "runs")
    assert "/invocations/invocations" in str(caught.value)


def test_model_dir_naming_its_config_json_says_to_name_the_folder(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = _resolve(tmp_path, overrides={"MODEL_DIR": str(model / "config.json")})
    found = [str(p) for p in missing_paths(config) if "MODEL_DIR" in str(p)]
    assert found == [f"MODEL_DIR: {model}/config.json is a file, not the model's folder "
                     f"(name the folder that holds it: MODEL_DIR={model})"]
