"""The parsers fit the model: per family a model directory (config.json, tokenizer_config.json
with the family's added tokens and a line of its chat template, written here as the published
models ship them), the parsers chosen when the env file leaves them unset, and a misfit refused
with the right names, by bin/train's blocking checks and bin/doctor's table (both run
``check_model``), and chosen the same way by the gateway at start.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.doctor.checks import run_checks as doctor_checks
from agentcore_slime.preflight.gate import blocking_checks
from agentcore_slime.preflight.model import check_model
from agentcore_slime.preflight.parsers import check_parsers
from agentcore_slime.preflight.report import Status
from agentcore_slime.settings.model_family import AUTO, model_fit
from fakes.doctor_helpers import MakeContext, by_name

QWEN_TOKENS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
DEEPSEEK_TOKENS = ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"]

#: family -> (config.json, added tokens, a piece of its chat template, name of the directory)
SHAPES: dict[str, tuple[dict[str, Any], list[str], str, str]] = {
    "Qwen2.5": (
        {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
        QWEN_TOKENS,
        "",
        "Qwen2.5-3B-Instruct",
    ),
    "Qwen3": ({"model_type": "qwen3"}, [*QWEN_TOKENS, "<think>", "</think>"], "enable_thinking", "Qwen3-4B"),
    "Qwen3-Coder": (
        {"model_type": "qwen3_moe"},
        QWEN_TOKENS,
        "<tool_call>\\n<function=' + tool_call.name + '>",
        "Qwen3-Coder-30B-A3B-Instruct",
    ),
    "Qwen3.5": (
        {"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text"}},
        QWEN_TOKENS,
        "<function=",
        "Qwen3.5-35B-A3B",
    ),
    "GLM-4.5": ({"model_type": "glm4_moe", "_name_or_path": "zai-org/GLM-4.5-Air"}, ["<arg_key>"], "", "glm"),
    "GLM-4.7": ({"model_type": "glm4_moe", "_name_or_path": "zai-org/GLM-4.7"}, ["<arg_key>"], "", "glm"),
    "GLM-5": ({"model_type": "glm_moe_dsa"}, ["<arg_key>"], "", "GLM-5"),
    "Kimi-K2": (
        {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]},
        ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>"],
        "",
        "Kimi-K2-Instruct",
    ),
    "MiniMax-M2": (
        {"model_type": "minimax_m2"},
        ["<minimax:tool_call>", "</minimax:tool_call>"],
        "",
        "MiniMax-M2",
    ),
    "Llama 3": (
        {"model_type": "llama"},
        ["<|start_header_id|>", "<|python_tag|>", "<|eom_id|>"],
        "",
        "Llama-3.1-8B",
    ),
    "DeepSeek-V3": (
        {"model_type": "deepseek_v3"},
        DEEPSEEK_TOKENS,
        "'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name']",
        "DeepSeek-V3-0324",
    ),
    "DeepSeek-V3.1": (
        {"model_type": "deepseek_v3"},
        DEEPSEEK_TOKENS,
        "{% if thinking %}<think>{% else %}</think>{% endif %}"
        "'<｜tool▁call▁begin｜>'+ tool['function']['name']",
        "my-v31-finetune",
    ),
    "MiMo": ({"model_type": "mimo", "architectures": ["MiMoForCausalLM"]}, QWEN_TOKENS, "", "MiMo-7B-RL"),
    "MiMo-V2": ({"model_type": "mimo_v2_flash"}, QWEN_TOKENS, "<function=", "MiMo-V2-Flash"),
    "gpt-oss": ({"model_type": "gpt_oss"}, ["<|start|>", "<|channel|>", "<|call|>"], "", "gpt-oss-20b"),
    "Gemma 4": (
        {"model_type": "gemma4", "text_config": {"model_type": "gemma4_text"}},
        [],
        "",
        "gemma-4-E4B-it",
    ),
}

#: family -> (tool-call parser chosen, reasoning parser chosen) when both are unset; a string
#: starting with "refused" is the start of the refusal's message
CHOSEN: dict[str, tuple[str | None, str | None]] = {
    "Qwen2.5": ("qwen", None),
    "Qwen3": ("qwen", "qwen3"),
    "Qwen3-Coder": ("qwen3_coder", None),
    "Qwen3.5": ("qwen3_coder", "qwen3"),
    "GLM-4.5": ("glm45", "glm45"),
    "GLM-4.7": ("glm47", "glm45"),
    "GLM-5": ("glm47", "glm45"),
    "DeepSeek-V3": ("deepseekv3", None),
    "Kimi-K2": ("kimi_k2", "kimi_k2"),
    "MiniMax-M2": ("minimax-m2", "minimax"),
    "Llama 3": ("llama3", None),
    "DeepSeek-V3.1": ("deepseekv31", "deepseek-v3"),
    "MiMo": ("hermes", "qwen3"),
    "MiMo-V2": ("mimo", "mimo"),
    "Gemma 4": ("gemma4", None),  # the gemma4 renderer splits the reasoning itself
}
#: families whose tool-call format the gateway cannot read yet: auto is refused, with the name
REFUSED: dict[str, str] = {
    "gpt-oss": "gpt-oss",
}


def write_model(root: Path, family: str) -> Path:
    """A model directory of ``family``: config.json, tokenizer_config.json, no weights."""
    config, tokens, template, name = SHAPES[family]
    model = root / name
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    decoder = {str(100 + i): {"content": token, "special": True} for i, token in enumerate(tokens)}
    tokenizer = {"added_tokens_decoder": decoder, "chat_template": template or "{{ messages }}"}
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    (model / "tokenizer.json").write_text("{}", encoding="utf-8")
    return model


def test_every_family_of_the_table_has_a_shape_here() -> None:
    from agentcore_slime.settings.model_family import FAMILIES

    named = {f.name for f in FAMILIES}
    assert {
        "Kimi-K2",
        "MiniMax-M2",
        "Llama 3",
        "DeepSeek-V3.1",
        "MiMo-7B",
        "gpt-oss (harmony)",
        "Gemma 4",
    } <= named
    assert set(CHOSEN) | set(REFUSED) == set(SHAPES)


@pytest.mark.parametrize("family", sorted(CHOSEN))
def test_unset_parsers_are_chosen_from_the_model(tmp_path: Path, family: str) -> None:
    fit = model_fit(write_model(tmp_path, family))
    assert fit.family is not None
    assert (fit.tool_call_parser, fit.reasoning_parser) == CHOSEN[family], fit
    assert fit.problems == []
    assert fit.chosen.get("SGLANG_TOOL_CALL_PARSER") == CHOSEN[family][0]


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_a_family_the_gateway_cannot_read_yet_is_refused_by_name(tmp_path: Path, family: str) -> None:
    fit = model_fit(write_model(tmp_path, family))
    (problem,) = [p for p in fit.problems if p.setting == "SGLANG_TOOL_CALL_PARSER"]
    assert problem.unreadable and f"SGLANG_TOOL_CALL_PARSER={REFUSED[family]}" in problem.message
    assert "cannot read yet: " in problem.message and "SGLANG_TOOL_CALL_PARSER=none" in problem.fix
    # with tool calls off the run may go on (an agent without tools)
    off = model_fit(write_model(tmp_path / "off", family), "none", "none")
    assert [p for p in off.problems if p.setting == "SGLANG_TOOL_CALL_PARSER"] == []


@pytest.mark.parametrize(
    ("family", "parser", "right"),
    [
        ("GLM-4.5", "qwen", "glm45 or glm or glm47"),  # the case: every call unreadable
        ("Qwen3-Coder", "qwen", "qwen3_coder"),
        ("Qwen2.5", "glm45", "qwen or qwen25 or hermes"),
        ("DeepSeek-V3", "hermes", "deepseekv3"),
        ("Kimi-K2", "qwen", "kimi_k2"),
        ("Llama 3", "qwen", "llama3"),
        ("MiniMax-M2", "qwen3_coder", "minimax-m2"),
    ],
)
def test_a_misfit_tool_call_parser_is_refused_with_the_right_names(
    tmp_path: Path, family: str, parser: str, right: str
) -> None:
    fit = model_fit(write_model(tmp_path, family), parser)
    (problem,) = [p for p in fit.problems if p.setting == "SGLANG_TOOL_CALL_PARSER"]
    assert f"SGLANG_TOOL_CALL_PARSER={parser} does not fit MODEL_DIR" in problem.message
    assert f"SGLang reads with {right}" in problem.message and not problem.unreadable
    assert problem.fix.startswith(f"set SGLANG_TOOL_CALL_PARSER={right.split(' or ')[0]}")


def test_misfit_reasoning_parser_and_renderer_family_are_refused(tmp_path: Path) -> None:
    model = write_model(tmp_path, "Qwen2.5")
    fit = model_fit(model, "qwen", "qwen3", "qwen3")
    problems = {p.setting: p for p in fit.problems}
    assert "which writes no reasoning in a form SGLang parses" in problems["SGLANG_REASONING_PARSER"].message
    assert "only its chat template renders" in problems["RENDERER_FAMILY"].message
    glm = model_fit(write_model(tmp_path / "g", "GLM-4.5"), "glm45", "glm45", "qwen3")
    assert "the glm-4.5 renderer renders" in glm.problems[0].message
    assert model_fit(model, "none", "none", "default").problems == []  # off and the template always fit


def test_an_unknown_model_turns_unset_parsers_off_and_says_so(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "mistral"}')
    fit = model_fit(model)
    assert (fit.family, fit.tool_call_parser, fit.reasoning_parser, fit.problems) == (None, None, None, [])
    assert "config.json model_type 'mistral'" in fit.notes[0]
    assert model_fit(model, "hermes").notes == []  # set by the user: nothing to say
    assert model_fit(tmp_path / "missing").family is None  # no config.json: nothing checked


def test_tokens_are_read_from_tokenizer_json_and_template_files_too(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "kimi_k2"}')
    fit = model_fit(model)
    assert fit.family is not None and fit.evidence == "config.json model_type 'kimi_k2'"
    (model / "config.json").write_text('{"model_type": "deepseek_v3"}')
    (model / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"content": DEEPSEEK_TOKENS[0]}]}))
    (model / "chat_template.jinja").write_text("'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'")
    fit = model_fit(model)
    assert (
        fit.family is not None and fit.family.name == "DeepSeek-V3" and fit.tool_call_parser == "deepseekv3"
    )


# ------------------------------------------------------------------ bin/train and bin/doctor
def test_bin_train_and_bin_doctor_refuse_the_misfit(make_context: MakeContext, tmp_path: Path) -> None:
    """GLM with SGLANG_TOOL_CALL_PARSER=qwen: bin/train's blocking checks and bin/doctor's table
    both FAIL ``model.tool-call-parser`` with the names that fit."""
    ctx = make_context(MODEL_DIR=str(write_model(tmp_path, "GLM-4.5")), SGLANG_TOOL_CALL_PARSER="qwen")
    train = by_name(blocking_checks(ctx.config, ctx.repo, [], "sync"))
    doctor = by_name(doctor_checks(ctx, only_blocking=True))
    for results in (train, doctor):
        result = results["model.tool-call-parser"]
        assert result.status is Status.FAIL and "glm45 or glm or glm47" in result.found
        assert "set SGLANG_TOOL_CALL_PARSER=glm45" in result.fix


def test_unset_parsers_pass_and_say_what_was_chosen(make_context: MakeContext, tmp_path: Path) -> None:
    ctx = make_context(MODEL_DIR=str(write_model(tmp_path, "Qwen3")))
    assert ctx.value("SGLANG_TOOL_CALL_PARSER") == AUTO  # the default
    result = by_name(check_model(ctx))["model.parsers"]
    assert result.status is Status.PASS
    assert result.found == (
        "Qwen3 (config.json model_type 'qwen3'): tool-call parser qwen (chosen from the model), "
        "reasoning parser qwen3 (chosen from the model)"
    )


def test_the_fixture_model_passes_and_a_refused_family_fails(
    make_context: MakeContext, tmp_path: Path
) -> None:
    (result,) = check_parsers(make_context())  # Qwen2.5-32B-Instruct (tests/fixtures/doctor/hf)
    assert result.status is Status.PASS and "tool-call parser qwen (chosen from the model)" in result.found
    oss = check_parsers(make_context(MODEL_DIR=str(write_model(tmp_path, "gpt-oss"))))
    # the reasoning: the gpt-oss renderer (RENDERER_FAMILY=auto) splits it itself, no FAIL for it
    assert [r.check for r in oss if r.status is Status.FAIL] == ["model.tool-call-parser"]
    assert "the gpt-oss renderer (RENDERER_FAMILY=auto) then reads the calls" in oss[0].fix


def test_the_gateway_chooses_what_the_check_chose(tmp_path: Path) -> None:
    from agentcore_slime.gateway.family import resolve_parsers

    for family in ("Qwen3", "GLM-4.7", "DeepSeek-V3", "Kimi-K2", "Llama 3"):
        model = write_model(tmp_path / family, family)
        fit = resolve_parsers(str(model), "auto", AUTO, AUTO)
        assert (fit.tool_call_parser, fit.reasoning_parser) == CHOSEN[family]
    with pytest.raises(Exception, match="SGLANG_TOOL_CALL_PARSER=gpt-oss, which the gateway cannot read yet"):
        resolve_parsers(str(write_model(tmp_path / "g", "gpt-oss")), "auto", AUTO, AUTO)


# ------------------------------------------------------------------ the published templates
TEMPLATES = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"


@pytest.mark.parametrize(
    ("template", "config", "family", "parser"),
    [
        # DeepSeek-V3.1's own template (tests/fixtures/chat_templates, see chat_templates.py):
        # a deepseek_v3 model_type, told from V3 by its template alone
        ("deepseek_v3_1.jinja", {"model_type": "deepseek_v3"}, "DeepSeek-V3.1", "deepseekv31"),
        ("kimi_k2.jinja", {"model_type": "kimi_k2"}, "Kimi-K2", "kimi_k2"),
        ("qwen3.jinja", {"model_type": "qwen3"}, "Qwen3", "qwen"),
    ],
)
def test_the_published_templates_tell_their_family(
    tmp_path: Path, template: str, config: dict[str, Any], family: str, parser: str
) -> None:
    model = tmp_path / "a-local-finetune"  # no Hub id in its name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    shutil.copy(TEMPLATES / template, model / "chat_template.jinja")
    fit = model_fit(model)
    assert fit.family is not None and fit.family.name == family
    assert fit.tool_call_parser == parser
