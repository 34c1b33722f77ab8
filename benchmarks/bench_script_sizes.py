#!/usr/bin/env python3
"""Benchmark: how long each rendered script is, and where its ``main`` starts.

The rendered script is the user's escape hatch (docs/launcher.md, "Debugging with the rendered
script"): what it is, its configuration, slime's flag arrays and ``main`` come first, the
library functions it can call after. This renders, as bin/train and bin/eval do (the render
functions themselves, fixed paths), examples/gsm8k.env synchronous and asynchronous, the
two-node fixture (train.sh and join.sh) and examples/gsm8k.env's eval.sh, and prints per
script its lines, the line of ``main() {``, how many functions it carries and the Python
helpers of its run directory. Target: ``main`` within the first 250 lines of every script.

Run: ``.venv/bin/python benchmarks/bench_script_sizes.py`` from the repo root.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from agentcore_slime.evaluate.render import EvalRequest, render_eval  # noqa: E402
from agentcore_slime.scripts.render import Rendered, RunPaths, render  # noqa: E402
from agentcore_slime.settings.envfile import read_env_file  # noqa: E402
from agentcore_slime.settings.validate import Config, check_variant, resolve  # noqa: E402
from agentcore_slime.settings.variants import VARIANTS  # noqa: E402

RUNS = Path("/runs")
TARGET = 250


def _config(env_file: Path) -> Config:
    return resolve(read_env_file(env_file), {}, env_file.relative_to(REPO), RUNS)


def _paths(config: Config, env_file: Path, command: str) -> RunPaths:
    rel = env_file.relative_to(REPO)
    return RunPaths(REPO, RUNS / str(config["EXP_ID"]), str(rel), f"{command} {rel}")


def _train(env_file: Path, variant: str) -> Rendered:
    config = _config(env_file)
    check_variant(config, VARIANTS[variant])
    paths = _paths(config, env_file, f"bin/train --render-only --variant {variant}")
    return render(config, paths, variant, [], REPO / "templates")


def _eval(env_file: Path) -> Rendered:
    config = _config(env_file)
    request = EvalRequest(Path(str(config["MODEL_DIR"])), None)
    return render_eval(config, _paths(config, env_file, "bin/eval"), request, REPO / "templates")


def describe(label: str, rendered: Rendered, name: str) -> tuple[str, int]:
    """A row for ``rendered.files[name]``, and the line of its ``main``."""
    text = rendered.files[name]
    lines = text.splitlines()
    main = next(number for number, line in enumerate(lines, 1) if line.startswith("main() {"))
    functions = len(re.findall(r"^[A-Za-z_][A-Za-z0-9_]*\(\) \{", text, re.MULTILINE))
    helpers = sorted(n for n in rendered.files if n.endswith(".py"))
    row = f"{label:<30} {len(lines):>6} {main:>6} {functions:>10}  {', '.join(helpers) or '-'}"
    return row, main


def main() -> int:
    gsm8k = REPO / "examples" / "gsm8k.env"
    two_nodes = REPO / "tests" / "fixtures" / "launcher" / "two_nodes.env"
    sync, nodes = _train(gsm8k, "sync"), _train(two_nodes, "sync")
    cases = [
        ("sync train.sh (gsm8k)", sync, "train.sh"),
        ("async train_async.sh (gsm8k)", _train(gsm8k, "async"), "train_async.sh"),
        ("two nodes train.sh", nodes, "train.sh"),
        ("two nodes join.sh", nodes, "join.sh"),
        ("eval.sh (gsm8k)", _eval(gsm8k), "eval.sh"),
    ]
    print(f"{'script':<30} {'lines':>6} {'main':>6} {'functions':>10}  Python helpers in the run directory")
    worst = 0
    for label, rendered, name in cases:
        row, main_line = describe(label, rendered, name)
        print(row)
        worst = max(worst, main_line)
    verdict = "met" if worst <= TARGET else "NOT met"
    print(f"main starts by line {worst} in every script (target: {TARGET}): {verdict}")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
