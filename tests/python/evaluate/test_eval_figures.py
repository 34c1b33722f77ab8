"""One definition of the eval figures, seen the same everywhere, and the eval step's tail cut.

One eval step of the rollout (``generate_rollout(..., evaluation=True)``: the real state holder,
local transport, moto's S3, the stand-in agent and gateway of this folder) writes its
``metrics.jsonl`` line and hands slime its data; bin/eval's episode machinery
(:mod:`agentcore_slime.evaluate`: its ``EpisodeRunner`` and ``run_all`` over the training
launcher) runs the same rows against the same agent and writes ``summary.json``; the report is
built from that run directory. The reward mean, the accuracy and the failure count must be the
same number in all four places (slime's ``eval/<name>`` computed with slime's own formula,
``sum(rewards) / len(rewards)``, slime/ray/rollout.py:1267 at fa3c990).
"""

from __future__ import annotations

import asyncio
import html
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agentcore_slime import rollout
from agentcore_slime.episodes import make_runner
from agentcore_slime.evaluate.cli import write_results
from agentcore_slime.evaluate.episodes import EpisodeRunner, run_all
from agentcore_slime.evaluate.summary import summarize
from agentcore_slime.report.build import load_run
from agentcore_slime.report.page import render_report
from agentcore_slime.settings.config import load_config
from fakes.standins import Behaviour, make_args
from slime.utils.eval_config import EvalDatasetConfig

#: per row: what the agent does and the reward it writes (two episodes per row)
CASES = (("ok", 1.0), ("ok", 0.0), ("error", 1.0), ("ok", 0.5), ("hang", 1.0))


def behaviour(payload: dict[str, Any], sid: str) -> Behaviour:
    if payload["case"] == "error":
        return Behaviour(error="tool crashed")
    if payload["case"] == "hang":
        return Behaviour(result=None)
    return Behaviour(result={"rewards": payload["score"]}, delay=0.02)


def _rows(path: Path, cases: tuple[tuple[str, float], ...]) -> str:
    path.write_text("".join(
        json.dumps({"prompt": f"q{i}", "metadata": {"case": c, "score": s, "q": i}}) + "\n"
        for i, (c, s) in enumerate(cases)
    ))
    return str(path)


def _args(tmp_path: Path, bucket: str, url: str, data: str, **more: Any) -> Any:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    datasets = [EvalDatasetConfig(name="math", path=data, n_samples_per_eval_prompt=2)]
    return make_args(agent_url=url, s3_bucket=bucket, eval_datasets=datasets, acr_timeout=2,
                     custom_config_path=str(run_dir / "toolkit.yaml"), **more)


def _bin_eval_summary(args: Any, gateway: Any, data: str, out_dir: Path) -> dict[str, Any]:
    """bin/eval's half: the same rows through evaluate's runner, summary.json written."""
    config = load_config(args)
    payloads = [json.loads(line)["metadata"] for line in Path(data).read_text().splitlines()]

    async def go() -> list[Any]:
        with ThreadPoolExecutor(max_workers=8) as pool:
            launcher = make_runner(config, pool)
            try:
                runner = EpisodeRunner(gateway, launcher, pool, "eval-bin", {"temperature": 0.0})
                return await run_all(runner, payloads, 2, config.max_concurrent)
            finally:
                await launcher.close()

    episodes = asyncio.run(go())
    summary = {"checkpoint": "/m", "data": data, "n_samples": 2, "out_dir": str(out_dir),
               **summarize(episodes, 2, 1.0)}
    out_dir.mkdir(parents=True)
    write_results(out_dir, episodes, summary)
    return summary


def _cells(page: str, table: str) -> list[str]:
    """The cells of the first data row of the table that starts at ``table``."""
    body = page.split(table, 1)[1].split("</table>", 1)[0]
    row = body.split("</tr>", 2)[1]
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_one_eval_step_figures_are_identical_everywhere(
    s3_bucket: str, agents: Any, gateway: Any, shim_state: Any, tmp_path: Path
) -> None:
    agent = agents.start(behaviour)
    data = _rows(tmp_path / "math.jsonl", CASES)
    args = _args(tmp_path, s3_bucket, agent.url, data)
    output = rollout.generate_rollout(args, 4, None, evaluation=True)
    run_dir = tmp_path / "run"
    summary = _bin_eval_summary(args, gateway, data, run_dir / "eval" / "20261125-120000")

    # by hand: valid rewards 1, 1, 0, 0, 0.5, 0.5 (the error row and the hanging row fail)
    expected_mean, expected_accuracy = 3.0 / 6, 4 / 6
    [line] = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()
              if json.loads(x)["kind"] == "eval"]
    rewards = output.data["math"]["rewards"]
    slime_eval = sum(rewards) / len(rewards)  # slime's own eval/<name>
    assert summary["mean_reward"] == line["reward"]["mean"] == slime_eval == expected_mean
    assert summary["accuracy"] == line["reward"]["pass_rate"] == expected_accuracy
    assert output.metrics["eval/math/reward_mean"] == slime_eval
    assert output.metrics["eval/math/accuracy"] == summary["accuracy"]
    assert summary["failed"] == line["episodes"]["failed"] == output.metrics["eval/math/failed"] == 4
    assert summary["failures"]["by_reason"] == line["episodes"]["failed_by_reason"] == {
        "agent_crashed": 2, "timeout": 2}
    data_math = output.data["math"]
    assert len(data_math["rewards"]) == len(data_math["samples"]) == len(data_math["truncated"]) == 6

    page = render_report(load_run(run_dir))
    step_cells = _cells(page, '<table class="eval-steps">')
    eval_cells = _cells(page, '<table id="evaluations">')
    assert step_cells[1:3] == [f"{expected_mean:.3f}", f"{expected_accuracy:.3f}"] and step_cells[4] == "4"
    assert eval_cells[4:6] == [f"{expected_accuracy:.3f}", f"{expected_mean:.3f}"]
    assert eval_cells[7] == "4"  # failed (the cost column follows)


def test_every_episode_failed_gives_slime_a_nan_not_a_division_by_zero(
    s3_bucket: str, agents: Any, gateway: Any, shim_state: Any, tmp_path: Path
) -> None:
    agent = agents.start(behaviour)
    data = _rows(tmp_path / "bad.jsonl", (("error", 1.0), ("error", 0.0)))
    output = rollout.generate_rollout(_args(tmp_path, s3_bucket, agent.url, data), 0, None, evaluation=True)
    entry = output.data["math"]
    assert len(entry["rewards"]) == len(entry["samples"]) == len(entry["truncated"]) == 1
    assert math.isnan(sum(entry["rewards"]) / len(entry["rewards"]))  # slime's formula: no ZeroDivisionError
    assert math.isnan(output.metrics["eval/math/accuracy"])
    assert output.metrics["eval/math/valid"] == 0 and output.metrics["eval/math/failed"] == 4
    [line] = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert line["reward"]["mean"] is None and line["episodes"]["failed"] == 4


def test_eval_timeout_cuts_the_tail_of_an_eval_step(
    s3_bucket: str, agents: Any, gateway: Any, shim_state: Any, tmp_path: Path
) -> None:
    """ACR_TIMEOUT 30 s, EVAL_TIMEOUT 1 s: the hanging rows are cut at 1 s as eval_timeout."""
    agent = agents.start(behaviour)
    data = _rows(tmp_path / "math.jsonl", (("ok", 1.0), ("hang", 1.0)))
    args = _args(tmp_path, s3_bucket, agent.url, data, eval_timeout=1.0)
    args.acr_timeout = 30
    output = rollout.generate_rollout(args, 0, None, evaluation=True)
    # cut by EVAL_TIMEOUT (had they run to ACR_TIMEOUT, they would have failed as timeout)
    assert output.metrics["eval/math/failures/eval_timeout"] == 2
    assert output.data["math"]["rewards"] == [1.0, 1.0]
    [line] = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert line["episodes"]["failed_by_reason"] == {"eval_timeout": 2}
    # the cut episodes' sessions were ended: engine calls aborted, nothing left open at the gateway
    assert gateway.live == 0 and len(gateway.aborted) == 2


def test_bin_eval_run_all_cuts_at_eval_timeout() -> None:
    """evaluate.run_all: an episode not done at the deadline fails as eval_timeout, with its session id."""
    from agentcore_slime.evaluate.episodes import Episode

    class Slow:
        async def run(self, row: int, sample: int, metadata: Any, sid: str | None = None) -> Episode:
            await asyncio.sleep(metadata["sleep"])
            return Episode(row, sample, sid or "", 1.0, None, None, None, 1, 1, 1, False, 0.0)

    # the 60 s episode is cut at the deadline: had it run, it would have ended without a failure
    episodes = asyncio.run(run_all(Slow(), [{"sleep": 0.0}, {"sleep": 60.0}], 1, 4, limit=0.5))  # type: ignore[arg-type]
    assert [e.failure_reason for e in episodes] == [None, "eval_timeout"]
    assert episodes[1].failure_class == "infrastructure" and len(episodes[1].session_id) == 36
    summary = summarize(episodes, 1, 0.5)
    assert summary["failed"] == 1 and summary["mean_reward"] == 1.0


@pytest.fixture(autouse=True)
def _no_trace_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACE_LOG", raising=False)
