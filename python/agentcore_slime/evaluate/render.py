"""Render ``runs/<EXP_ID>/eval.sh`` for ``bin/eval``: its SGLang engines, then the evaluation.

bin/eval uses every GPU it is given: ``engines`` data-parallel SGLang servers of ``EVAL_TP_SIZE``
GPUs each (``SGLANG_DATA_PARALLEL_SIZE`` when the env file sets it, else ``NUM_GPUS //
EVAL_TP_SIZE``), engine ``i`` on the GPUs from ``--base-gpu-id i * EVAL_TP_SIZE``. With two or
more engines no router is started: the gateway is given every engine's URL and keeps each
session on the engine a digest of its id picks (the next one while that engine is down), so a
session's turns reuse one engine's prefix cache. sglang-router 0.3.2 takes no inbound key: any
local user could register a worker with it, receive the engines' API key and the sessions'
routing headers, and remove real engines (docs/eval.md "Several engines"). SGLang's own
``--dp-size`` is not used: its data-parallel controller (0.5.13
``managers/data_parallel_controller.py``) places a request by load or by a ``routed_dp_rank``
in the body, never by a session, so a session's turns would scatter.

The servers' and the evaluation's flags are built here as data (lines of words),
so the rendered script, ``bin/eval --dry-run``'s printout and the tests all see the same commands.
The script shares the prelude and ``templates/lib`` with train.sh (the library functions it
calls and their Python helpers: scripts/library.py), and the run directory's ``toolkit.yaml``
and ``env`` with training (same settings, same renders).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..scripts.render import Rendered, RunPaths, _environment, _num, env_text, script_files, shell_quote
from ..settings.schema import rollout_keys
from ..settings.validate import Config

TEMPLATE = "eval_sglang.sh.j2"
SCRIPT = "eval.sh"
EVALUATE_MODULE = "agentcore_slime.evaluate"
#: the words bin/eval --dry-run shows for what the script fills in at run time
RUNTIME_WORDS = ("$port", "http://127.0.0.1:$port", "$RUN_DIR/eval/<UTC time>")


@dataclass(frozen=True)
class EvalRequest:
    """What bin/eval was asked to evaluate.

    :param checkpoint: the HF model directory the server loads (default MODEL_DIR).
    :param limit: only the first N validation rows (None = all).
    """

    checkpoint: Path
    limit: int | None = None


def explicit_engines(config: Config) -> bool:
    """True when the env file (or ``--set``) sets ``SGLANG_DATA_PARALLEL_SIZE``."""
    return "SGLANG_DATA_PARALLEL_SIZE" in config.source


def eval_engines(config: Config) -> int:
    """Data-parallel SGLang engines bin/eval starts: ``SGLANG_DATA_PARALLEL_SIZE`` when set,
    else as many ``EVAL_TP_SIZE`` engines as ``NUM_GPUS`` holds (every GPU it is given).

    :param config: the resolved configuration.
    """
    if explicit_engines(config):
        return int(str(config["SGLANG_DATA_PARALLEL_SIZE"]))
    return max(1, int(str(config["NUM_GPUS"])) // int(str(config["EVAL_TP_SIZE"])))


def server_lines(config: Config, request: EvalRequest) -> list[list[str]]:
    """``python3 -m sglang.launch_server`` flags every engine gets, one list per line (without
    ``--base-gpu-id`` and ``--port``, which the script adds per engine).

    :param config: the resolved configuration.
    :param request: the checkpoint and limit.
    """
    c = config.values
    lines = [
        ["--model-path", str(request.checkpoint)],
        ["--tp-size", _num(c["EVAL_TP_SIZE"])],
        ["--host", "127.0.0.1"],
        ["--mem-fraction-static", _num(c["SGLANG_MEM_FRACTION_STATIC"])],
        ["--log-level", "warning"],
    ]
    if c["SGLANG_CONTEXT_LENGTH"] is not None:
        lines.append(["--context-length", _num(c["SGLANG_CONTEXT_LENGTH"])])
    extra = c["EVAL_SGLANG_FLAGS"]
    if isinstance(extra, list) and extra:
        lines.append(list(extra))
    return lines


def eval_lines(config: Config, request: EvalRequest, run_dir: Path) -> list[list[str]]:
    """``python3 -m agentcore_slime.evaluate`` flags, one list per line (without the engine URL
    and results directory, which the script adds).

    :param config: the resolved configuration.
    :param request: the checkpoint and limit.
    :param run_dir: the run directory (its toolkit.yaml holds the agent, bucket and gateway settings).
    """
    c = config.values
    lines = [
        ["--config", str(run_dir / "toolkit.yaml")],
        ["--model-dir", str(request.checkpoint)],
        ["--checkpoint", str(request.checkpoint)],
        ["--data", str(c["VAL_DATA_PATH"])],
        ["--n-samples", _num(c["N_SAMPLES_PER_EVAL_PROMPT"])],
        ["--temperature", _num(c["EVAL_TEMPERATURE"])],
        ["--max-new-tokens", _num(c["EVAL_MAX_RESPONSE_LEN"])],
    ]
    if c["SGLANG_CONTEXT_LENGTH"] is not None:
        lines.append(["--context-length", _num(c["SGLANG_CONTEXT_LENGTH"])])
    if request.limit is not None:
        lines.append(["--limit", str(request.limit)])
    return lines


def plan_line(config: Config) -> str:
    """What the engines hold, e.g. ``4 engines x TP 2 = 8 of NUM_GPUS=8 GPUs, ...``."""
    engines, tp = eval_engines(config), int(str(config["EVAL_TP_SIZE"]))
    gpus = int(str(config["NUM_GPUS"]))
    where = ", no router: the gateway keeps a session on one engine" if engines > 1 else ""
    plural = "s" if engines > 1 else ""
    return f"{engines} engine{plural} x TP {tp} = {engines * tp} of NUM_GPUS={gpus} GPUs{where}"


def commands(config: Config, request: EvalRequest, run_dir: Path) -> tuple[str, ...]:
    """The server and evaluation command lines as ``bin/eval --dry-run`` prints them.

    With several engines the server line is engine 0's (``--base-gpu-id 0``); engine ``i`` runs
    the same with ``--base-gpu-id i * EVAL_TP_SIZE`` on its own port, and the evaluation is
    given every engine's URL, joined by commas.
    """
    server = ["python3", "-m", "sglang.launch_server"] + sum(server_lines(config, request), [])
    evaluate = ["python3", "-m", EVALUATE_MODULE] + sum(eval_lines(config, request, run_dir), [])
    port, url, out = RUNTIME_WORDS
    engines = eval_engines(config)
    lines = [" ".join(map(shell_quote, server)) + f" --base-gpu-id 0 --port {port}"]
    if engines > 1:
        url = ",".join(f"http://127.0.0.1:$port_{i}" for i in range(engines))
    lines.append(" ".join(map(shell_quote, evaluate)) + f" --engine-url {url} --out-dir {out}")
    return tuple(lines)


def render_eval(config: Config, paths: RunPaths, request: EvalRequest, templates: Path) -> Rendered:
    """Render eval.sh, toolkit.yaml and env.

    :param config: the resolved configuration.
    :param paths: run directory, repo and provenance.
    :param request: the checkpoint and limit.
    :param templates: the templates/ directory.
    """
    env = _environment(templates)
    c = config.values
    context = {
        "c": c,
        "paths": paths,
        "template": f"templates/{TEMPLATE}",
        "summary": f"evaluate a checkpoint of {c['EXP_ID']} with the agent "
        f"({plan_line(config)}; no training)",
        "script_name": SCRIPT,
        "checkpoint": str(request.checkpoint),
        "server_lines": server_lines(config, request),
        "engines": eval_engines(config),
        "engines_set": explicit_engines(config),
        "eval_lines": eval_lines(config, request, paths.run_dir),
        "yaml_keys": [(key.yaml_key, c[key.name]) for key in rollout_keys()],
    }
    files = {
        **script_files(SCRIPT, env.get_template(TEMPLATE).render(context), templates),
        "toolkit.yaml": env.get_template("toolkit.yaml.j2").render(context),
        "env": env_text(config),
    }
    return Rendered(files)
