"""End-to-end rehearsal of ``bin/eval`` on a CPU machine, on loopback only.

``bin/eval`` runs as a user runs it (a subprocess: the launcher, the rendered ``eval.sh``, its
SGLang server, ``python -m agentcore_slime.evaluate``) with the example math agent
(``examples/math_agent``: agentcore-rl-toolkit's ``AgentCoreRLApp`` under uvicorn, Strands, the
calculator, the exact-match reward) writing its results to S3 through botocore, and the
toolkit's gateway and launcher (local transport) unchanged. The evaluation module is also run
on its own against an engine it did not start (``--engine-url``), through the ACR transport.

Stand-ins (each speaks the real protocol over real HTTP):

- ``python -m sglang.launch_server``: ``tests/python/fakes/sglang_shim`` (on PYTHONPATH) serves
  ``fakes.sglang_server.FakeSGLang``'s SGLang protocol on the requested port, with
  ``fakes.math_policy`` playing the model (right or off by one, per question) and the locally
  built Qwen2.5-like toy tokenizer as the checkpoint.
- S3: moto's server mode (``fakes.s3.LocalS3``); ACR: ``fakes.acr_dataplane.AcrDataPlane``.
- ``pkill``/``pgrep``: recording stubs that find nothing (the stale-process cleanup must not touch
  the SGLang stand-ins of tests running beside this one; tests/bats/eval.bats covers it).

Validation rows: four GSM8K problems (right, wrong, right, right), one whose answer is not a
number (the agent rejects its payload and its app writes an error result: ``agent_crashed``) and
one whose metadata is not an object (no agent is started: ``bad_metadata``), each run twice.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prepare_gsm8k
import pytest
from agentcore_slime import evaluate
from agentcore_slime.gateway.engine import routing_key
from fakes.acr_dataplane import AcrDataPlane, AgentServer
from fakes.math_policy import math_policy
from fakes.s3 import LocalS3
from fakes.sglang_server import FakeSGLang
from fakes.toy_tokenizer import build_toy_tokenizer
from run_privacy import readable_by, shared_dir

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "examples" / "data" / "gsm8k_sample.jsonl"
SHIM = REPO / "tests" / "python" / "fakes" / "sglang_shim"
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/gsm8k_math_agent-AbCdEf1234"
PLANS = ("right", "wrong", "right", "right")
N_SAMPLES = 2


@dataclass
class Stand:
    """Everything running for the module."""

    workdir: Path
    s3: LocalS3
    bucket: str
    agent_url: str
    model_dir: Path
    train_path: Path
    validation_path: Path
    script_path: Path
    script: dict[str, dict[str, str]]


def _validation(workdir: Path) -> tuple[Path, Path, dict[str, dict[str, str]]]:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()][4:8]
    raw = workdir / "raw_test.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = workdir / "gsm8k"
    assert prepare_gsm8k.main(["--train", str(SAMPLE), "--validation", str(raw), "--out-dir", str(out)]) == 0
    script = {
        row["question"].strip(): {"expression": re.findall(r"<<([^=<>]+)=", row["answer"])[-1], "plan": plan}
        for row, plan in zip(rows, PLANS, strict=True)
    }
    validation = out / "validation.jsonl"
    with validation.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"prompt": "What is 1 + 1?", "metadata": {"prompt": "What is 1 + 1?",
                                                                          "answer": "two"}}) + "\n")
        handle.write(json.dumps({"prompt": "broken row", "metadata": "not an object"}) + "\n")
    script_path = workdir / "policy.json"
    script_path.write_text(json.dumps(script), encoding="utf-8")
    return out / "train.jsonl", validation, script


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    import agent as math_agent

    workdir = tmp_path_factory.mktemp("bin-eval")
    train_path, validation_path, script = _validation(workdir)
    model_dir = build_toy_tokenizer(workdir / "toy-qwen2.5")
    with LocalS3() as s3, pytest.MonkeyPatch.context() as env:
        for key, value in s3.env().items():  # before the agent's app builds its S3 client
            env.setenv(key, value)
        for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", "AGENT_URL", "S3_BUCKET"):
            env.delenv(key, raising=False)
        with AgentServer(math_agent.create_app()) as agent:
            yield Stand(workdir, s3, s3.create_bucket(), agent.url, model_dir, train_path, validation_path,
                        workdir / "policy.json", script)


def _env_file(stand: Stand, exp_id: str) -> Path:
    path = stand.workdir / f"{exp_id}.env"
    lines = [
        f"EXP_ID={exp_id}", f"S3_BUCKET={stand.bucket}", f"AGENT_URL={stand.agent_url}",
        f"MODEL_DIR={stand.model_dir}", f"DATA_PATH={stand.train_path}", "MODEL_TYPE=qwen2.5-3B",
        f"VAL_DATA_PATH={stand.validation_path}", f"N_SAMPLES_PER_EVAL_PROMPT={N_SAMPLES}",
        "EVAL_TEMPERATURE=1.0", "EVAL_MAX_RESPONSE_LEN=256", "GATEWAY_HOST=127.0.0.1", "GATEWAY_PORT=0",
        "ACR_TIMEOUT=30", "NUM_GPUS=1", "ROLLOUT_GPUS_PER_ENGINE=1", "TP_SIZE=1", "EVAL_HEALTH_TIMEOUT=60",
        "ROLLOUT_BATCH_SIZE=2", "N_SAMPLES_PER_PROMPT=2",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _stubs(directory: Path) -> Path:
    """pkill/pgrep that record their argv and find nothing, and an nvidia-smi (a GPU node)."""
    directory.mkdir(exist_ok=True)
    for name in ("pkill", "pgrep", "nvidia-smi"):
        stub = directory / name
        stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{directory}/calls"\nexit 1\n')
        stub.chmod(0o755)
    return directory


def check_results(out_dir: Path, stand: Stand, exp_id: str) -> dict[str, Any]:
    """episodes.jsonl and summary.json against the scripted outcomes; returns the summary."""
    episodes = [json.loads(line) for line in (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert [(e["row"], e["sample"]) for e in episodes] == [(r, s) for r in range(6) for s in range(N_SAMPLES)]
    for episode in episodes:
        row = episode["row"]
        if row < len(PLANS):
            assert episode["failure_class"] is None
            assert episode["reward"] == (1.0 if PLANS[row] == "right" else 0.0)
            assert episode["turns"] == 2 and episode["completion_tokens"] > 0 and episode["prompt_tokens"] > 0
        elif row == len(PLANS):
            assert episode["reward"] is None and episode["failure_class"] == "infrastructure"
            assert episode["failure_reason"] == "agent_crashed" and episode["turns"] == 0
            assert "status_code 500" in episode["failure_detail"]
        else:
            assert episode["failure_class"] == "infrastructure"
            assert episode["failure_reason"] == "bad_metadata"
        assert episode["seconds"] >= 0 and len(episode["session_id"]) == 36
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["rows"] == 6 and summary["episodes"] == 12 and summary["failed"] == 4
    # the eval figures: over the 8 valid episodes, the 4 infrastructure failures apart
    assert summary["valid"] == 8
    assert summary["accuracy"] == pytest.approx(6 / 8) and summary["mean_reward"] == pytest.approx(6 / 8)
    assert summary["pass_at_k"] == {"1": pytest.approx(0.75), "2": pytest.approx(0.75)}
    assert summary["failures"] == {"by_class": {"infrastructure": 4},
                                   "by_reason": {"agent_crashed": 2, "bad_metadata": 2}}
    assert summary["tokens"]["completion"] == sum(e["completion_tokens"] for e in episodes)
    settings = summary["settings"]
    assert settings["sampling"] == {"temperature": 1.0, "max_new_tokens": 256}
    assert settings["s3_results"].startswith(f"s3://{stand.bucket}/{exp_id}/eval-")
    # the agent wrote one result per started episode under the evaluation's prefix, as in training
    prefix = settings["s3_results"].removeprefix(f"s3://{stand.bucket}/")
    listing = stand.s3.client().list_objects_v2(Bucket=stand.bucket, Prefix=prefix)
    keys = {item["Key"].rsplit("/", 1)[1].removesuffix(".json") for item in listing.get("Contents", [])}
    assert keys == {e["session_id"] for e in episodes if e["row"] < len(PLANS) + 1}
    return summary


def test_bin_eval_end_to_end(stand: Stand, tmp_path: Path) -> None:
    """bin/eval: server up, every row through the agent, results written, server stopped."""
    stubs = _stubs(tmp_path / "stubs")
    pids = tmp_path / "server.pids"
    env = {
        **os.environ,
        "PATH": f"{stubs}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": f"{SHIM}:{REPO / 'tests' / 'python'}",
        "TOOLKIT_PYTHON": sys.executable,
        "TOOLKIT_RUNS_DIR": str(tmp_path / "runs"),
        "FAKE_SGLANG_SCRIPT": str(stand.script_path),
        "FAKE_SGLANG_PIDS": str(pids),
    }
    env.pop("TOOLKIT_DEBUG", None)
    done = subprocess.run([str(REPO / "bin" / "eval"), str(_env_file(stand, "e2e-eval"))], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    [out_dir] = (tmp_path / "runs" / "e2e-eval" / "eval").iterdir()
    summary = check_results(out_dir, stand, "e2e-eval")
    assert summary["checkpoint"] == str(stand.model_dir)
    assert "accuracy     75.0%" in done.stdout and "pass@2 75.0%" in done.stdout
    assert "2 x agent_crashed" in done.stdout
    for pid in map(int, pids.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    calls_file = stubs / "calls"
    calls = calls_file.read_text() if calls_file.exists() else ""
    # what an earlier evaluation left is found by its marker (stop_marked_processes), never by a
    # name pattern that could hit another run's or another program's processes
    assert "pkill" not in calls, calls


def test_evaluate_module_against_a_running_engine_through_acr(stand: Stand, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """python -m agentcore_slime.evaluate --engine-url: a server the user runs; ACR transport."""
    config = tmp_path / "toolkit.yaml"
    config.write_text(
        f"agent_runtime_arn: {ARN}\nagent_url: null\ns3_bucket: {stand.bucket}\nexp_id: e2e-eval-acr\n"
        "gateway_port: 0\ngateway_host: 127.0.0.1\nacr_timeout: 60\nacr_tps_limit: 1000\n"
        "result_poll_interval: 0.05\n",
        encoding="utf-8",
    )
    engine = FakeSGLang(math_policy(str(stand.model_dir), stand.script))
    with engine, AcrDataPlane({ARN: stand.agent_url}) as plane:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", plane.url)
        status = evaluate.main([
            "--config", str(config), "--engine-url", engine.url, "--model-dir", str(stand.model_dir),
            "--data", str(stand.validation_path), "--n-samples", str(N_SAMPLES), "--temperature", "1.0",
            "--max-new-tokens", "256", "--out-dir", str(tmp_path / "out"),
        ])
    assert status == 0
    summary = check_results(tmp_path / "out", stand, "e2e-eval-acr")
    assert summary["settings"]["transport"] == "acr"
    started = {c.session_id for c in plane.invocations}
    assert len(started) == 10 and {sid for _, sid in plane.stops} == started
    assert "accuracy     75.0%" in capsys.readouterr().out


def test_bin_eval_results_are_private_and_links_at_their_paths_change_nothing(
    stand: Stand, tmp_path: Path, other_user: Any
) -> None:
    """Issue 23 items 7 and 9, as a user runs bin/eval under umask 000 on a shared disk: a second
    local user reads nothing of the run (eval.log, eval/<time>/ results and server log, the
    rendered files), and links planted at the next two minutes' results directories (to a
    directory of the victim's) are passed over, not written through."""
    with shared_dir("acs-eval-") as shared:
        runs = shared / "runs"
        eval_dir = runs / "e2e-private" / "eval"
        eval_dir.mkdir(parents=True)
        victim = shared / "victim"
        victim.mkdir()
        now = time.time()
        planted = {time.strftime("%Y%m%d-%H%M%S", time.gmtime(now + s)) for s in range(-1, 120)}
        for stamp in planted:
            (eval_dir / stamp).symlink_to(victim, target_is_directory=True)
        stubs = _stubs(tmp_path / "stubs")
        env = {
            **os.environ,
            "PATH": f"{stubs}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": f"{SHIM}:{REPO / 'tests' / 'python'}",
            "TOOLKIT_PYTHON": sys.executable,
            "TOOLKIT_RUNS_DIR": str(runs),
            "FAKE_SGLANG_SCRIPT": str(stand.script_path),
            "FAKE_SGLANG_PIDS": str(tmp_path / "server.pids"),
        }
        env.pop("TOOLKIT_DEBUG", None)
        done = subprocess.run([str(REPO / "bin" / "eval"), str(_env_file(stand, "e2e-private"))], env=env,
                              capture_output=True, text=True, timeout=240, check=False, umask=0)
        assert done.returncode == 0, done.stdout + done.stderr
        assert list(victim.iterdir()) == []  # nothing went through a planted link
        [out_dir] = [p for p in eval_dir.iterdir() if not p.is_symlink()]
        assert out_dir.name.rsplit("-", 1)[0] in planted and out_dir.name.count("-") == 2  # <time>-2
        check_results(out_dir, stand, "e2e-private")
        assert {p.name for p in out_dir.iterdir()} >= {"summary.json", "episodes.jsonl", "sglang.log"}
        run_dir = runs / "e2e-private"
        for path in [run_dir, eval_dir, out_dir]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        for path in [*out_dir.iterdir(), run_dir / "eval.log", run_dir / "toolkit.yaml", run_dir / "env"]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        control = shared / "control.txt"  # the probe does see what is readable
        control.write_text("readable\n")
        control.chmod(0o644)
        assert set(readable_by(other_user, shared)) == {str(shared), str(runs), str(victim), str(control)}
        assert readable_by(other_user, run_dir) == []


def _two_engine_run(stand: Stand, tmp_path: Path, exp_id: str, **extra_env: str) -> tuple[Any, Path, Path]:
    """bin/eval with NUM_GPUS=2 and EVAL_TP_SIZE 1, SGLANG_DATA_PARALLEL_SIZE unset: two engines
    (every GPU it is given), no router: the gateway is given both engines' URLs; two gateway
    processes."""
    env_file = _env_file(stand, exp_id)
    # and two gateway processes: bin/eval uses training's gateway pool (GATEWAY_PROCESSES)
    text = env_file.read_text().replace("NUM_GPUS=1", "NUM_GPUS=2") + "GATEWAY_PROCESSES=2\n"
    env_file.write_text(text, encoding="utf-8")
    requests = tmp_path / "requests.log"
    env = {
        **os.environ,
        "PATH": f"{_stubs(tmp_path / 'stubs')}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": f"{SHIM}:{REPO / 'tests' / 'python'}",
        "TOOLKIT_PYTHON": sys.executable,
        "TOOLKIT_RUNS_DIR": str(tmp_path / "runs"),
        "FAKE_SGLANG_SCRIPT": str(stand.script_path),
        "FAKE_SGLANG_PIDS": str(tmp_path / "server.pids"),
        "FAKE_SGLANG_REQUESTS": str(requests),
        "TOOLKIT_SERVER_GRACE": "3",
        **extra_env,
    }
    env.pop("TOOLKIT_DEBUG", None)
    done = subprocess.run([str(REPO / "bin" / "eval"), str(env_file)], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    [out_dir] = (tmp_path / "runs" / exp_id / "eval").iterdir()
    return done, out_dir, requests


def _sessions_by_engine(requests: Path) -> dict[str, set[str]]:
    by_engine: dict[str, set[str]] = {}
    for line in requests.read_text().splitlines():
        port, key = line.split()
        by_engine.setdefault(port, set()).add(key)
    return by_engine


def test_bin_eval_two_engines_without_a_router(stand: Stand, tmp_path: Path) -> None:
    """Both engines serve, each session's calls stay on one engine, the summary is training's;
    no router is started (sglang-router 0.3.2 takes no key: any local user could join it as a
    worker, read the engine key and the routing headers, and remove engines), and the engines
    see each session only by its routing key, never its id (the session's credential)."""
    done, out_dir, requests = _two_engine_run(stand, tmp_path, "e2e-eval-dp")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bin/eval: plan: 2 engines x TP 1 = 2 of NUM_GPUS=2 GPUs, no router" in done.stderr
    summary = check_results(out_dir, stand, "e2e-eval-dp")
    by_engine = _sessions_by_engine(requests)
    assert len(by_engine) == 2, by_engine  # both engines received requests
    first, second = by_engine.values()
    assert not first & second, "a session's calls went to two engines"
    episodes = [json.loads(line) for line in (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert first | second == {routing_key(e["session_id"]) for e in episodes if e["turns"] > 0}
    assert summary["settings"]["engine_url"] != summary["settings"]["engine_url"].replace("127.0.0.1", "")
    assert (out_dir / "sglang-0.log").is_file() and (out_dir / "sglang-1.log").is_file()
    assert not (out_dir / "router.log").exists() and "sglang_router" not in done.stderr


def test_bin_eval_one_engine_dies_mid_run(stand: Stand, tmp_path: Path) -> None:
    """Engine 1 crashes once the engines have served 3 calls between them (not at its own 3rd:
    which sessions reach it depends on their random ids' digests, and in about one run in 20 it
    would get fewer than 3 calls and never die): the run goes on, every episode is accounted for
    (the agent's outcome, or an infrastructure failure with its reason code), the summary is
    written and printed, and bin/eval exits 1 naming the dead engine.

    The gateway's engine client passes the dead engine over (connection refused) and retries its
    sessions' calls on the live engine, so here no episode beyond the 4 scripted failures is lost;
    a call whose retries run out fails its episode as an infrastructure failure
    (``gateway_error`` / ``agent_crashed``), as in training.
    """
    done, out_dir, requests = _two_engine_run(
        stand, tmp_path, "e2e-eval-dies", FAKE_SGLANG_DIE_ON_GPU="1", FAKE_SGLANG_DIE_AFTER_REQUESTS="3")
    assert done.returncode == 1, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert "SGLang engine 1 exited with status 3 during the evaluation; the gateway sends its" in output
    assert "1 SGLang engine(s) died during the evaluation" in output
    summary = json.loads((out_dir / "summary.json").read_text())
    episodes = [json.loads(line) for line in (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert summary["episodes"] == len(episodes) == 12 and "episodes     12: " in done.stdout
    failed = [e for e in episodes if e["failure_class"] is not None]
    assert summary["failed"] == len(failed) >= 4 and summary["valid"] == 12 - len(failed)
    known = {"agent_crashed", "bad_metadata", "gateway_error", "timeout", "invoke_error", "result_unreadable"}
    assert all(e["failure_class"] == "infrastructure" and e["failure_reason"] in known for e in failed)
    reasons = [e["failure_reason"] for e in failed]
    assert summary["failures"]["by_reason"] == {r: reasons.count(r) for r in sorted(set(reasons))}
    assert summary["mean_reward"] == pytest.approx(
        sum(e["reward"] for e in episodes if e["failure_class"] is None) / summary["valid"])
    assert len(requests.read_text().splitlines()) >= 3  # the calls that ended engine 1
