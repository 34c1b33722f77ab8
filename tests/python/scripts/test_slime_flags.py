"""Every flag a golden render passes exists at the pinned commits and gets a value it accepts.

slime parses Megatron's and its own flags with ``ignore_unknown_args=True`` and SGLang's with
``parse_known_args`` (slime ``slime/utils/arguments.py:1525-1568`` at fa3c990): a misspelt or
removed flag is silently ignored, so this table is the only protection. Each entry was read
at slime ``fa3c990``, Megatron-LM ``1dcf0da`` (``megatron/training/arguments.py``; flags
generated from config dataclasses by ``ArgumentGroupFactory``), SGLang 0.5.13
(``sglang/srt/server_args.py``, prefixed ``--sglang-`` by slime) and sglang-router 0.3.2
(``RouterArgs``, prefixed ``--router-``). A new flag in a render must be added here, after
reading it at the pinned commit.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden"
ARRAYS = (
    "CKPT_ARGS",
    "ROLLOUT_ARGS",
    "EVAL_ARGS",
    "PERF_ARGS",
    "GRPO_ARGS",
    "OPTIMIZER_ARGS",
    "SGLANG_ARGS",
    "MISC_ARGS",
    "TOOLKIT_ARGS",
    "EXTRA_ARGS",
)

Check = Callable[[list[str]], bool]


def _one(test: Callable[[str], object]) -> Check:
    def check(values: list[str]) -> bool:
        if len(values) != 1:
            return False
        try:
            return test(values[0]) is not False
        except ValueError:
            return False

    return check


def _choice(*options: str) -> Check:
    return _one(lambda v: v in options)


def FLAG(values: list[str]) -> bool:  # noqa: N802 (a check, named like the others)
    """store_true: no value."""
    return values == []


INT, FLOAT, STR = _one(int), _one(float), _one(str)
PATH = _one(lambda v: v.startswith("/"))
DOTTED = _one(lambda v: re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", v) is not None)


def PAIRS(values: list[str]) -> bool:  # noqa: N802
    """nargs='+' read as NAME PATH pairs."""
    return len(values) >= 2 and len(values) % 2 == 0


# slime calls save_hf.format(rollout_id=...) (megatron_utils/actor.py:574-575 at fa3c990)
SAVE_HF = _one(lambda v: "{rollout_id}" in v and "{}" not in v)
# SGLang 0.5.13 names read at the pinned version (FunctionCallParser / ReasoningParser), a subset
TOOL_CALL_PARSERS = (
    "qwen", "qwen25", "qwen3_coder", "hermes", "llama3", "mistral", "deepseekv3", "glm45", "glm", "glm47",
    "deepseekv31", "kimi_k2", "minimax-m2", "mimo", "gemma4",
)
REASONING_PARSERS = (
    "qwen3", "qwen3-thinking", "deepseek-r1", "glm45", "kimi", "gpt-oss", "kimi_k2", "deepseek-v3", "minimax",
    "mimo",
)

#: flag -> (where it is defined at the pinned commit, what its value must look like)
KNOWN: dict[str, tuple[str, Check]] = {
    # slime slime/utils/arguments.py @ fa3c990
    "--hf-checkpoint": ("slime arguments.py:285 str", PATH),
    "--ref-load": ("slime arguments.py:808 str", PATH),
    "--load": ("slime arguments.py:819 str (reset_arg)", PATH),
    "--save": ("slime arguments.py:820 str (reset_arg)", PATH),
    "--save-interval": ("slime arguments.py:821 int (reset_arg)", INT),
    "--save-hf": ("slime arguments.py:834 str, formatted with rollout_id", SAVE_HF),
    "--prompt-data": ("slime arguments.py:611 str", PATH),
    "--input-key": ("slime arguments.py:625 str", STR),
    "--num-rollout": ("slime arguments.py:575 int", INT),
    "--rollout-batch-size": ("slime arguments.py:657 int, required", INT),
    "--n-samples-per-prompt": ("slime arguments.py:666 int", INT),
    "--global-batch-size": ("slime arguments.py:672 int (reset_arg of Megatron's)", INT),
    "--rollout-max-response-len": ("slime arguments.py:352 int", INT),
    "--rollout-temperature": ("slime arguments.py:321 float", FLOAT),
    "--rollout-top-k": ("slime arguments.py:330 int", INT),
    "--eval-prompt-data": ("slime arguments.py:760 nargs='+' name/path pairs (1654-1684)", PAIRS),
    "--eval-interval": ("slime arguments.py:757 int (reset_arg)", INT),
    "--eval-input-key": ("slime arguments.py:787 str", STR),
    "--n-samples-per-eval-prompt": ("slime arguments.py:791 int", INT),
    "--eval-temperature": ("slime arguments.py:796 float", FLOAT),
    "--eval-max-response-len": ("slime arguments.py:799 int", INT),
    "--use-dynamic-batch-size": ("slime arguments.py:713 store_true", FLAG),
    "--max-tokens-per-gpu": ("slime arguments.py:724 int", INT),
    "--advantage-estimator": (
        "slime arguments.py:908 choices",
        _choice("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"),
    ),
    "--use-kl-loss": ("slime arguments.py:948 store_true", FLAG),
    "--kl-loss-coef": ("slime arguments.py:951 float", FLOAT),
    "--kl-loss-type": ("slime arguments.py:901 choices", _choice("k1", "k2", "k3", "low_var_kl")),
    "--entropy-coef": ("slime arguments.py:968 float", FLOAT),
    "--eps-clip": ("slime arguments.py:866 float", FLOAT),
    "--eps-clip-high": ("slime arguments.py:867 float", FLOAT),
    "--lr": ("slime arguments.py:847 float (reset_arg)", FLOAT),
    "--num-gpus-per-node": ("slime arguments.py:63 int", INT),
    "--actor-num-nodes": ("slime arguments.py:40 int", INT),
    "--actor-num-gpus-per-node": ("slime arguments.py:42 int", INT),
    "--rollout-num-gpus": ("slime arguments.py:46 int", INT),
    "--rollout-num-gpus-per-engine": ("slime arguments.py:57 int", INT),
    "--colocate": ("slime arguments.py:72 store_true", FLAG),
    "--megatron-to-hf-mode": (
        "slime arguments.py:130 choices (removed after fa3c990)",
        _choice("raw", "bridge"),
    ),
    "--train-env-vars": (
        "slime arguments.py:118 type=json.loads",
        _one(lambda v: v.startswith("$(") or json.loads(v)),
    ),
    "--rollout-function-path": ("slime arguments.py:307 str, load_function", DOTTED),
    "--custom-reward-post-process-path": ("slime arguments.py:1337 str, load_function", DOTTED),
    "--custom-config-path": ("slime arguments.py:1497 str (reset_arg)", PATH),
    "--use-wandb": ("slime arguments.py:1130 store_true", FLAG),
    "--wandb-group": ("slime arguments.py:1147 str", STR),
    "--wandb-project": ("slime arguments.py:1148 str (reset_arg)", STR),
    "--wandb-dir": ("slime arguments.py:1139 str", STR),
    # Megatron-LM megatron/training/arguments.py @ 1dcf0da
    "--tensor-model-parallel-size": ("Megatron ModelParallelConfig.tensor_model_parallel_size int", INT),
    "--sequence-parallel": ("Megatron ModelParallelConfig.sequence_parallel bool", FLAG),
    "--optimizer": ("Megatron arguments.py:2081 str", _choice("adam", "sgd", "muon", "dist_muon")),
    "--lr-decay-style": (
        "Megatron SchedulerConfig.lr_decay_style Literal",
        _choice("constant", "linear", "cosine", "inverse-square-root", "WSD"),
    ),
    "--lr-decay-iters": ("Megatron SchedulerConfig.lr_decay_iters int", INT),
    "--weight-decay": ("Megatron arguments.py:1844 float", FLOAT),
    "--adam-beta1": ("Megatron arguments.py:1850 float", FLOAT),
    "--adam-beta2": ("Megatron arguments.py:1853 float", FLOAT),
    "--optimizer-cpu-offload": ("Megatron arguments.py:2084 store_true", FLAG),
    "--overlap-cpu-optimizer-d2h-h2d": ("Megatron arguments.py:2090 store_true", FLAG),
    "--use-precision-aware-optimizer": ("Megatron arguments.py:2873 store_true", FLAG),
    "--attention-dropout": ("Megatron TransformerConfig.attention_dropout float", FLOAT),
    "--hidden-dropout": ("Megatron TransformerConfig.hidden_dropout float", FLOAT),
    "--accumulate-allreduce-grads-in-fp32": ("Megatron arguments.py:2227 store_true", FLAG),
    "--attention-softmax-in-fp32": ("Megatron arguments.py:2225 store_true", FLAG),
    "--attention-backend": (
        "Megatron TransformerConfig.attention_backend AttnBackend[name]",
        _choice("flash", "fused", "unfused", "local", "auto"),
    ),
    # SGLang 0.5.13 ServerArgs, as --sglang-<flag> (slime sglang_utils/arguments.py:35-108 @ fa3c990)
    "--sglang-data-parallel-size": ("SGLang server_args.py:5522 --data-parallel-size int", INT),
    "--sglang-mem-fraction-static": ("SGLang server_args.py:4806 float", FLOAT),
    "--sglang-cuda-graph-max-bs": ("SGLang server_args.py:6507 int", INT),
    "--sglang-log-level": (
        "SGLang server_args.py:5166 str",
        _choice("debug", "info", "warning", "error", "critical"),
    ),
    "--sglang-tool-call-parser": (
        "SGLang server_args.py:5477 choices (FunctionCallParser)",
        _choice(*TOOL_CALL_PARSERS),
    ),
    "--sglang-reasoning-parser": (
        "SGLang server_args.py:5452 choices (ReasoningParser)",
        _choice(*REASONING_PARSERS),
    ),
    "--sglang-context-length": ("SGLang server_args.py:4572 human_readable_int", INT),
    # sglang-router 0.3.2 RouterArgs, as --router-<flag> (slime sglang_utils/arguments.py:31)
    "--router-policy": (
        "sglang_router router_args.py:246 choices",
        _choice("random", "round_robin", "cache_aware", "power_of_two", "manual"),
    ),
}

#: flags that look right and are silently ignored at the pinned commits
NOT_FLAGS = {
    "--use-dynamic-global-batch-size": "defined by no slime version (the seeds' runner passed it)",
    "--sglang-router-policy": "router options are --router-* (RouterArgs use_router_prefix=True)",
}


def _argv_groups(golden: Path) -> dict[str, list[str]]:
    """Evaluate the golden's configuration section in bash and return each array's words."""
    text = golden.read_text()
    config = text.split("# Configuration", 1)[1].split("\nwandb_args()", 1)[0].split("\n", 1)[1]
    dump = "".join(
        f'printf "%s\\0" {name} "${{#{name}[@]}}"; '
        f'if [[ -v {name} ]]; then printf "%s\\0" "${{{name}[@]}}"; fi; '
        for name in ARRAYS
    )
    out = subprocess.run(
        ["bash", "-c", config + "\n" + dump], capture_output=True, check=True
    ).stdout.decode()
    words = out.split("\0")[:-1]
    groups: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        name, count = words[i], int(words[i + 1])
        groups[name] = words[i + 2 : i + 2 + count]
        i += 2 + count
    return groups


def _runtime_flags(golden: Path) -> list[list[str]]:
    """The flags the script adds at run time (wandb, --load, --train-env-vars), as words."""
    text = golden.read_text()
    found = []
    for pattern in (
        r"WANDB_ARGS=\((.*)\)",
        r"WANDB_ARGS\+=\((.*)\)",
        r"RESUME_ARGS=\((.+)\)",
        r"TRAIN_ENV_ARGS=\((.+)\)",
    ):
        for match in re.finditer(pattern, text):
            words = re.findall(r'--[a-z0-9-]+|"[^"]*"', match.group(1))
            found.append(
                [
                    w.strip('"')
                    .replace("$save_dir", "/runs/x")
                    .replace("$WANDB_GROUP", "g")
                    .replace("$WANDB_PROJECT", "p")
                    for w in words
                ]
            )
    return found


def _split(argv: list[str]) -> list[tuple[str, list[str]]]:
    pairs: list[tuple[str, list[str]]] = []
    for word in argv:
        if word.startswith("--"):
            pairs.append((word, []))
        else:
            assert pairs, f"value {word!r} before any flag"
            pairs[-1][1].append(word)
    return pairs


# the slime scripts (bin/eval's eval.sh goldens, *.evaluate.sh, and join.sh run no slime)
GOLDENS = sorted(p for p in GOLDEN.glob("*.sh") if not p.name.endswith((".evaluate.sh", ".join.sh")))


@pytest.mark.parametrize("golden", GOLDENS, ids=[g.name for g in GOLDENS])
def test_every_flag_exists_at_the_pinned_commits_with_a_valid_value(golden: Path) -> None:
    groups = _argv_groups(golden)
    argv = [w for name in ARRAYS for w in groups.get(name, [])]
    lines = [*(_split(argv)), *(p for words in _runtime_flags(golden) for p in _split(words))]
    assert lines, golden
    for flag, values in lines:
        assert flag not in NOT_FLAGS, f"{golden.name}: {flag} is ignored by slime: {NOT_FLAGS[flag]}"
        assert flag in KNOWN, (
            f"{golden.name}: {flag} is not a known flag at the pinned commits (read it, then add it here)"
        )
        where, check = KNOWN[flag]
        assert check(values), f"{golden.name}: {flag} {values!r} does not fit {where}"


@pytest.mark.parametrize("golden", GOLDENS, ids=[g.name for g in GOLDENS])
def test_variant_rules_of_the_pinned_slime(golden: Path) -> None:
    groups = _argv_groups(golden)
    flags = dict(_split([w for name in ARRAYS for w in groups.get(name, [])]))
    entry = re.search(r"^SLIME_ENTRY=(\S+)", golden.read_text(), re.MULTILINE)
    assert entry
    if entry.group(1).endswith("train_async.py"):
        # train_async.py:11 asserts not colocate; without --colocate the placement group needs
        # --rollout-num-gpus (placement_group.py:100-117)
        assert "--colocate" not in flags and "--rollout-num-gpus" in flags
    else:
        assert "--colocate" in flags
    if flags["--num-rollout"] == ["0"]:
        # eval-only: train.py:35-36 evaluates once at rollout 0 only when --eval-interval is set,
        # and --eval-interval asserts eval datasets (arguments.py:1820-1821)
        assert "--eval-interval" in flags and "--eval-prompt-data" in flags
        assert "--save" not in flags and "--save-interval" not in flags
        # train_iters = num_rollout * rbs * n // gbs = 0 (megatron_utils/model.py:204-207); Megatron's
        # OptimizerParamScheduler asserts lr_decay_steps > 0 (optimizer_param_scheduler.py:136)
        assert int(flags.get("--lr-decay-iters", ["0"])[0]) >= 1
    if "--save-interval" in flags:
        assert "--save" in flags  # arguments.py:1823-1824
    if "--use-kl-loss" in flags:
        assert "--ref-load" in flags  # arguments.py:1751-1753: ref_load must exist
    if "--use-dynamic-batch-size" in flags:
        assert "--max-tokens-per-gpu" in flags  # arguments.py:1847-1848
    # --ref-load is the HF MODEL_DIR: at fa3c990 only bridge mode loads an HF dir
    # (checkpoint.py:130); later slimes have no such flag, so train.sh adds it at run time where
    # the slime has it (STACK_ARGS, test_slime_stacks.py)
    assert "--megatron-to-hf-mode" not in flags
    # one optimizer step per rollout: global_batch_size counts rollouts (dp_schedule.py:100-104)
    rbs, n = int(flags["--rollout-batch-size"][0]), int(flags["--n-samples-per-prompt"][0])
    assert flags["--global-batch-size"] == [str(rbs * n)]
    actor_gpus = int(flags["--actor-num-gpus-per-node"][0]) * int(flags["--actor-num-nodes"][0])
    dp = actor_gpus // int(flags["--tensor-model-parallel-size"][0])
    assert (rbs * n) % dp == 0  # Megatron num_microbatches_calculator.py:340


def test_the_check_rejects_a_misspelt_or_ignored_flag(tmp_path: Path) -> None:
    """The audit itself catches what slime would silently ignore."""
    text = (GOLDEN / "gsm8k.sh").read_text()
    bad = tmp_path / "bad.sh"
    bad.write_text(
        text.replace("EXTRA_ARGS=(\n", "EXTRA_ARGS=(\n  --sglang-router-policy\n  cache_aware\n", 1)
    )
    with pytest.raises(AssertionError, match="ignored by slime"):
        test_every_flag_exists_at_the_pinned_commits_with_a_valid_value(bad)
    bad.write_text(text.replace("  --rollout-temperature 1.0\n", "  --rollout-temprature 1.0\n", 1))
    with pytest.raises(AssertionError, match="not a known flag"):
        test_every_flag_exists_at_the_pinned_commits_with_a_valid_value(bad)
    bad.write_text(text.replace("--kl-loss-type low_var_kl", "--kl-loss-type kl", 1))
    with pytest.raises(AssertionError, match="does not fit"):
        test_every_flag_exists_at_the_pinned_commits_with_a_valid_value(bad)


def test_parser_choices_of_the_settings_are_names_sglang_accepts() -> None:
    """bin/train accepts a parser name only if both SGLang and the gateway know it (one table)."""
    from agentcore_slime.settings.schema import AUTO, KEYS_BY_NAME, NONE

    for name, sglang in (
        ("SGLANG_TOOL_CALL_PARSER", TOOL_CALL_PARSERS),
        ("SGLANG_REASONING_PARSER", REASONING_PARSERS),
    ):
        assert set(KEYS_BY_NAME[name].choices) - {NONE, AUTO} <= set(sglang), name  # auto: ours
