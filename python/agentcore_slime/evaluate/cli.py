"""``python -m agentcore_slime.evaluate``: evaluate a model served by SGLang with the agent.

Every row of a validation JSONL runs ``--n-samples`` times through the same path as training:
a session of the trace-capturing gateway in front of ``--engine-url``, the agent (ACR or a local
``agent_url``) started by the training launcher, its reward read from S3. Settings of the
agent, the bucket and the gateway come from the run's ``toolkit.yaml`` (``--config``; missing
keys fall back to environment variables, as in training). Writes ``episodes.jsonl`` and
``summary.json`` into ``--out-dir`` and prints a one-screen summary on stdout.

``runs/<EXP_ID>/eval.sh`` (rendered by ``bin/eval``) calls this after starting its SGLang
server; against a server you manage, call it yourself::

    python -m agentcore_slime.evaluate --config runs/<EXP_ID>/toolkit.yaml \\
        --engine-url http://127.0.0.1:30000 --model-dir /models/my-checkpoint --data val.jsonl

Exit status: 0 evaluated (episodes the agent failed count as wrong), 1 runtime failure (the
engine or gateway cannot start, or every episode failed: the wiring is broken), 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

from agentcore_slime.datasets import EvalSpec, load_rows
from agentcore_slime.errors import ConfigError
from agentcore_slime.observe.runlog import write_whole
from agentcore_slime.rundir import PRIVATE_DIR_MODE, new_results_dir
from agentcore_slime.settings.config import ToolkitConfig, load_config

from .episodes import INFRASTRUCTURE, Episode, EpisodeRunner, run_all
from .summary import evaluation_cost, screen, summarize

PROG = "evaluate"
logger = logging.getLogger(__name__)


class UsageError(Exception):
    """Bad input: exit 2 with the message."""


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` naming ``PROG --help``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    """The command line (``--help`` shows it)."""
    p = UsageParser(prog="python -m agentcore_slime.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--engine-url", required=True, help="SGLang server or router, e.g. http://127.0.0.1:30000")
    p.add_argument("--model-dir", required=True, help="HF directory of the served model (its tokenizer)")
    p.add_argument("--data", required=True, help="validation JSONL: one row per prompt, metadata = payload")
    p.add_argument("--config", help="the run's toolkit.yaml (default: settings from the environment)")
    p.add_argument("--n-samples", type=int, default=1, help="episodes per row (pass@k when > 1)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-new-tokens", type=int, default=1024, help="per model call")
    p.add_argument("--context-length", type=int, default=None, help="cap prompt + completion (default: ask)")
    p.add_argument("--limit", type=int, default=None, help="only the first N rows")
    p.add_argument("--out-dir", help="results directory (default: <config dir>/eval/<UTC time>)")
    p.add_argument("--checkpoint", help="what summary.json names as the checkpoint (default: --model-dir)")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


def say(message: str) -> None:
    """One progress line on stderr."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _check_args(args: argparse.Namespace) -> None:
    for name in ("n_samples", "max_new_tokens", "limit", "context_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value} must be at least 1")
    if args.temperature < 0:
        raise UsageError(f"--temperature {args.temperature} must be >= 0")
    if not Path(args.data).is_file():
        raise UsageError(f"--data {args.data} does not exist (point it at the validation JSONL)")
    if not (Path(args.model_dir) / "config.json").is_file():
        raise UsageError(f"--model-dir {args.model_dir} has no config.json (an HF model directory is needed)")


def read_config(path: str | None) -> ToolkitConfig:
    """The toolkit settings from a toolkit.yaml (or the environment alone when ``path`` is None).

    :raises UsageError: unreadable file or invalid settings.
    """
    values: dict[str, Any] = {}
    if path is not None:
        import yaml

        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read --config {path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--config {path} is not a YAML mapping (use the run's toolkit.yaml)")
        values = {**loaded, "custom_config_path": path}
    try:
        return load_config(SimpleNamespace(**values))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _out_dir(args: argparse.Namespace) -> Path:
    """The results directory, made now: ``--out-dir`` (created mode 0700 if missing; eval.sh made
    it already), or a new ``<config dir>/eval/<UTC time>[-N]`` that no other evaluation shares."""
    if args.out_dir:
        out = Path(args.out_dir)
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(out, PRIVATE_DIR_MODE)
            os.chmod(out, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask
        except FileExistsError:
            if not out.is_dir():  # an existing directory is the user's choice: its mode stays
                raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(out)) from None
        return out
    base = Path(args.config).parent if args.config else Path.cwd()
    return new_results_dir(base / "eval")


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens}
    return {k: v for k, v in sampling.items() if v is not None}


def load_payloads(data: str, limit: int | None) -> list[Any]:
    """The rows' ``metadata`` (agent payloads) in file order, the first ``limit`` of them.

    :raises UsageError: the file holds no rows.
    """
    rows = load_rows(EvalSpec(name="eval", path=data, n_samples=1, sampling={}))
    if not rows:
        raise UsageError(f"--data {data} has no rows (one JSON object per line, with a 'metadata' object)")
    return [row.metadata for row in rows[:limit]]


def start_gateway(config: ToolkitConfig, args: argparse.Namespace) -> Any:
    """The training gateway in front of ``--engine-url`` (health-checked before it serves), in its
    own process as in training.

    Unlike training (which binds next to slime's router), an unset ``gateway_host`` serves on
    every interface and advertises an address agents on other hosts (ACR) can reach.
    """
    from agentcore_slime.gateway import GatewayConfig
    from agentcore_slime.gateway.pool import GatewayPool, gateway_pool_size

    gateway = GatewayPool(
        GatewayConfig.from_toolkit(
            config,
            model_dir=args.model_dir,
            context_length=args.context_length,
        ),
        gateway_pool_size(config.gateway_processes, config.max_concurrent),
    )
    gateway.start(args.engine_url)
    return gateway


def _progress(total: int) -> Any:
    step = max(1, total // 10)
    done = [0, 0]  # finished, failed

    def on_done(episode: Episode) -> None:
        done[0] += 1
        done[1] += not episode.ok
        if done[0] % step == 0 or done[0] == total:
            say(f"{done[0]}/{total} episodes done ({done[1]} failed)")

    return on_done


async def _evaluate(
    config: ToolkitConfig, gateway: Any, payloads: list[Any], args: argparse.Namespace, input_id: str
) -> list[Episode]:
    from agentcore_slime.episodes import make_runner

    with ThreadPoolExecutor(max_workers=config.max_pool_connections, thread_name_prefix="eval-io") as pool:
        launcher = make_runner(config, pool)
        try:
            runner = EpisodeRunner(gateway, launcher, pool, input_id, _sampling(args), config.agent_cost_key)
            total = len(payloads) * args.n_samples
            return await run_all(
                runner, payloads, args.n_samples, config.max_concurrent, _progress(total), config.eval_timeout
            )
        finally:
            await launcher.close()


def _settings(config: ToolkitConfig, args: argparse.Namespace, input_id: str) -> dict[str, Any]:
    return {
        "engine_url": args.engine_url,
        "model_dir": args.model_dir,
        "sampling": _sampling(args),
        "limit": args.limit,
        "context_length": args.context_length,
        "agent": config.agent_runtime_arn or config.agent_url,
        "transport": "acr" if config.agent_runtime_arn else "local",
        "s3_results": f"s3://{config.s3_bucket}/{config.exp_id}/{input_id}/",
        "model_id": config.model_id,
        "acr_timeout": config.acr_timeout,
        "eval_timeout": config.eval_timeout,
        "max_concurrent": config.max_concurrent,
        "cumulative_token_mode": config.cumulative_token_mode,
        "config": config.source,
    }


def write_results(out_dir: Path, episodes: list[Episode], summary: dict[str, Any]) -> None:
    """``episodes.jsonl`` (one line per episode, in row order) and ``summary.json``, written as
    the rest of the run directory is (whole, mode 0600, a link at either name replaced, never
    followed): they hold session ids and agent results."""
    write_whole(out_dir / "episodes.jsonl", "".join(json.dumps(asdict(e)) + "\n" for e in episodes))
    write_whole(out_dir / "summary.json", json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run the evaluation; return the exit status.

    :param argv: arguments (default: ``sys.argv[1:]``).
    """
    try:
        args = parser().parse_args(argv)
        _check_args(args)
        config = read_config(args.config)
        payloads = load_payloads(args.data, args.limit)
    except UsageError as exc:
        say(str(exc))
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    return _run(config, payloads, args)


def _run(config: ToolkitConfig, payloads: list[Any], args: argparse.Namespace) -> int:
    try:
        out_dir = _out_dir(args)
    except OSError as exc:
        say(f"cannot create the results directory: {exc} (choose another --out-dir)")
        return 2
    input_id = f"eval-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        gateway = start_gateway(config, args)
    except (RuntimeError, ValueError, OSError) as exc:
        say(f"the gateway cannot start in front of {args.engine_url}: {exc}")
        return 1
    try:
        say(
            f"{len(payloads)} rows x {args.n_samples} through {gateway.url}; results under "
            f"s3://{config.s3_bucket}/{config.exp_id}/{input_id}/"
        )
        episodes = asyncio.run(_evaluate(config, gateway, payloads, args, input_id))
    finally:
        gateway.shutdown()
    wall = time.monotonic() - started
    summary = summarize(episodes, args.n_samples, wall)
    summary["cost"] = evaluation_cost(config, episodes, wall)
    summary = {
        "checkpoint": args.checkpoint or args.model_dir,
        "data": args.data,
        "n_samples": args.n_samples,
        "out_dir": str(out_dir),
        **summary,
        "settings": _settings(config, args, input_id),
    }
    write_results(out_dir, episodes, summary)
    sys.stdout.write(screen(summary))
    if episodes and all(e.failure_class == INFRASTRUCTURE for e in episodes):
        say(
            "every episode failed before the agent returned a result: check the agent, the gateway "
            "address agents reach (GATEWAY_HOST) and the bucket; see episodes.jsonl"
        )
        return 1
    return 0
