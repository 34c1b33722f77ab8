"""The rehearsal's parts on their own: the stand-in policy's tool reading and tool calls (through the
real renderer of a locally built Qwen2.5-like tokenizer) and the diagnosis of known episodes.

The end-to-end scenarios (agent, gateway, bucket) are in tests/python/e2e/test_rehearse.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentcore_slime.evaluate.episodes import INFRASTRUCTURE, Episode
from agentcore_slime.evaluate.rehearse import (
    Wiring,
    _step_line,
    check_gateway_address,
    diagnose,
    episode_checks,
)
from agentcore_slime.evaluate.standin import (
    ANSWER,
    SessionLog,
    StandInPolicy,
    offered_tools,
    placeholder_arguments,
)
from fakes.toy_tokenizer import build_toy_tokenizer

CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}
WIRING = Wiring("the agent at http://10.0.0.9:8080", False, "http://10.0.0.5:4000", "s3://b/exp/in/")


def _episode(
    row: int = 0, reason: str | None = None, detail: str = "", turns: int = 0, reward: float | None = None
) -> Episode:
    failure_class = INFRASTRUCTURE if reason else None
    return Episode(
        row,
        0,
        f"{row:08d}".ljust(36, "x"),
        reward,
        failure_class,
        reason,
        detail or None,
        turns,
        10,
        5,
        False,
        1.0,
    )


def test_offered_tools_reads_the_json_tool_specs_chat_templates_write() -> None:
    qwen = (
        "<|im_start|>system\n# Tools\n<tools>\n"
        + json.dumps({"type": "function", "function": CALCULATOR})
        + "\n"
        + json.dumps({"type": "function", "function": {**CALCULATOR, "name": "search"}})
        + '\n</tools>\nFor each call: {"name": <function-name>, "arguments": <args-json-object>}<|im_end|>'
    )
    assert [t["function"]["name"] for t in offered_tools(qwen)] == ["calculator", "search"]
    llama = "Given the following functions...\n" + json.dumps(CALCULATOR) + "\n\nQuestion: 1+1 {not json"
    assert offered_tools(llama) == [{"type": "function", "function": CALCULATOR}]
    assert offered_tools(qwen + qwen) == offered_tools(qwen)  # a tool named twice is offered once
    gpt_oss = "namespace functions {\n// Evaluate.\ntype calculator = (_: { expression: string }) => any;\n}"
    assert offered_tools(gpt_oss) == []  # not JSON: the stand-in answers without a call


def test_placeholder_arguments_fill_each_required_parameter_with_its_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "unit": {"type": "string", "enum": ["cm", "in"]},
            "optional": {"type": "string"},
        },
        "required": ["text", "count", "ratio", "flag", "unit"],
    }
    assert placeholder_arguments(schema) == {"text": "1", "count": 1, "ratio": 1, "flag": True, "unit": "cm"}
    assert placeholder_arguments(None) == {}
    assert placeholder_arguments({"properties": {"a": {"type": "array"}}}) == {"a": []}  # no required: all


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_toy_tokenizer(tmp_path_factory.mktemp("toy") / "toy-qwen2.5")


def test_the_stand_in_calls_the_first_tool_once_in_the_models_format_then_answers(toy: Path) -> None:
    policy = StandInPolicy(str(toy), tool_call_parser="qwen25")
    plain = policy.renderer.render_ids([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    tools = [{"type": "function", "function": CALCULATOR}]
    prompt = policy.renderer.render_ids(
        [{"role": "user", "content": "1+1?"}], tools=tools, add_generation_prompt=True
    )
    one, eleven = ANSWER.format("1") + "<|im_end|>", ANSWER.format("11") + "<|im_end|>"
    assert policy.tokenizer.decode(policy.complete("s1", plain)) == one  # no tool offered yet
    first = policy.complete("s1", prompt)
    assert policy.tokenizer.decode(first) == (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call><|im_end|>'
    )
    assert policy.tokenizer.decode(policy.complete("s1", prompt)) == one  # the session's answer stays
    assert policy.sessions["s1"] == SessionLog(3, ["calculator"], "calculator", '{"expression": "1"}', "", 2,
                                               ANSWER.format("1"))
    # a session of its own: the next answer of rows without one (1, 11, 1, ...) is a wrong one
    assert policy.tokenizer.decode(policy.complete("s2", plain)) == eleven
    assert policy.sessions["s2"].tool_called == "" and policy.sessions["s2"].tools_offered == []


def test_the_stand_in_answers_a_rows_episodes_right_and_wrong_in_turn(toy: Path) -> None:
    """So a group's rewards differ and its advantages are not all zero (the row's prompt is found
    in the rendered prompt; its answer is the row's metadata answer)."""
    policy = StandInPolicy(str(toy), answers={"What is 17 + 25?": "42", "other": "7"})
    prompt = policy.renderer.render_ids([{"role": "user", "content": "What is 17 + 25?"}],
                                        add_generation_prompt=True)
    texts = [policy.tokenizer.decode(policy.complete(f"s{n}", prompt)) for n in range(3)]
    assert texts == [ANSWER.format(n) + "<|im_end|>" for n in ("42", "421", "42")]


@pytest.mark.parametrize("reasoning_parser", [None, "qwen3"])
def test_the_stand_in_speaks_a_renderers_family_too(toy: Path, reasoning_parser: str | None) -> None:
    """The qwen3 family (renderers' own renderer, empty think block): the call still parses back."""
    policy = StandInPolicy(str(toy), renderer_family="qwen3", reasoning_parser=reasoning_parser)
    tools = [{"type": "function", "function": CALCULATOR}]
    prompt = policy.renderer.render_ids(
        [{"role": "user", "content": "1+1?"}], tools=tools, add_generation_prompt=True
    )
    assert policy.tokenizer.decode(policy.complete("s", prompt)).endswith(
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call><|im_end|>'
    )
    assert policy.sessions["s"].tool_called == "calculator" and policy.sessions["s"].problem == ""


def test_a_tool_call_the_gateway_could_not_parse_is_a_finding(toy: Path) -> None:
    """No SGLANG_TOOL_CALL_PARSER for a chat-template model: the gateway would see plain text."""
    policy = StandInPolicy(str(toy))
    tools = [{"type": "function", "function": CALCULATOR}]
    prompt = policy.renderer.render_ids(
        [{"role": "user", "content": "1+1?"}], tools=tools, add_generation_prompt=True
    )
    assert policy.tokenizer.decode(policy.complete("s1", prompt)) == ANSWER.format("1") + "<|im_end|>"
    log = policy.sessions["s1"]
    assert log.tool_called == "" and "does not parse back" in log.problem
    episode = _episode(reward=0.0, turns=1)
    checks = episode_checks([episode], {episode.session_id: log}, WIRING)
    [tool] = [r.line() for r in checks if r.check == "rehearse.tool-call"]
    assert tool.startswith(
        "FAIL rehearse.tool-call: the renderer's tool call for 'calculator' does not parse back"
    )
    assert "(fix: set SGLANG_TOOL_CALL_PARSER" in tool


@pytest.mark.parametrize(
    "episode, log, check, words",
    [
        (
            _episode(reason="bad_metadata", detail="row metadata is str, not a dict"),
            SessionLog(),
            "data",
            "row 0",
        ),
        (
            _episode(reason="invoke_error", detail="invoke failed: HTTP 404"),
            SessionLog(),
            "agent",
            "HTTP 404",
        ),
        (
            _episode(reason="timeout", detail="timeout: no result at s3://b/k after 30s"),
            SessionLog(),
            "agent-reaches-gateway",
            "never reached the gateway at http://10.0.0.5:4000",
        ),
        (
            _episode(
                reason="agent_crashed", detail="agent error result (status_code 500): Connection error."
            ),
            SessionLog(),
            "agent-reaches-gateway",
            "Connection error",
        ),
        (
            _episode(
                reason="agent_crashed", detail="agent error result (status_code 500): KeyError: 'question'"
            ),
            SessionLog(),
            "payload",
            "crashed on the payload of row 0 before calling the model",
        ),
        (
            _episode(
                reason="agent_crashed",
                detail="agent error result (status_code 500): ZeroDivisionError",
                turns=1,
            ),
            SessionLog(1, ["calculator"], "calculator", '{"expression": "1"}', tool_call_at=1),
            "tool-call",
            'failed after the stand-in called calculator({"expression": "1"})',
        ),
        (  # a planning call without tools first: the tool call was the second call, nothing after it
            _episode(
                reason="agent_crashed", detail="agent error result (status_code 500): ValueError", turns=2
            ),
            SessionLog(2, ["calculator"], "calculator", '{"expression": "1"}', tool_call_at=2),
            "tool-call",
            "failed after the stand-in called calculator",
        ),
        (
            _episode(reason="timeout", detail="timeout: no result at s3://b/k after 30s", turns=2),
            SessionLog(2, ["calculator"], "calculator", tool_call_at=1),
            "results",
            "no result landed under s3://b/exp/in/ although the agent talked to the model (2 calls",
        ),
        (
            _episode(reason="bad_reward", detail="result has no 'rewards' key", turns=2),
            SessionLog(2),
            "reward",
            "no readable reward",
        ),
    ],
)
def test_each_failure_is_diagnosed_at_the_stage_it_broke(
    episode: Episode, log: SessionLog, check: str, words: str
) -> None:
    finding = diagnose(episode, log, WIRING)
    assert finding is not None and finding.check == check and words in finding.found
    assert finding.fix


def test_the_lines_fail_where_episodes_broke_pass_where_they_went_on_and_skip_what_none_reached() -> None:
    good = _episode(0, reward=1.0, turns=2)
    crashed = _episode(
        1, reason="agent_crashed", detail="agent error result (status_code 500): KeyError: 'q'"
    )
    logs = {good.session_id: SessionLog(2, ["calculator"], "calculator", tool_call_at=1)}
    lines = [r.line() for r in episode_checks([good, crashed], logs, WIRING)]
    assert [line.split(":")[0] for line in lines] == [
        "PASS rehearse.data",
        "PASS rehearse.agent",
        "PASS rehearse.agent-reaches-gateway",
        "FAIL rehearse.payload",
        "PASS rehearse.tool-call",
        "PASS rehearse.results",
        "PASS rehearse.reward",
    ]
    assert lines[3].startswith(
        "FAIL rehearse.payload: 1 of 2 episodes: the agent crashed on the payload of row 1"
    )
    assert lines[6] == "PASS rehearse.reward: rewards read: 1"
    only_crashed = [r.line() for r in episode_checks([crashed], {}, WIRING)]
    assert [line.split(":")[0] for line in only_crashed] == [
        "PASS rehearse.data",
        "PASS rehearse.agent",
        "PASS rehearse.agent-reaches-gateway",
        "FAIL rehearse.payload",
    ]  # nothing got further: no line for the later checks


def test_a_loopback_gateway_address_is_refused_for_an_acr_agent_only() -> None:
    """Real ACR never reaches the node's loopback (the local ACR stand-in would: the check is static)."""
    for url in ("http://127.0.0.1:4000", "http://[::1]:4000", "http://localhost:4000"):
        line = check_gateway_address(url, acr=True).line()
        assert line.startswith(f"FAIL rehearse.gateway: the gateway gives agents {url}, a loopback address")
        assert "(fix: unset GATEWAY_HOST" in line
        assert check_gateway_address(url, acr=False).line().startswith("PASS")  # a local agent reaches it
    assert check_gateway_address("http://10.0.3.7:4000", acr=True).line() == (
        "PASS rehearse.gateway: the real gateway serves the stand-in policy at http://10.0.3.7:4000"
    )


def test_a_step_whose_every_episode_failed_says_so_not_that_rewards_are_equal() -> None:
    """An ARN without credentials: every episode fails to invoke; the step line must not call
    that a group of equal rewards (there are none)."""
    failed = [_episode(row, "invoke_error", "AccessDeniedException") for row in (0, 0, 1, 1)]
    line = _step_line({"samples": 0, "trained_tokens": 0, "advantages": []}, failed)
    assert "every episode failed, so there is nothing to train on" in line and "equal" not in line
    equal = [_episode(row, reward=0.0) for row in (0, 0)]
    line = _step_line({"samples": 2, "trained_tokens": 9, "advantages": [0.0, 0.0]}, equal)
    assert "every group's rewards are equal" in line
