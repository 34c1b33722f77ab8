"""The SGLang server flags bin/eval renders, parsed by SGLang 0.5.13's own argument parser.

SGLang imports torch and pins transformers 5.8.1 (it registers model types that clash with the
gateway's transformers), so it lives in a virtualenv of its own: ``.venv-sglang`` beside the
test venv (or ``TOOLKIT_SGLANG_VENV``), made by ``tests/run`` from ``tests/requirements-sglang.txt``
(a CPU torch, then SGLang and what ``import sglang.srt.server_args`` needs, ``--no-deps``).
``sglang_parser_probe.py`` runs there: ``ServerArgs.add_cli_args`` on an ``argparse`` parser,
the ``--config`` YAML merged by SGLang's ``ConfigArgumentMerger``, as ``prepare_server_args``
does. In CI a missing venv fails the test (tests/run makes it); elsewhere it skips, naming the
command that makes it.

bin/eval starts no router (several engines are spread over by the gateway: docs/eval.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentcore_slime.evaluate.render import EvalRequest, server_lines
from agentcore_slime.settings.envfile import read_env_file
from agentcore_slime.settings.validate import Config, resolve
from fakes.renders import FIXED_RUNS, INPUTS, REPO
from fakes.sglang_venv import ask_sglang

PROBE = Path(__file__).with_name("sglang_parser_probe.py")


def _parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    return list(ask_sglang(PROBE, argvs)["results"])


def _config(env_file: Path, overrides: dict[str, str] | None = None) -> Config:
    return resolve(read_env_file(env_file), overrides or {}, env_file.relative_to(REPO), FIXED_RUNS)


def _engine_argv(config: Config, key_file: Path, engine: int) -> list[str]:
    """What eval.sh runs for engine ``engine``: SERVER_ARGS, then --config, --base-gpu-id, --port."""
    tp = int(str(config["EVAL_TP_SIZE"]))
    words = sum(server_lines(config, EvalRequest(Path("/models/ckpt"), None)), [])
    return [*words, "--config", str(key_file), "--base-gpu-id", str(engine * tp),
            "--port", str(30000 + engine)]


def test_eval_server_flags_parse_with_sglang_0_5_13(tmp_path: Path) -> None:
    key_file = tmp_path / "key.yaml"
    key_file.write_text("api-key: k3y\n", encoding="utf-8")
    cases = [(_config(p), 1) for p in INPUTS]
    extra_flags = "--attention-backend triton --chunked-prefill-size 4096"
    overrides = {"EVAL_SGLANG_FLAGS": extra_flags, "SGLANG_CONTEXT_LENGTH": "8192", "EVAL_TP_SIZE": "2"}
    cases.append((_config(INPUTS[0], overrides), 3))
    results = _parse([_engine_argv(config, key_file, engine) for config, engine in cases]
                     + [["--model-path", "/m", "--no-such-flag", "1"]])
    for (config, engine), result in zip(cases, results, strict=False):
        assert result["ok"], result
        args = result["args"]
        tp = int(str(config["EVAL_TP_SIZE"]))
        # --tp-size is an alias of --tensor-parallel-size (server_args.py:5006 in 0.5.13)
        assert (args["model_path"], args["tensor_parallel_size"]) == ("/models/ckpt", tp)
        assert args["host"] == "127.0.0.1"
        assert (args["base_gpu_id"], args["port"]) == (engine * tp, 30000 + engine)
        assert args["mem_fraction_static"] == pytest.approx(float(str(config["SGLANG_MEM_FRACTION_STATIC"])))
        assert args["api_key"] == "k3y"  # read from the --config YAML, as eval.sh hands it over
    extra = results[len(cases) - 1]["args"]
    assert extra["attention_backend"] == "triton" and extra["chunked_prefill_size"] == 4096
    assert extra["context_length"] == 8192
    # the parser is real: a flag SGLang does not know is refused
    assert not results[-1]["ok"] and "--no-such-flag" in results[-1]["error"]
