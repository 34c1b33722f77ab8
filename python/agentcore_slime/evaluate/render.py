"""Render ``runs/<EXP_ID>/eval.sh`` for ``bin/eval``: one SGLang server, then the evaluation.

The server's and the evaluation's flags are built here as data (lines of words), so the
rendered script, ``bin/eval --dry-run``'s printout and the tests all see the same commands.
The script shares the prelude and ``templates/lib`` with train.sh, and the run directory's
``toolkit.yaml`` and ``env`` with training (same settings, same renders).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..scripts.render import Rendered, RunPaths, _environment, _num, env_text, shell_quote
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


def server_lines(config: Config, request: EvalRequest) -> list[list[str]]:
    """``python3 -m sglang.launch_server`` flags, one list per line (without ``--port``).

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


def commands(config: Config, request: EvalRequest, run_dir: Path) -> tuple[str, str]:
    """The server and evaluation command lines as ``bin/eval --dry-run`` prints them."""
    server = ["python3", "-m", "sglang.launch_server"] + sum(server_lines(config, request), [])
    evaluate = ["python3", "-m", EVALUATE_MODULE] + sum(eval_lines(config, request, run_dir), [])
    port, url, out = RUNTIME_WORDS
    return (
        " ".join(map(shell_quote, server)) + f" --port {port}",
        " ".join(map(shell_quote, evaluate)) + f" --engine-url {url} --out-dir {out}",
    )


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
        "summary": f"evaluate a checkpoint of {c['EXP_ID']} with the agent (one SGLang server, no training)",
        "script_name": SCRIPT,
        "checkpoint": str(request.checkpoint),
        "server_lines": server_lines(config, request),
        "eval_lines": eval_lines(config, request, paths.run_dir),
        "yaml_keys": [(key.yaml_key, c[key.name]) for key in rollout_keys()],
    }
    files = {
        SCRIPT: env.get_template(TEMPLATE).render(context),
        "toolkit.yaml": env.get_template("toolkit.yaml.j2").render(context),
        "env": env_text(config),
    }
    return Rendered(files)
