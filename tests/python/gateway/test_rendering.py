"""Renderer choice from a model directory, parser mapping, message normalization, reply parsing.

Uses the toy Qwen2.5-like tokenizer directory and copies of it whose config.json says another
model type or names a Hub id (as local fine-tunes do), with the real renderers package.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from agentcore_slime.gateway.conversation import RenderError, normalize_messages, same_reply
from agentcore_slime.gateway.family import choose_renderer, infer_family, load_tokenizer
from agentcore_slime.gateway.parsing import parse_completion, parse_turn, parsing_view


def _variant(model_dir: Path, tmp_path: Path, name: str, **config) -> Path:
    target = tmp_path / name
    shutil.copytree(model_dir, target)
    data = json.loads((target / "config.json").read_text())
    data.update(config)
    (target / "config.json").write_text(json.dumps(data))
    return target


def test_qwen25_dir_falls_back_to_chat_template_and_says_so_once(
    model_dir, caplog
) -> None:
    tok = load_tokenizer(str(model_dir))
    # the family module's own logger: a rehearsal run in-process by an earlier test of this worker
    # leaves it at ERROR (rehearse.main quiets it for its stand-in), hiding the warning
    with caplog.at_level(logging.WARNING, logger="agentcore_slime.gateway.family"):
        renderer, choice = choose_renderer(
            str(model_dir), tok, "auto", tool_call_parser="qwen", reasoning_parser=None
        )
    assert choice.family == "default" and "model_type 'qwen2'" in choice.reason
    assert type(renderer).__name__ == "DefaultRenderer"
    assert (
        renderer.config.tool_parser == "qwen3"
    )  # SGLang's "qwen" = Hermes JSON <tool_call>
    assert len([r for r in caplog.records if "chat template" in r.getMessage()]) == 1


@pytest.mark.parametrize(
    ("config", "family"),
    [
        ({"model_type": "qwen3"}, "qwen3"),
        ({"model_type": "qwen3_moe"}, "qwen3"),
        ({"_name_or_path": "Qwen/Qwen3-8B"}, "qwen3"),
    ],
)
def test_family_inferred_from_config_of_a_local_dir(
    model_dir, tmp_path, config, family
) -> None:
    target = _variant(model_dir, tmp_path, "my-finetune", **config)
    tok = load_tokenizer(str(target))
    assert infer_family(str(target), tok).family == family
    renderer, choice = choose_renderer(
        str(target), tok, "auto", tool_call_parser="qwen", reasoning_parser=None
    )
    assert type(renderer).__name__ == "Qwen3Renderer" and choice.family == family


def test_family_inferred_from_directory_named_like_a_hub_model(
    model_dir, tmp_path
) -> None:
    target = _variant(model_dir, tmp_path, "Qwen3-4B-Instruct-2507")
    assert infer_family(str(target), load_tokenizer(str(target))).family == "qwen3"


def test_inferred_family_that_does_not_fit_falls_back(model_dir, tmp_path) -> None:
    target = _variant(
        model_dir, tmp_path, "x", model_type="glm4_moe"
    )  # toy vocab lacks GLM tokens
    renderer, choice = choose_renderer(
        str(target),
        load_tokenizer(str(target)),
        "auto",
        tool_call_parser=None,
        reasoning_parser=None,
    )
    assert choice.family == "default" and "glm-4.5" in choice.reason
    assert type(renderer).__name__ == "DefaultRenderer"


def test_explicit_family_overrides_inference(model_dir) -> None:
    tok = load_tokenizer(str(model_dir))
    renderer, choice = choose_renderer(
        str(model_dir), tok, "qwen3", tool_call_parser=None, reasoning_parser=None
    )
    assert (
        type(renderer).__name__ == "Qwen3Renderer"
        and choice.reason == "RENDERER_FAMILY"
    )


def test_reasoning_parser_mapping(model_dir, tokenizer) -> None:
    renderer, _ = choose_renderer(
        str(model_dir),
        tokenizer,
        "default",
        tool_call_parser="qwen",
        reasoning_parser="qwen3",
    )
    ids = tokenizer.encode(
        "<think>\nhmm\n</think>\n\nhello<|im_end|>", add_special_tokens=False
    )
    message = parse_completion(renderer, ids, [], None)
    assert (
        message["reasoning_content"].strip() == "hmm"
        and message["content"].strip() == "hello"
    )


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)


def _chat_template(model_dir, tokenizer, parser: str, reasoning: str | None = None):
    renderer, _ = choose_renderer(
        str(model_dir), tokenizer, "default", tool_call_parser=parser, reasoning_parser=reasoning
    )
    return parsing_view(renderer)


ADD = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "note": {"type": "string"}}}}}]


def test_a_turn_with_valid_and_malformed_calls_keeps_the_valid_ones_and_is_flagged(
    model_dir, tokenizer
) -> None:
    """Today's SGLang (qwen25): the valid call and the text before it; the bad block is reported."""
    renderer = _chat_template(model_dir, tokenizer, "qwen")
    good = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    text = f"Sure.\n{good}\n<tool_call>\n{{bad\n</tool_call>"
    turn = parse_turn(renderer, _ids(tokenizer, text), [], ADD, "qwen")
    assert turn.message["content"] == "Sure."
    [call] = turn.message["tool_calls"]
    assert call["function"] == {"name": "add", "arguments": '{"a": 1}'} and len(call["id"]) == 29
    assert turn.tool_call_errors == ["a tool call is not valid JSON"]


def test_a_turn_whose_calls_all_fail_reaches_the_agent_whole(model_dir, tokenizer) -> None:
    renderer = _chat_template(model_dir, tokenizer, "qwen")
    for text in ('<tool_call>\n{"name": "add", "arguments": {oops}\n</tool_call>',
                 "I would use <tool_call> syntax normally."):
        turn = parse_turn(renderer, _ids(tokenizer, text), [], ADD, "qwen")
        assert turn.message == {"role": "assistant", "content": text}
        assert turn.tool_call_errors
    plain = parse_turn(renderer, _ids(tokenizer, "Just text."), [], ADD, "qwen")
    assert (plain.message["content"], plain.tool_call_errors) == ("Just text.", [])


def test_qwen3_coder_string_arguments_after_reasoning(model_dir, tokenizer) -> None:
    """The call renderers' qwen3.5 parser drops (a string value is not JSON) arrives typed by the
    schema, after the reasoning the think parser split off."""
    renderer = _chat_template(model_dir, tokenizer, "qwen3_coder", "qwen3")
    call = ("<tool_call>\n<function=add>\n<parameter=a>\n12\n</parameter>\n"
            "<parameter=note>\n12\n</parameter>\n</function>\n</tool_call>")
    thought = _ids(tokenizer, f"<think>\nadd them\n</think>\n\n{call}")
    turn = parse_turn(renderer, thought, [], ADD, "qwen3_coder")
    assert turn.message["reasoning_content"].strip() == "add them"
    assert turn.message["content"] is None and turn.tool_call_errors == []
    assert [c["function"] for c in turn.message["tool_calls"]] == [
        {"name": "add", "arguments": '{"a": 12, "note": "12"}'}
    ]
    # what renderers' own parser makes of it: the digits of a string parameter become a number,
    # and a word (not JSON) makes the call invalid, so it was dropped
    [mistyped] = parse_completion(renderer, _ids(tokenizer, call), [], ADD)["tool_calls"]
    assert mistyped["function"]["arguments"] == '{"a": 12, "note": 12}'
    words = _ids(tokenizer, call.replace(
        "\n12\n</parameter>\n</function>", "\ncats\n</parameter>\n</function>"))
    dropped = renderer.parse_response(words, tools=ADD)
    assert [c.status.value for c in dropped.tool_calls] == ["invalid_json"] and dropped.content == ""
    turn = parse_turn(renderer, words, [], ADD, "qwen3_coder")
    assert turn.message["tool_calls"][0]["function"]["arguments"] == '{"a": 12, "note": "cats"}'


def test_a_renderers_family_parser_hides_nothing_either(model_dir, tokenizer) -> None:
    """Without an SGLang parser name the family's own parser reads calls; a malformed one is
    reported and, with no valid call, the agent gets the whole text."""
    renderer, _ = choose_renderer(
        str(model_dir), tokenizer, "qwen3", tool_call_parser=None, reasoning_parser=None
    )
    text = '<tool_call>\n{"name": "add", "arguments": {oops}\n</tool_call>'
    turn = parse_turn(parsing_view(renderer), _ids(tokenizer, text), [], ADD)
    assert turn.message["content"] == text and "tool_calls" not in turn.message
    assert turn.tool_call_errors == ["invalid_json"]


def test_normalize_messages() -> None:
    out = normalize_messages(
        [
            {
                "role": "developer",
                "content": [
                    {"type": "text", "text": "be "},
                    {"type": "text", "text": "brief"},
                ],
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
        ]
    )
    assert out == [
        {"role": "system", "content": "be brief"},
        {
            "role": "assistant",
            "content": "",  # as SGLang's chat route hands no content to the template
            "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
            ],
        },
        {"role": "tool", "content": "2"},
    ]
    with pytest.raises(RenderError, match="role 'bot'"):
        normalize_messages([{"role": "bot", "content": "x"}])


def test_same_reply_is_loose_about_serialization() -> None:
    returned = {
        "content": "a  b",
        "tool_calls": [{"function": {"name": "f", "arguments": '{"x":1,"y":2}'}}],
    }
    echoed = {
        "content": "a b",
        "tool_calls": [{"function": {"name": "f", "arguments": {"y": 2, "x": 1}}}],
    }
    assert same_reply(echoed, returned)
    assert not same_reply({**echoed, "content": "a c"}, returned)
