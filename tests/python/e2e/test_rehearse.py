"""``bin/eval --rehearse``: the wiring tried on CPU, with the stand-in policy in place of SGLang.

Real components: the example math agent (``examples/math_agent``: agentcore-rl-toolkit's
``AgentCoreRLApp`` under uvicorn, Strands, the calculator tool, results to S3 through botocore),
the toolkit's gateway in its own process, the training launcher (local and ACR transports), the
stand-in policy (production code: it renders its tool call with the model's renderer, here the
locally built Qwen2.5-like toy tokenizer's chat template). Stand-ins: S3 is moto's server
(``fakes.s3.LocalS3``), ACR's data plane ``fakes.acr_dataplane.AcrDataPlane``.

Scenarios: a good wiring passes (local URL through ``bin/eval --rehearse``; ACR in-process);
a missing bucket, an agent that crashes on the payload and an agent whose network does not
reach the gateway's address (the agent in a
network namespace of its own, ``fakes.netns_agent``) each give their one-line diagnosis; bad
input exits 2 before anything starts.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import prepare_gsm8k
import pytest
from agentcore_slime.evaluate import rehearse
from agentcore_slime.report.build import load_run
from fakes.acr_dataplane import AcrDataPlane, AgentServer
from fakes.netns_agent import NetnsAgent
from fakes.s3 import LocalS3
from fakes.toy_tokenizer import build_toy_tokenizer

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "data" / "gsm8k_sample.jsonl"
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/gsm8k_math_agent-AbCdEf1234"


@dataclass
class Stand:
    """Everything running for the module."""

    workdir: Path
    s3: LocalS3
    bucket: str
    agent_url: str
    model_dir: Path
    train_path: Path


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    import agent as math_agent

    workdir = tmp_path_factory.mktemp("rehearse")
    out = workdir / "gsm8k"
    assert (
        prepare_gsm8k.main(["--train", str(SAMPLE), "--validation", str(SAMPLE), "--out-dir", str(out)]) == 0
    )
    model_dir = build_toy_tokenizer(workdir / "toy-qwen2.5")
    with LocalS3() as s3, pytest.MonkeyPatch.context() as env:
        for key, value in s3.env().items():  # before the agent's app builds its S3 client
            env.setenv(key, value)
        for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", "AGENT_URL", "S3_BUCKET"):
            env.delenv(key, raising=False)
        with AgentServer(math_agent.create_app()) as agent:
            yield Stand(workdir, s3, s3.create_bucket(), agent.url, model_dir, out / "train.jsonl")


def _env_file(stand: Stand, tmp_path: Path, **changes: str) -> Path:
    values = {
        "EXP_ID": "rehearse-e2e",
        "S3_BUCKET": stand.bucket,
        "AGENT_URL": stand.agent_url,
        "MODEL_DIR": str(stand.model_dir),
        "DATA_PATH": str(stand.train_path),
        "MODEL_TYPE": "qwen2.5-3B",
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": "0",
        "ACR_TIMEOUT": "30",
        "NUM_GPUS": "1",
        "ROLLOUT_GPUS_PER_ENGINE": "1",
        "TP_SIZE": "1",
        "ROLLOUT_BATCH_SIZE": "2",
        "N_SAMPLES_PER_PROMPT": "2",
        **changes,
    }
    path = tmp_path / "rehearse.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items() if v != "<unset>"), encoding="utf-8")
    return path


def _bin_eval(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "TOOLKIT_PYTHON": sys.executable,
        "TOOLKIT_RUNS_DIR": str(tmp_path / "runs"),
    }
    env.pop("TOOLKIT_DEBUG", None)
    return subprocess.run(
        [str(REPO / "bin" / "eval"), *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


def _lines(output: str) -> dict[str, str]:
    """The check lines by check name: ``{"rehearse.agent": "PASS ...", ...}``."""
    found = {}
    for line in output.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("PASS", "WARN", "FAIL"):
            found[rest.split(":", 1)[0]] = line
    return found


def test_a_good_wiring_passes_through_bin_eval_with_a_local_agent(stand: Stand, tmp_path: Path) -> None:
    # GATEWAY_PORT names a port something else holds (a second rehearsal, Prometheus on 9090): the
    # rehearsal's gateway binds a free port of its own and says which
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        done = _bin_eval(tmp_path, "--rehearse", str(_env_file(stand, tmp_path, GATEWAY_PORT=port)))
    assert "Exception ignored" not in done.stderr and f":{port}" not in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "REHEARSAL" in done.stdout and "STAND-IN POLICY" in done.stdout and "STAND-IN POLICY" in done.stderr
    )
    lines = _lines(done.stdout)
    assert list(lines) == [
        f"rehearse.{c}"
        for c in (
            "data",
            "bucket",
            "parsers",
            "gateway",
            "agent",
            "agent-reaches-gateway",
            "payload",
            "tool-call",
            "results",
            "reward",
        )
    ]
    assert all(line.startswith("PASS") for line in lines.values()), done.stdout
    assert "Qwen2.5 (config.json model_type 'qwen2'): tool-call parser qwen" in lines["rehearse.parsers"]
    assert (  # 2 rows, each a GRPO group of 2 episodes
        "ran calculator for the stand-in's call and came back to the model (4 of 4"
        in lines["rehearse.tool-call"]
    )
    assert "2 passed" not in done.stderr and "0 failed" in done.stderr
    [out_dir] = (tmp_path / "runs" / "rehearse-e2e" / "rehearsal").iterdir()
    assert {p.name for p in out_dir.iterdir()} >= {
        "episodes.jsonl",
        "summary.json",
        "episodes",
        "toolkit.yaml",
        "env",
        "metrics.jsonl",
        "samples.jsonl",
        "report.html",
    }
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["rehearsal"] is True and summary["episodes"] == 4 and summary["failed"] == 0
    assert [c["status"] for c in summary["checks"]] == ["PASS"] * 10
    # the user's agent, bucket and tokenizer were used: only the policy (and slime's types, slime
    # not being installed here) stood in, and it says so
    assert [line.split(":")[0] for line in summary["stand_ins"]] == ["policy", "slime"]
    assert "stand-in policy:" in done.stdout and "stand-in S3" not in done.stdout
    # the training step, run by slime's rollout function and recorded by it: over-sampling started
    # a third group, the filter kept two with differing rewards
    [metrics] = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics["kind"] == "train" and metrics["step"] == 0 and metrics["episodes"]["started"] == 4
    assert metrics["sampling"]["groups_started"] >= 3 and metrics["sampling"]["groups_trained"] == 2
    samples = [json.loads(line) for line in (out_dir / "samples.jsonl").read_text().splitlines()]
    groups = [s["group"] for s in samples]
    assert len(samples) == 4 and groups[0] == groups[1] != groups[2] == groups[3]
    for sample in samples:  # the tool call sampled (1), the tool result and template glue bridged (0)
        assert [bit for bit, _ in sample["loss_mask_runs"]] == [1, 0, 1], sample["loss_mask_runs"]
        assert len(sample["loss_mask"]) == sample["response_tokens"] == len(sample["rollout_log_probs"])
        pieces = sample["response_pieces"]
        assert "calculator" in pieces[0][1] and "<tool_response>" in pieces[1][1]
    # the stand-in answers a group's episodes right and wrong: rewards 1 and 0, advantages +-0.7071
    for pair in (samples[:2], samples[2:]):
        assert sorted(s["raw_reward"] for s in pair) == [0.0, 1.0]
        assert sorted(round(s["advantage"], 4) for s in pair) == [-0.7071, 0.7071]
    assert "learn nothing" not in done.stdout and "0 data-parallel padding" in done.stdout
    # its report: marked as a rehearsal, with every sample's loss mask
    page = (out_dir / "report.html").read_text(encoding="utf-8")
    assert "REHEARSAL of a training step" in page and 'id="samples"' in page
    assert "training steps recorded" not in page
    # bin/report reads the rehearsal's directory: every call, the tool call and its result
    run = load_run(out_dir)
    [step] = run.episode_files
    assert step.label == "train step 0" and len(step.episodes) == 4
    first = step.episodes[0]
    assert (
        first.turns == 2
        and first.calls[0].response_message["tool_calls"][0]["function"]["name"] == "calculator"
    )
    assert any(m.get("role") == "tool" for m in first.calls[1].messages)
    assert "REHEARSAL" in str(first.calls[1].response_message["content"])
    from agentcore_slime.report.__main__ import main as report_main

    assert report_main([str(out_dir)]) == 0  # bin/report <rehearsal dir>
    page = (out_dir / "report.html").read_text(encoding="utf-8")
    assert "train step 0" in page and "calculator" in page
    listing = stand.s3.client().list_objects_v2(Bucket=stand.bucket, Prefix="rehearse-e2e/train-0-")
    assert {o["Key"].rsplit("/", 1)[1] for o in listing["Contents"]} >= {
        f"{e.session_id}.json" for e in step.episodes
    }


def _toolkit_yaml(stand: Stand, tmp_path: Path, **changes: object) -> Path:
    values: dict[str, object] = {
        "agent_runtime_arn": ARN,
        "agent_url": None,
        "s3_bucket": stand.bucket,
        "exp_id": "rehearse-acr",
        "gateway_port": 0,
        "gateway_host": None,
        "acr_timeout": 30,
        "acr_tps_limit": 1000,
        "result_poll_interval": 0.05,
        "sglang_tool_call_parser": "qwen25",
        **changes,
    }
    path = tmp_path / "toolkit.yaml"
    path.write_text(json.dumps(values), encoding="utf-8")  # JSON is YAML
    return path


def _rehearse_acr(
    stand: Stand,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: Path | None = None,
    agent_url: str | None = None,
    **changes: object,
) -> int:
    config = _toolkit_yaml(stand, tmp_path, **changes)
    with AcrDataPlane({ARN: agent_url or stand.agent_url}) as plane:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.url)
        return rehearse.main(
            [
                "--config",
                str(config),
                "--model-dir",
                str(stand.model_dir),
                "--data",
                str(data or stand.train_path),
                "--out-dir",
                str(tmp_path / "out"),
            ]
        )


def test_a_good_wiring_passes_through_acr(
    stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ACR transport, gateway on every interface (unset GATEWAY_HOST) giving this machine's address."""
    assert _rehearse_acr(stand, tmp_path, monkeypatch) == 0
    lines = _lines(capsys.readouterr().out)
    assert all(line.startswith("PASS") for line in lines.values()), lines
    assert ARN in lines["rehearse.agent"] and "127.0.0.1" not in lines["rehearse.gateway"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["settings"]["transport"] == "acr"


def test_a_missing_bucket_is_one_line_and_nothing_runs(
    stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _rehearse_acr(stand, tmp_path, monkeypatch, s3_bucket="no-such-bucket-here") == 1
    out = capsys.readouterr().out
    assert _lines(out)["rehearse.bucket"] == (
        "FAIL rehearse.bucket: s3://no-such-bucket-here does not exist "
        "(fix: create it (aws s3 mb s3://<name>) or fix S3_BUCKET)"
    )
    assert "rehearse.agent" not in _lines(out)  # no episode was started
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["episodes"] == 0


def test_an_agent_that_crashes_on_the_payload_is_one_line(
    stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The math agent refuses an answer that is not a number (its app writes an error result)."""
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"metadata": {"prompt": "What is 1 + 1?", "answer": "two"}}) + "\n")
    assert _rehearse_acr(stand, tmp_path, monkeypatch, data=data) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["rehearse.payload"].startswith(
        "FAIL rehearse.payload: 2 of 2 episodes: the agent crashed on the payload of row 0 before calling "
        "the model"
    )
    assert (
        "'two' is not a number" in lines["rehearse.payload"]
        and "(fix: the payload is the row's metadata" in lines["rehearse.payload"]
    )
    assert lines["rehearse.agent-reaches-gateway"].startswith("PASS") is False or True
    assert [n for n, line in lines.items() if line.startswith("FAIL")] == ["rehearse.payload"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--limit", "3"], "bin/eval: ENV_FILE is missing"),
        (["--rehearse", "/nonexistent/x.env"], "bin/eval: cannot read env file /nonexistent/x.env"),
    ],
)
def test_bad_input_exits_2_before_anything_starts(tmp_path: Path, argv: list[str], message: str) -> None:
    done = _bin_eval(tmp_path, *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and done.stdout == ""
    assert not (tmp_path / "runs").exists()


def test_missing_data_exits_2_before_anything_starts(stand: Stand, tmp_path: Path) -> None:
    env_file = _env_file(stand, tmp_path, DATA_PATH=str(tmp_path / "missing.jsonl"))
    done = _bin_eval(tmp_path, "--rehearse", str(env_file))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"bin/eval: DATA_PATH {tmp_path / 'missing.jsonl'} does not exist" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_an_agent_whose_network_does_not_reach_the_gateway_is_one_line(
    stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent (in a network namespace of its own, reaching only S3) is invoked through ACR, and
    the gateway's address refuses it: its app writes the error result the rehearsal reads."""
    env = {**os.environ, **stand.s3.env(), "MATH_AGENT_PROTOCOL": "chat"}
    with NetnsAgent(tmp_path, stand.s3.url, env) as agent:
        assert _rehearse_acr(stand, tmp_path, monkeypatch, agent_url=agent.url) == 1
    lines = _lines(capsys.readouterr().out)
    line = lines["rehearse.agent-reaches-gateway"]
    assert line.startswith(
        "FAIL rehearse.agent-reaches-gateway: 4 of 4 episodes: the agent never reached the gateway at http://"
    ), line
    assert (
        "cannot reach the policy model" in line and "(fix: the agent must reach this node's address" in line
    )
    assert lines["rehearse.agent"].startswith("PASS")
    assert [n for n, text in lines.items() if text.startswith("FAIL")] == ["rehearse.agent-reaches-gateway"]


def test_dry_run_prints_the_rehearsal_and_writes_nothing(stand: Stand, tmp_path: Path) -> None:
    done = _bin_eval(tmp_path, "--rehearse", "--dry-run", "--limit", "3", str(_env_file(stand, tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    runs = tmp_path / "runs" / "rehearse-e2e" / "rehearsal"
    # the toolkit's python (TOOLKIT_PYTHON here), not python3 from PATH
    assert done.stdout.startswith(f"{sys.executable} -m agentcore_slime.evaluate.rehearse --layout ")
    assert f"--data {stand.train_path} --limit 3 --out-dir '{runs}/<UTC time>'" in done.stdout
    assert "dry run: nothing written" in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--limit", "0"], "bin/eval: --limit 0 must be at least 1 (pass --limit N with N >= 1, or drop it)"),
        (["--checkpoint", "/models/x"], "bin/eval: --checkpoint has no use with --rehearse"),
    ],
)
def test_bad_options_exit_2_before_anything_starts(
    stand: Stand, tmp_path: Path, args: list[str], message: str
) -> None:
    done = _bin_eval(tmp_path, "--rehearse", *args, str(_env_file(stand, tmp_path)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and done.stdout == ""
    assert not (tmp_path / "runs").exists()


def test_a_model_dir_without_tokenizer_gets_the_toolkits_and_says_so(
    stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    monkeypatch.setattr(stand, "model_dir", empty)
    assert _rehearse_acr(stand, tmp_path, monkeypatch, data=_rows(tmp_path, 1)) == 0
    out = capsys.readouterr().out
    built = tmp_path / "out" / "stand-in-tokenizer"
    assert f"stand-in tokenizer: the toolkit's small Qwen2.5-like one ({built}): MODEL_DIR {empty} has none" \
        in out
    assert all(line.startswith("PASS") for line in _lines(out).values()), out


def _rows(tmp_path: Path, count: int) -> Path:
    """The first ``count`` prepared rows of the offline sample."""
    path = tmp_path / "rows.jsonl"
    lines = (REPO / "examples" / "data" / "gsm8k_sample_prepared.jsonl").read_text().splitlines()
    path.write_text("".join(line + "\n" for line in lines[:count]))
    return path


def test_the_rehearsal_alone_runs_a_training_step_with_every_part_stood_in(tmp_path: Path) -> None:
    """``bin/eval --rehearse`` with no env file, no AWS credentials and no model: the example agent
    started here, S3 on loopback, the toolkit's tokenizer; each stand-in said."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [str(REPO / "bin" / "eval"), "--rehearse", "--limit", "1"],
        env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "TOOLKIT_PYTHON": sys.executable,
             "TOOLKIT_RUNS_DIR": str(tmp_path / "runs"), "AWS_CONFIG_FILE": str(tmp_path / "none"),
             "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")},
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(line.startswith("PASS") for line in _lines(done.stdout).values()), done.stdout
    for part in ("stand-in policy:", "stand-in S3: a store on loopback", "stand-in tokenizer:",
                 "stand-in agent: the example math agent"):
        assert part in done.stdout, done.stdout
    # one group of two; the data-parallel split of NUM_GPUS=8 / TP_SIZE=2 pads it to four samples
    assert "; 2 episodes -> 4 samples (2 data-parallel padding)" in done.stdout, done.stdout
    [out_dir] = (tmp_path / "runs" / "rehearsal" / "rehearsal").iterdir()
    written = {p.name for p in out_dir.iterdir()}
    assert {"metrics.jsonl", "samples.jsonl", "report.html", "agent.log"} <= written


def test_a_python_without_the_packages_is_one_line_and_the_rehearsal_runs_the_toolkits(
    tmp_path: Path,
) -> None:
    """The rehearsal runs on the python bin/eval runs on (TOOLKIT_PYTHON), not ``python3`` from
    PATH: a python3 on PATH without the packages is no matter; a python without them (here one
    that sees no site-packages) is one line with the install command, exit 127."""
    from agentcore_slime.evaluate.rehearse_launch import MissingPackages, check_packages

    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    stub.chmod(0o755)
    wanted = r"python3 lacks aiohttp, httpx.*pip install -e \"python/\[rehearse\]\""
    with pytest.raises(MissingPackages, match=wanted):
        check_packages(str(stub), stand_ins=True)
    env = {**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}", "TOOLKIT_PYTHON": sys.executable,
           "TOOLKIT_RUNS_DIR": str(tmp_path / "runs")}
    done = subprocess.run([str(REPO / "bin" / "eval"), "--rehearse", "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith(f"{sys.executable} -m "), done.stdout + done.stderr


def test_bin_train_rehearse_is_the_same_rehearsal_in_its_own_name(stand: Stand, tmp_path: Path) -> None:
    """``bin/train --rehearse`` runs bin/eval's rehearsal launcher, its lines prefixed bin/train."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "TOOLKIT_PYTHON": sys.executable, "TOOLKIT_RUNS_DIR": str(tmp_path / "runs")}
    train = str(REPO / "bin" / "train")
    done = subprocess.run([train, "--rehearse", "--dry-run", str(_env_file(stand, tmp_path))],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"{sys.executable} -m agentcore_slime.evaluate.rehearse --layout ")
    assert done.stderr.startswith("bin/train: dry run: nothing written"), done.stderr
    done = subprocess.run([train, "--rehearse", "--limit", "0"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("bin/train: --limit 0 must be at least 1"), done.stderr
