"""Claude Code and Codex as they ship, end to end through the gateway's own process.

The real CLIs from npm (the versions tests/agent-clis.txt pins; tests/run installs them into
.toolkit/agent-clis and sets TOOLKIT_AGENT_CLIS), in their default configuration, each in a
temporary HOME, pointed at a :class:`GatewayProcess` session in front of the scripted SGLang
server (toy Qwen2.5-format tokenizer, qwen25 tool parser, cumulative mode: the defaults). The
scripted policy answers a tool-using prompt with one shell tool call, the prompt holding the
tool's output with a final text, and any other prompt (a side call: Claude Code's session
title) with a JSON title; with the reasoning parser on (``qwen3``) every reply opens with a
``<think>`` block, which the CLIs get as reasoning and send back. Nothing leaves loopback: the
CLIs' telemetry, update checks and error reports are off, and their only endpoint is the gateway.

Claude Code runs in print mode and as the Claude Agent SDK runs it (its command line, environment
and stream-json stdin, read in the SDK's source: the SDK's wheel bundles a CLI of its own and is
not installed here). Checked: exit 0 with the final text (the tool really ran: its output,
which the prompt never holds, came back), one trained sample for the main conversation, side
calls untrained and counted, and the decoded prompt holds the system prompt, the tools and the
tool result (every tool: test_late_system_messages.py, on the recorded requests).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.gateway import GatewayConfig, GatewayProcess
from agentcore_slime.rollout.traces import merge_traces, untrained_side_calls
from fakes.sglang_server import FakeSGLang, text_policy
from gateway_helpers import tool_call_text

COMMAND = "echo MARKER-$((40+2))"  # its output, MARKER-42, is in no prompt until the tool ran
OUTPUT = "MARKER-42"
ANSWER = "The command printed MARKER-42."
CLI_SECONDS = 120  # a ceiling that only catches a hung CLI (a run takes seconds)


def cli(name: str) -> str:
    """The pinned CLI's path (skipped where it is not installed; in CI a failure)."""
    where = os.environ.get("TOOLKIT_AGENT_CLIS", "")
    path = Path(where, name) if where else None
    if path is None or not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing (tests/run installs it from npm: tests/agent-clis.txt)")
        pytest.skip(f"{name} is not installed (tests/run installs it into .toolkit/agent-clis)")
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return str(path)


THINK = "<think>I should run it.</think>"


def respond(prompt: str) -> str:
    """The scripted policy (see the module docstring)."""
    if OUTPUT in prompt:
        return ANSWER
    if '"name": "Bash"' in prompt:
        return tool_call_text("Bash", {"command": COMMAND, "description": "Print the marker"})
    if '"name": "exec_command"' in prompt:
        return tool_call_text("exec_command", {"cmd": COMMAND})
    return '{"title": "Print a marker"}'


Stand = tuple[GatewayProcess, FakeSGLang]


@pytest.fixture(scope="module")
def stands(model_dir: Path, tokenizer: Any) -> Iterator[dict[bool, Stand]]:
    """A gateway process and its engine per reasoning setting (False: parser off), shared by the
    module's tests (each test has its own session)."""
    started: dict[bool, Stand] = {}
    try:
        for reasoning in (False, True):
            think = THINK if reasoning else ""
            # the CLIs' system prompts and tools are ~50k tokens of the toy tokenizer
            policy = text_policy(tokenizer, lambda prompt, think=think: think + respond(prompt))
            engine = FakeSGLang(policy, tokenizer=tokenizer, context_length=262144)
            engine.start()
            config = GatewayConfig(
                str(model_dir), host="127.0.0.1", port=0, engine_retry_backoff=0.01,
                tool_call_parser="qwen25", reasoning_parser="qwen3" if reasoning else None,
            )
            started[reasoning] = (GatewayProcess(config, ready_timeout=60), engine)
        with ThreadPoolExecutor(2) as pool:  # the two children load their tokenizers side by side
            list(pool.map(lambda stand: stand[0].start(stand[1].url), started.values()))
        yield started
    finally:
        for gateway, engine in started.values():
            gateway.shutdown()
            engine.stop()


def base_env(home: Path) -> dict[str, str]:
    node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
    return {"PATH": f"{node_dir}:/usr/bin:/bin", "HOME": str(home), "TERM": "dumb", "LANG": "C.UTF-8"}


def run(
    argv: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=CLI_SECONDS,
        **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
    )


def agent_sdk_run(claude: str, prompt: str) -> tuple[list[str], dict[str, str], str]:
    """The CLI as the Claude Agent SDK (Python, 0.2.184) runs it for ``query(prompt, options)``
    with ``allowed_tools=["Bash"], model=...``: the command line its transport builds, its
    environment, and stdin in its stream-json control protocol (an initialize request, then the
    user message; read in claude_agent_sdk/_internal/transport/subprocess_cli.py and query.py)."""
    argv = [
        claude, "--output-format", "stream-json", "--verbose", "--system-prompt", "",
        "--allowedTools", "Bash", "--model", "qwen3-8b", "--input-format", "stream-json",
    ]
    env = {"CLAUDE_CODE_ENTRYPOINT": "sdk-py", "CLAUDE_AGENT_SDK_VERSION": "0.2.184"}
    initialize = {
        "type": "control_request", "request_id": "req_1_0a1b2c3d",
        "request": {"subtype": "initialize", "hooks": None},
    }
    user = {"type": "user", "message": {"role": "user", "content": prompt}, "parent_tool_use_id": None}
    return argv, env, "".join(json.dumps(line) + "\n" for line in (initialize, user))


def final_result(stdout: str, sdk: bool) -> dict[str, Any]:
    """The CLI's result message (print mode: its JSON; the SDK's stream: the ``result`` line)."""
    if not sdk:
        return dict(json.loads(stdout))
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return next(line for line in lines if line.get("type") == "result")


def assert_prompt_holds(engine: FakeSGLang, tokenizer: Any, texts: list[str]) -> None:
    last = tokenizer.decode(engine.requests[-1]["input_ids"])
    missing = [text for text in texts if text not in last]
    assert missing == []


SLIME_VARIABLES = {  # what slime's own coding-agent harness sets
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1",
    "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
}


@pytest.mark.parametrize(
    ("variables", "reasoning", "sdk"),
    [({}, False, False), (SLIME_VARIABLES, False, False), ({}, True, False), ({}, False, True)],
    ids=["default", "slime-variables", "reasoning", "agent-sdk"],
)
def test_claude_code(
    stands, tokenizer, tmp_path: Path, variables: dict[str, str], reasoning: bool, sdk: bool
) -> None:
    gateway, engine = stands[reasoning]
    claude = cli("claude")
    sid = f"cc-{len(variables)}-{reasoning}-{sdk}"
    base = gateway.create_session(sid, {"max_new_tokens": 400})
    env = {
        **base_env(tmp_path / "home"),
        "ANTHROPIC_BASE_URL": base.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "placeholder",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        **variables,
    }
    (tmp_path / "home").mkdir()
    prompt = f"Run {COMMAND} with the Bash tool and tell me what it printed."
    # any model name: a served model's, outside Claude Code's own list
    argv = [claude, "-p", prompt, "--model", "qwen3-8b", "--allowedTools", "Bash", "--output-format", "json"]
    stdin = None
    if sdk:
        argv, sdk_env, stdin = agent_sdk_run(claude, prompt)
        env.update(sdk_env)
    done = run(argv, env, tmp_path, stdin)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = final_result(done.stdout, sdk)
    assert result["is_error"] is False and result["result"] == ANSWER
    traces = gateway.finish_session(sid)
    main = [t for t in traces if not t.side_call]
    assert len(main) == 2 and [s.calls for s in merge_traces(traces)] == [[traces.index(t) for t in main]]
    assert untrained_side_calls(traces) == len(traces) - 2  # the session title, when it is asked for
    assert all("without tools" in t.side_call for t in traces if t.side_call)
    expected = ["You are a Claude agent", '"name": "Bash"', '"name": "Read"', OUTPUT]
    assert_prompt_holds(engine, tokenizer, expected)
    assert "x-anthropic-billing-header" not in tokenizer.decode(engine.requests[-1]["input_ids"])
    if reasoning:  # the thinking block came back and was rendered as the turn's reasoning
        assert main[0].response_message.get("reasoning_content") == "I should run it."
        assert_prompt_holds(engine, tokenizer, ["I should run it."])


@pytest.mark.parametrize("reasoning", [False, True], ids=["default", "reasoning"])
def test_codex_exec(stands, tokenizer, tmp_path: Path, reasoning: bool) -> None:
    gateway, engine = stands[reasoning]
    codex = cli("codex")
    sid = f"cx-{reasoning}"
    base = gateway.create_session(sid, {"max_new_tokens": 400})
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(
        'model = "qwen3-8b"\nmodel_provider = "gateway"\n'
        "[model_providers.gateway]\n"
        f'name = "gateway"\nbase_url = "{base}"\nwire_api = "responses"\nenv_key = "GATEWAY_KEY"\n'
    )
    env = {**base_env(home), "GATEWAY_KEY": "placeholder", "CODEX_HOME": str(home / ".codex")}
    prompt = f"Run {COMMAND} in the shell and tell me what it printed."
    argv = [codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt]
    done = run(argv, env, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert ANSWER in done.stdout and "ERROR" not in done.stderr
    traces = gateway.finish_session(sid)
    assert len(traces) == 2 and not any(t.side_call for t in traces)
    assert [s.calls for s in merge_traces(traces)] == [[0, 1]]
    tools = ['"name": "exec_command"', '"name": "spawn_agent"', "You are a coding agent running in the Codex"]
    assert_prompt_holds(engine, tokenizer, [*tools, OUTPUT])
    if reasoning:  # the reasoning item came back and was rendered as the turn's reasoning
        assert traces[0].response_message.get("reasoning_content") == "I should run it."
        assert_prompt_holds(engine, tokenizer, ["I should run it."])
