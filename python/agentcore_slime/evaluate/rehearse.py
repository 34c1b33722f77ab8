"""``bin/eval --rehearse``: try the wiring of a run on CPU, before any GPU is reserved.

A few rows of the training data run as real episodes: the user's own agent (ACR or
``AGENT_URL``), their bucket, the real gateway in its own process (as in training), and in place
of SGLang the stand-in policy of :mod:`.standin` (it calls the first tool offered once, then
answers a fixed text). The episodes go through the evaluation's episode code
(:class:`~agentcore_slime.evaluate.episodes.EpisodeRunner`, the training launcher, the S3 result
watcher), so what fails here fails in training. What the episodes show becomes one line per
check, in bin/doctor's format (``PASS|WARN|FAIL rehearse.<check>: found (fix: how)``):

- ``data``: the rows' metadata are objects (the agent's payload);
- ``bucket``: the results bucket answers a HEAD from this machine;
- ``gateway``: the gateway started, and the address it gives agents is one they can reach
  (loopback is refused for an ACR agent);
- ``agent``: the agent takes the invocation;
- ``agent-reaches-gateway``: the agent called the model through the gateway;
- ``payload``: the agent did not crash on the payload before its first model call;
- ``tool-call``: the agent ran the tool the stand-in called and came back to the model;
- ``results``: its result landed under ``s3://<bucket>/<exp_id>/<input_id>/``;
- ``reward``: the result holds a readable reward.

Each row runs ``--samples-per-prompt`` times (a GRPO group). The episodes then become the
training step they stand for (:mod:`.rehearse_step`): samples made by the rollout's trace merge,
advantages by the reward hook slime calls, ``metrics.jsonl``, ``episodes/train-000000.jsonl`` and
``samples.jsonl`` as training records them, and ``report.html`` (bin/report's page, marked as a
rehearsal, with every sample's loss mask). ``episodes.jsonl`` and ``summary.json`` are as
bin/eval writes them. What is missing is stood in for and said (:mod:`.rehearse_parts`: S3 on
loopback, the example agent, the toolkit's tokenizer). Exit status: 0 no check failed, 1 a check
failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentcore_slime.gateway.engine import routing_key
from agentcore_slime.observe.records import EpisodeRecord
from agentcore_slime.observe.runlog import write_whole
from agentcore_slime.preflight.report import Result, Status, exit_status, failed, passed, summary, warned
from agentcore_slime.rundir import private_dir
from agentcore_slime.settings.config import ToolkitConfig

from .cli import UsageError, UsageParser, read_config
from .episodes import Episode
from .rehearse_parts import StandIns, aws_credentials_found
from .rehearse_step import STEP, data_source, run_step, slime_args, stand_in_slime, write_samples
from .standin import ANSWER, SessionLog, StandInEngine, StandInPolicy
from .summary import summarize

PROG = f"{os.environ.get('TOOLKIT_LAUNCHER') or 'bin/eval'} --rehearse"
DEFAULT_ROWS = 2
#: episodes per row: a GRPO group of two, so the advantages are computed as training does
DEFAULT_SAMPLES = 2
#: the parts that are always real, said at the end of every rehearsal
REAL_PARTS = (
    "real: slime's rollout function (over-sampling and the tail cut, the dynamic filter, data-parallel "
    "padding), the gateway (its own process, the run's renderer and parsers), the training episode "
    "launcher and its S3 result watcher, trace merging into samples (loss masks), the reward hook "
    "(GRPO advantages), metrics.jsonl and the report"
)
NOT_REHEARSED = "not rehearsed: a model (no GPU, no weights, no SGLang), slime's training (no update)"
#: the dataset name the report's episode browser shows the rehearsal under
DATASET = "rehearsal"
BANNER = (
    "*** REHEARSAL: a STAND-IN POLICY plays the model (no SGLang, no GPU, no weights): it calls "
    "the first tool offered once, then answers {answer!r}, with the row's answer in every other episode "
    "of a group and a wrong one in the rest. Rewards say nothing about any model. ***"
)
#: words an agent's error uses when it cannot open a connection to the model's address
_UNREACHABLE_WORDS = ("connect", "unreachable", "reach the", "timed out", "name or service", "no route")


def parser() -> argparse.ArgumentParser:
    """The command line (what bin/eval --rehearse runs once the env file is validated)."""
    p = UsageParser(prog="python -m agentcore_slime.evaluate.rehearse", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the rehearsal's toolkit.yaml (bin/eval renders it)")
    p.add_argument("--model-dir", required=True, help="the model's HF directory (its tokenizer only)")
    p.add_argument("--data", required=True, help="JSONL rows whose metadata are the agent's payloads")
    p.add_argument("--limit", type=int, default=DEFAULT_ROWS, help=f"rows to run (default {DEFAULT_ROWS})")
    p.add_argument("--samples-per-prompt", type=int, default=DEFAULT_SAMPLES,
                   help=f"episodes per row, a GRPO group (default {DEFAULT_SAMPLES})")
    p.add_argument("--out-dir", required=True, help="where the episodes and checks are written")
    p.add_argument("--s3", choices=("auto", "loopback", "bucket"), default="auto",
                   help="auto (default): the bucket when AWS credentials are found, else a store on "
                        "loopback; loopback: always the loopback store; bucket: always the bucket")
    p.add_argument("--example-agent", action="store_true",
                   help="start examples/math_agent here at AGENT_URL's port (no agent was given)")
    p.add_argument("--layout", default="{}", help="slime's GPU layout as JSON (actor_num_gpus_per_node, "
                   "tensor_model_parallel_size): what the data-parallel padding divides by")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


def say(message: str) -> None:
    """One progress line on stderr."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- diagnosis
@dataclass(frozen=True)
class Finding:
    """Where one failed episode broke, as a check name, what was seen and its fix."""

    check: str
    found: str
    fix: str


#: the episode checks in the order an episode passes them
STAGES = ("data", "agent", "agent-reaches-gateway", "payload", "tool-call", "results", "reward")


@dataclass(frozen=True)
class Wiring:
    """What the fixes name: the agent, the gateway's address, where results go."""

    agent: str
    acr: bool
    gateway_url: str
    results: str


def _unreachable(detail: str) -> bool:
    lowered = detail.lower()
    return any(word in lowered for word in _UNREACHABLE_WORDS)


def diagnose(episode: Episode, log: SessionLog, wiring: Wiring) -> Finding | None:
    """Where ``episode`` broke (None when it returned a reward).

    :param episode: the episode as the evaluation recorded it.
    :param log: what the stand-in policy did in its session.
    :param wiring: the rehearsal's agent, gateway address and results prefix.
    """
    if episode.ok:
        return None
    code, detail, sid = episode.failure_reason, episode.failure_detail or "", episode.session_id[:8]
    where = f"session {sid}: {detail}"
    if code == "bad_metadata":
        return Finding("data", f"row {episode.row}: {detail}",
                       "each line needs a 'metadata' object: it is the agent's payload")
    if code == "invoke_error":
        fix = ("check AGENT_RUNTIME_ARN (and its region) and that these credentials may call "
               "bedrock-agentcore:InvokeAgentRuntime" if wiring.acr
               else "start the agent, and check AGENT_URL")
        return Finding("agent", f"invoking {wiring.agent} failed ({where})", fix)
    if episode.turns == 0 and log.calls == 0:
        if code == "timeout" or _unreachable(detail):
            return Finding(
                "agent-reaches-gateway",
                f"the agent never reached the gateway at {wiring.gateway_url} ({where})",
                "the agent must reach this node's address: on ACR run the runtime in VPC mode in a "
                "subnet that routes to this node and open GATEWAY_PORT (set it, not 0) to it in the "
                "node's security group; or set GATEWAY_HOST to this node's address in that network",
            )
        return Finding("payload", f"the agent crashed on the payload of row {episode.row} before calling "
                       f"the model ({where})",
                       "the payload is the row's metadata plus _rollout: make DATA_PATH rows fit what the "
                       "agent reads (the agent's log for that session says more)")
    if code in ("agent_crashed", "gateway_error", "other") and log.tool_called and not log.came_back:
        return Finding("tool-call", f"the agent failed after the stand-in called {log.tool_called}"
                       f"({log.tool_arguments}) ({where})",
                       "the tool must cope with any arguments its schema allows: see the agent's log "
                       "for that session")
    if code == "timeout":
        return Finding("results", f"no result landed under {wiring.results} although the agent talked to "
                       f"the model ({episode.turns} calls; {where})",
                       "the agent must write s3://<_rollout.s3_bucket>/<exp_id>/<input_id>/<session id>.json "
                       "(agentcore-rl-toolkit's app does); give its role (ACR: the execution role) "
                       "s3:PutObject on the bucket")
    return Finding("reward", f"the result has no readable reward ({where})",
                   "the agent's result must be {\"rewards\": <number>} with status_code 200")


def episode_checks(
    episodes: Sequence[Episode], logs: dict[str, SessionLog], wiring: Wiring
) -> list[Result]:
    """One line per episode check: FAIL where episodes broke (the first one's detail), PASS
    where every episode that got there went on; a check no episode reached has no line.

    :param episodes: the rehearsal's episodes.
    :param logs: the stand-in's record of each session.
    :param wiring: the rehearsal's agent, gateway address and results prefix.
    """
    findings = {e.session_id: diagnose(e, logs.get(e.session_id, SessionLog()), wiring) for e in episodes}

    def stage(episode: Episode) -> int:
        finding = findings[episode.session_id]
        return STAGES.index(finding.check) if finding else len(STAGES)

    results = []
    for index, check in enumerate(STAGES):
        broke = [e for e in episodes if stage(e) == index]
        went_on = [e for e in episodes if stage(e) > index]
        name = f"rehearse.{check}"
        if broke:
            finding = findings[broke[0].session_id]
            assert finding is not None
            count = f"{len(broke)} of {len(episodes)} episodes: " if len(episodes) > 1 else ""
            results.append(failed(name, count + finding.found, finding.fix))
        elif went_on:
            results.append(_passed(check, went_on, logs, wiring))
    return results


def _passed(check: str, episodes: Sequence[Episode], logs: dict[str, SessionLog], wiring: Wiring) -> Result:
    n, name = len(episodes), f"rehearse.{check}"
    if check == "tool-call":
        return _tool_check(episodes, logs)
    texts = {
        "data": f"{n} rows' metadata are objects (the agent's payloads)",
        "agent": f"{wiring.agent} took {n} invocation(s)",
        "agent-reaches-gateway": f"the agent called the model at {wiring.gateway_url} ({n} episodes)",
        "payload": f"the agent took the payload of {n} row(s) and went on to the model",
        "results": f"{n} result(s) landed under {wiring.results}",
        "reward": "rewards read: " + ", ".join(f"{e.reward:g}" for e in episodes if e.reward is not None),
    }
    return passed(name, texts[check])


def _tool_check(episodes: Sequence[Episode], logs: dict[str, SessionLog]) -> Result:
    sessions = [logs.get(e.session_id, SessionLog()) for e in episodes]
    problem = next((log.problem for log in sessions if log.problem), "")
    if problem:
        return failed("rehearse.tool-call", f"{problem}: the gateway would not see the model's tool calls",
                      "set SGLANG_TOOL_CALL_PARSER (or RENDERER_FAMILY) to the model's tool-call format")
    called = [(log, e) for log, e in zip(sessions, episodes, strict=True) if log.tool_called]
    if not called:
        return warned("rehearse.tool-call", "no tool found in the prompt: tool calls were not rehearsed",
                      "if the agent offers tools, its chat template writes them in a form the stand-in "
                      "cannot read (it looks for JSON tool specs); the rest of the wiring was tried")
    back = sum(1 for log, _ in called if log.came_back)
    tools = sorted({log.tool_called for log, _ in called})
    return passed("rehearse.tool-call", f"the agent ran {', '.join(tools)} for the stand-in's call and came "
                  f"back to the model ({back} of {len(called)} episodes)")


# --------------------------------------------------------------------------- steps
def check_bucket(config: ToolkitConfig) -> Result:
    """HEAD the results bucket from this machine (what the rollout lists results in)."""
    import boto3
    import botocore.exceptions

    session = boto3.session.Session(region_name=config.region) if config.region else boto3.session.Session()
    bucket = config.s3_bucket
    try:
        session.client("s3").head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", "error"))
        if code in ("404", "NoSuchBucket"):
            return failed("rehearse.bucket", f"s3://{bucket} does not exist",
                          "create it (aws s3 mb s3://<name>) or fix S3_BUCKET")
        return failed("rehearse.bucket", f"s3://{bucket} answers {code}",
                      "these credentials need s3:ListBucket and s3:GetObject on it (the agent's role "
                      "s3:PutObject); check S3_BUCKET and its region")
    except botocore.exceptions.BotoCoreError as exc:
        return failed("rehearse.bucket", f"cannot reach S3 for s3://{bucket}: {exc}",
                      "check the network, the credentials and AWS_ENDPOINT_URL_S3")
    return passed("rehearse.bucket", f"s3://{bucket} answers from this machine")


def check_gateway_address(url: str, acr: bool) -> Result:
    """The address agents are given: an ACR agent can never reach a loopback one."""
    host = url.split("//", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if acr and (host.startswith("127.") or host in ("::1", "localhost")):
        return failed("rehearse.gateway", f"the gateway gives agents {url}, a loopback address no ACR agent "
                      "can reach", "unset GATEWAY_HOST (the gateway then serves every interface and gives "
                      "this node's address) or set it to this node's address in the agent's network")
    return passed("rehearse.gateway", f"the real gateway serves the stand-in policy at {url}")


def recorded_episodes(out_dir: Path, rows: int) -> list[Episode]:
    """The step's episodes as the rollout recorded them (``episodes/train-000000.jsonl``), in
    bin/eval's form (the diagnosis, ``episodes.jsonl`` and ``summary.json`` read that)."""
    path = out_dir / "episodes" / f"train-{STEP:06d}.jsonl"
    found = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        r = EpisodeRecord.from_json(json.loads(line))
        calls = r.calls
        found.append(Episode(
            r.group % rows, r.index, r.session_id, r.reward, r.failure_class, r.failure or None,
            r.reason or None, len(calls), sum(c.prompt_tokens for c in calls),
            sum(c.completion_tokens for c in calls), any(c.finish_reason == "length" for c in calls),
            r.seconds))
    return found


def write_outputs(out_dir: Path, episodes: Sequence[Episode], checks: Sequence[Result],
                  settings: dict[str, Any], seconds: float, parts: dict[str, Any]) -> None:
    """Write what bin/eval writes (``episodes.jsonl``, ``summary.json`` with ``rehearsal: true``,
    the checks and which parts were stand-ins), each file whole and private."""
    write_whole(out_dir / "episodes.jsonl", "".join(json.dumps(asdict(e)) + "\n" for e in episodes))
    samples = max((e.sample for e in episodes), default=0) + 1
    document = {
        "rehearsal": True,
        "stand_in_policy": f"calls the first tool offered once, then answers {ANSWER.format('N')!r}, right "
                           "and wrong in turn",
        **parts,
        "checks": [{**asdict(c), "status": c.status.value} for c in checks],
        **summarize(list(episodes), samples, seconds),
        "settings": settings,
    }
    write_whole(out_dir / "summary.json", json.dumps(document, indent=1) + "\n")


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Run the rehearsal; return its exit status.

    :param argv: arguments (default: ``sys.argv[1:]``).
    """
    try:
        args = parser().parse_args(argv)
        if args.limit < 1 or args.samples_per_prompt < 1:
            raise UsageError(f"--limit {args.limit} and --samples-per-prompt {args.samples_per_prompt} must "
                             "be at least 1")
        if not Path(args.data).is_file():
            raise UsageError(f"--data {args.data} does not exist (point it at the training JSONL)")
        config = read_config(args.config)
        rows = load_rows(args.data, args.limit + 1)  # one more for the over-sampled group
        layout = json.loads(args.layout)
    except (UsageError, ValueError) as exc:
        say(str(exc))
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # the gateway's process says these once; the stand-in loading the same tokenizer would repeat them
    logging.getLogger("agentcore_slime.gateway.family").setLevel(logging.ERROR)
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    out_dir = Path(args.out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        private_dir(out_dir)  # bin/eval made it; made here (0700) when the module runs alone
    except OSError as exc:
        say(f"cannot use --out-dir {out_dir}: {exc} (choose another directory)")
        return 2
    options = Options(args.samples_per_prompt, args.s3, args.example_agent, layout, args.config, args.limit)
    return Rehearsal(config, rows, args.model_dir, out_dir, options).run()


def load_rows(data: str, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows of the JSONL, as slime's data source reads them (prompt, metadata).

    :raises UsageError: the file holds no rows.
    """
    from agentcore_slime.datasets import EvalSpec
    from agentcore_slime.datasets import load_rows as read

    rows = read(EvalSpec(name="train", path=data, n_samples=1, sampling={}))[:limit]
    if not rows:
        raise UsageError(f"--data {data} has no rows (one JSON object per line, with a 'metadata' object)")
    return [{"prompt": r.prompt, "metadata": r.metadata, "label": r.label} for r in rows]


def _data_check(payloads: list[Any]) -> Result:
    bad = [i for i, p in enumerate(payloads) if not isinstance(p, dict)]
    if bad:
        return failed("rehearse.data", f"row {bad[0]}'s metadata is {type(payloads[bad[0]]).__name__}, "
                      "not an object", "each line needs a 'metadata' object: it is the agent's payload")
    return passed("rehearse.data",
                  f"{len(payloads)} row(s), each with a metadata object (the agent's payload)")


@dataclass(frozen=True)
class Options:
    """How the rehearsal runs: episodes per row, which S3, whether to start the example agent."""

    samples_per_prompt: int = DEFAULT_SAMPLES
    s3: str = "auto"
    example_agent: bool = False
    layout: dict[str, int] | None = None  #: slime's GPU layout (NUM_GPUS, TP_SIZE of the env file)
    config: str = ""  #: the run's toolkit.yaml, whose keys slime's args carry
    #: prompt groups the step keeps (the rows beyond them feed the over-sampled group: each group
    #: its own row, so the stand-in's right-then-wrong answers split every group)
    groups: int = 0


def rehearse(config: ToolkitConfig, rows: list[dict[str, Any]], model_dir: str, out_dir: Path,
             options: Options | None = None) -> int:
    """Run the checks and the episodes; print one line per check; write the outputs.

    :param config: the run's settings (agent, bucket, gateway).
    :param rows: the data rows (``prompt``, ``metadata``: the agent's payload).
    :param model_dir: the model's HF directory (tokenizer and chat template).
    :param out_dir: where the outputs go.
    :param options: episodes per row, S3, the example agent.
    :returns: the exit status (0 no check failed, 1 one did).
    """
    return Rehearsal(config, rows, model_dir, out_dir, options).run()


class Rehearsal:
    """One rehearsal: the checks found so far, then the outputs.

    Each step that fails ends the rehearsal with what was found up to there (a missing bucket
    starts no episode: every one would only time out).
    """

    def __init__(self, config: ToolkitConfig, rows: list[dict[str, Any]], model_dir: str, out_dir: Path,
                 options: Options | None = None) -> None:
        self.options = options or Options()
        self.stand_ins = StandIns(out_dir)
        self.config = config
        self.rows = rows
        self.payloads = [row["metadata"] for row in rows]
        self.model_dir = model_dir
        self.out_dir = out_dir
        self.acr = bool(config.agent_runtime_arn)
        self.banner = BANNER.format(answer=ANSWER.format("N"))
        self.checks: list[Result] = []
        self.started = time.monotonic()
        self.step: dict[str, Any] = {}

    def run(self) -> int:
        """The whole rehearsal; returns the exit status."""
        say(self.banner)
        try:
            return self.run_parts()
        finally:
            self.stand_ins.stop()

    def start_stand_ins(self) -> Result | None:
        """Stand in for what is missing (S3, tokenizer, agent); a failed start as its check."""
        s3 = self.options.s3
        if s3 == "loopback" or (s3 == "auto" and not aws_credentials_found()):
            why = ("asked for (no env file)" if s3 == "loopback"
                   else "no AWS credentials found on this machine")
            self.stand_ins.loopback_s3(self.config.s3_bucket, self.config.region, why)
        try:
            self.model_dir = self.stand_ins.tokenizer(self.model_dir)
        except Exception as exc:  # noqa: BLE001 - any failure to build is this one finding
            return failed("rehearse.gateway", f"the stand-in tokenizer could not be built: {exc}",
                          "pip install -e \"python/[rehearse]\" (tokenizers, transformers)")
        if self.options.example_agent and self.config.agent_url:
            try:  # it binds a free port and names it: AGENT_URL's port 0 becomes that one
                url = self.stand_ins.example_agent(_repo())
                self.config = dataclasses.replace(self.config, agent_url=url)
            except RuntimeError as exc:
                return failed("rehearse.agent", str(exc), "pip install -e \"python/[rehearse]\" brings "
                              "the example agent's packages; its log says more")
        return None

    def run_parts(self) -> int:
        """The checks and the episodes, the stand-ins started."""
        self.checks.append(_data_check(self.payloads[: self.options.groups or None]))
        problem = self.start_stand_ins()
        if problem is not None:
            self.checks.append(problem)
            return self.finish([], {"skipped": "a stand-in did not start"})
        self.checks.append(check_bucket(self.config))
        self.stand_ins.lines.append(stand_in_slime(_repo()) or "slime: the installed one (no stand-in)")
        if self.checks[-1].status is Status.FAIL:
            return self.finish([], {"skipped": "the bucket check failed"})
        try:
            policy = StandInPolicy(self.model_dir, self.config.renderer_family,
                                   self.config.sglang_tool_call_parser, self.config.sglang_reasoning_parser,
                                   answers=_answers(self.payloads))
        except Exception as exc:  # noqa: BLE001 - any failure to load is this one finding
            found = f"the model's tokenizer or renderer does not load: {exc}"
            fix = "check MODEL_DIR, RENDERER_FAMILY and SGLANG_TOOL_CALL_PARSER"
            self.checks.append(failed("rehearse.gateway", found, fix))
            return self.finish([], {"skipped": "the model's renderer did not load"})
        choice = policy.choice  # the parsers the gateway reads the stand-in's turns with, and why
        parsers = f"{choice.parsers}; renderer {choice.family} ({choice.reason})"
        self.checks.append(passed("rehearse.parsers", parsers))
        engine = StandInEngine(policy)
        engine.start()
        try:
            return self.through_rollout(engine)
        finally:
            engine.stop()

    def through_rollout(self, engine: StandInEngine) -> int:
        """One training step through slime's rollout function, the stand-in engine as its router."""
        import yaml

        from agentcore_slime.rollout import runtime

        groups = min(self.options.groups or len(self.rows), len(self.rows))
        samples = self.options.samples_per_prompt
        toolkit = yaml.safe_load(Path(self.options.config).read_text(encoding="utf-8"))
        args = slime_args({**toolkit, "agent_url": self.config.agent_url}, self.options.layout or {},
                          engine.url, self.model_dir, self.out_dir, groups, samples)
        gateways: list[Any] = []

        def gateway_factory(config: ToolkitConfig, slime: Any) -> Any:  # training's, its address kept
            gateways.append(runtime.default_gateway_factory(config, slime))
            return gateways[-1]

        runtime._STATE.gateway_factory = gateway_factory
        say(f"a training step: {groups} prompt group(s) x {samples} episodes of {self.wiring('').agent} "
            "through slime's rollout function")
        os.environ.pop("TRANSFORMERS_NO_ADVISORY_WARNINGS", None)  # the gateway says it, once
        try:
            step_samples, stopped = run_step(args, data_source(self.rows, samples))
        except Exception as exc:  # noqa: BLE001 - the gateway did not start: this one finding
            self.checks.append(failed("rehearse.gateway", f"the rollout's gateway cannot start: {exc}",
                                      "GATEWAY_HOST must be an address of this machine, or unset"))
            return self.finish([], {"skipped": "the gateway did not start"})
        finally:
            url = gateways[0].url if gateways else ""
            runtime._STATE.reset()
        return self.after_step(engine, args, step_samples, stopped, url)

    def after_step(self, engine: StandInEngine, args: Any, samples: list[Any], stopped: str, url: str) -> int:
        """The checks the step's episodes answer, the advantages, the outputs."""
        wiring = self.wiring(url)
        self.checks.append(check_gateway_address(url, self.acr))
        episodes = recorded_episodes(self.out_dir, len(self.rows))
        # the stand-in knows a session by its routing key (the gateway never sends the id)
        held = engine.policy.sessions
        logs = {e.session_id: held.get(routing_key(e.session_id), SessionLog()) for e in episodes}
        self.checks += [c for c in episode_checks(episodes, logs, wiring) if c.check != "rehearse.data"]
        advantages = write_samples(self.out_dir, samples, args, engine.policy.tokenizer.decode)
        lines = (self.out_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        self.step = {"samples": len(samples), "trained_tokens": sum(sum(s.loss_mask) for s in samples),
                     "advantages": [round(a, 4) for a in advantages], "stopped": stopped,
                     "sampling": json.loads(lines[-1]).get("sampling") if lines else None}
        settings = {
            "agent": self.config.agent_runtime_arn or self.config.agent_url, "gateway_url": url,
            "transport": "acr" if self.acr else "local", "s3_results": wiring.results,
            "model_dir": self.model_dir, "samples_per_prompt": self.options.samples_per_prompt,
            "acr_timeout": self.config.acr_timeout, "config": self.config.source,
        }
        return self.finish(episodes, settings)

    def wiring(self, gateway_url: str) -> Wiring:
        """What the fixes name."""
        c = self.config
        agent = f"ACR runtime {c.agent_runtime_arn}" if self.acr else f"the agent at {c.agent_url}"
        return Wiring(agent, self.acr, gateway_url, f"s3://{c.s3_bucket}/{c.exp_id}/train-{STEP}-<id>/")

    def finish(self, episodes: Sequence[Episode], settings: dict[str, Any]) -> int:
        """Write the outputs, print the lines; the exit status."""
        seconds = time.monotonic() - self.started
        policy = (f"policy: calls the first tool offered once, then answers {ANSWER.format('N')!r}, N the "
                  "row's answer and a wrong one in turn (no model)")
        parts = {"stand_ins": [policy, *self.stand_ins.lines],
                 "real_parts": REAL_PARTS, "not_rehearsed": NOT_REHEARSED, "step": self.step}
        write_outputs(self.out_dir, episodes, self.checks, settings, seconds, parts)
        report = _write_report(self.out_dir)
        print(self.banner)
        for result in self.checks:
            print(result.line())
        for line in parts["stand_ins"]:
            print(f"stand-in {line}")
        print(REAL_PARTS)
        print(NOT_REHEARSED)
        if self.step:
            print(_step_line(self.step, episodes))
        print(f"results: {self.out_dir}" + (f"; report: {report}" if report else
                                             f" (bin/report {self.out_dir} writes its report)"))
        sys.stdout.flush()
        say(f"{summary(self.checks)} (a REHEARSAL with a stand-in policy: its rewards say nothing "
            "about any model)")
        return exit_status(self.checks)


def _answers(payloads: Sequence[Any]) -> dict[str, str]:
    """Each row's prompt -> its answer (GSM8K rows carry both): the stand-in answers one
    episode of a group right and the next wrong, so the group's rewards differ."""
    return {str(p["prompt"]): str(p["answer"]) for p in payloads
            if isinstance(p, dict) and p.get("prompt") and p.get("answer") is not None}


def _step_line(step: dict[str, Any], episodes: Sequence[Episode]) -> str:
    """What the step gave training: groups kept and dropped, samples, padding, advantages."""
    sampling = step.get("sampling") or {}
    dropped = ", ".join(f"{k} {v}" for k, v in (sampling.get("groups_dropped") or {}).items()) or "none"
    return (f"training step {STEP}: {sampling.get('groups_started', '?')} groups started, "
            f"{sampling.get('groups_trained', '?')} kept, dropped: {dropped}, "
            f"{sampling.get('groups_aborted', 0)} cut at the tail; {len(episodes)} episodes -> "
            f"{step['samples']} samples ({sampling.get('padding_samples', 0)} data-parallel padding), "
            f"{step['trained_tokens']} tokens with loss mask 1, advantages {step['advantages']}"
            f"{_no_signal(step['advantages'], episodes)} (metrics.jsonl, samples.jsonl)")


def _no_signal(advantages: Sequence[float], episodes: Sequence[Episode]) -> str:
    """What all-zero advantages mean: every episode failed (a training step stops there), or
    every group's rewards are equal."""
    if episodes and not any(e.ok for e in episodes):
        return (f": every episode failed, so there is nothing to train on (a training step stops: all "
                f"{len(episodes)} episodes failed; the FAIL lines above say why)")
    if advantages and not any(advantages):
        return (": every group's rewards are equal, so training would learn nothing from this step "
                "(as a real step whose groups all score the same)")
    return ""


def _repo() -> Path:
    """The toolkit's checkout (examples/ is there)."""
    return Path(os.environ.get("TOOLKIT_REPO") or Path(__file__).resolve().parents[3])


def _write_report(out_dir: Path) -> Path | None:
    """bin/report's page of the rehearsal (None when the report's packages are missing)."""
    try:
        from agentcore_slime.report.page import write_report

        return write_report(out_dir)
    except ImportError as exc:
        say(f"no report.html: {exc} (pip install -e \"python/[rehearse]\", then bin/report {out_dir})")
        return None


if __name__ == "__main__":  # python -m agentcore_slime.evaluate.rehearse
    raise SystemExit(main())
