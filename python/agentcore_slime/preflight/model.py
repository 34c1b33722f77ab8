"""Model checks: MODEL_DIR holds config.json and a tokenizer, and the model script agrees with it.

The model script is read the way train.sh reads it: sourced by bash through
``source_model_args`` of templates/lib/model.sh (scripts source their siblings, use variables,
loops and env defaults; no text matching could follow them). The effective value of a flag is
its last occurrence on the final command line, so ``--norm-epsilon 1e-6`` in EXTRA_FLAGS
overrides the script's value, exactly as slime's argparse does.

The compared values are those slime checks against config.json at start-up (slime
``backends/megatron_utils/arguments.py:97-148`` at fa3c990: a mismatch stops the driver after
Ray is up) plus two it does not check but that break training (query groups, vocabulary size).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..scripts.render import passthrough_flags
from .context import Context
from .parsers import check_parsers
from .report import Result, failed, passed
from .routing import check_routing_replay

#: files any one of which makes a tokenizer loadable by transformers
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")

# reads MODEL_ARGS with the launcher's own function and prints it NUL-separated
_SOURCE = (
    'set -euo pipefail; TOOLKIT_PROG=bin/doctor; source "$1/common.sh"; source "$1/model.sh"; '
    'source_model_args "$2"; printf "%s\\0" "${MODEL_ARGS[@]}"'
)


@dataclass(frozen=True)
class Pairing:
    """One config.json value and the Megatron flag that must agree with it.

    :param name: the check's name after ``model.``.
    :param flag: the Megatron flag.
    :param hf: reads the config.json value (``None`` = not in this config: not compared).
    :param megatron: the flag's value from the command line (``None`` = cannot compare).
    :param same: whether the two agree.
    """

    name: str
    flag: str
    hf: Callable[[dict[str, Any]], Any]
    megatron: Callable[[dict[str, list[str]]], Any]
    same: Callable[[Any, Any], bool]


def read_model_args(ctx: Context, script: Path) -> tuple[list[str] | None, str]:
    """MODEL_ARGS of ``script``, sourced by bash with templates/lib/model.sh.

    :param ctx: the check context.
    :param script: $SLIME_DIR/scripts/models/<MODEL_TYPE>.sh.
    :returns: the words (``None`` on failure) and the error bin/train would print.
    """
    lib = ctx.repo / "templates" / "lib"
    try:
        done = subprocess.run(
            ["bash", "-c", _SOURCE, "bash", str(lib), str(script)],
            capture_output=True,
            env=dict(ctx.environ),
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        errors = [line for line in lines if line.startswith("bin/doctor: ")]
        return None, (errors or lines or [f"bash exited {done.returncode}"])[-1].removeprefix("bin/doctor: ")
    return done.stdout.decode(errors="replace").split("\0")[:-1], ""


def last_values(words: list[str]) -> dict[str, list[str]]:
    """Flag -> the values of its last occurrence (argparse: the last one wins).

    :param words: a command line of ``--flag value...`` words.
    """
    flags: dict[str, list[str]] = {}
    current: list[str] | None = None
    for word in words:
        if word.startswith("--") and len(word) > 2:
            flag, sep, inline = word.partition("=")
            current = [inline] if sep else []
            flags[flag] = current
        elif current is not None:
            current.append(word)
    return flags


def _one(
    flag: str, convert: Callable[[str], Any], default: Any = None
) -> Callable[[dict[str, list[str]]], Any]:
    def read(flags: dict[str, list[str]]) -> Any:
        if flag not in flags:
            return default
        try:
            return convert(flags[flag][0])
        except (IndexError, ValueError):
            return None

    return read


def _key(*names: str) -> Callable[[dict[str, Any]], Any]:
    def read(hf: dict[str, Any]) -> Any:
        for name in names:
            value: Any = hf
            for part in name.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                return value
        return None

    return read


def _query_groups(flags: dict[str, list[str]]) -> Any:
    if "--group-query-attention" not in flags:
        return _one("--num-attention-heads", int)(flags)  # one group per head
    return _one("--num-query-groups", int)(flags)


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


def _close(a: Any, b: Any) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9)


# Megatron defaults (arguments.py at 1dcf0da) for the flags a script may leave out: slime
# compares config.json against args, so a missing flag is compared at its default.
PAIRINGS: tuple[Pairing, ...] = (
    Pairing("num-layers", "--num-layers", _key("num_hidden_layers"), _one("--num-layers", int), _equal),
    Pairing("hidden-size", "--hidden-size", _key("hidden_size"), _one("--hidden-size", int), _equal),
    Pairing(
        "ffn-hidden-size",
        "--ffn-hidden-size",
        _key("intermediate_size"),
        _one("--ffn-hidden-size", int),
        _equal,
    ),
    Pairing(
        "attention-heads",
        "--num-attention-heads",
        _key("num_attention_heads"),
        _one("--num-attention-heads", int),
        _equal,
    ),
    Pairing(
        "norm-epsilon",
        "--norm-epsilon",
        _key("rms_norm_eps", "layer_norm_eps", "layernorm_epsilon"),
        _one("--norm-epsilon", float, 1e-5),
        _close,
    ),
    Pairing(
        "rotary-base",
        "--rotary-base",
        _key("rope_theta", "rope_parameters.rope_theta"),
        _one("--rotary-base", float, 10000.0),
        _close,
    ),
    Pairing(
        "tied-embeddings",
        "--untie-embeddings-and-output-weights",
        lambda hf: None if hf.get("tie_word_embeddings") is None else bool(hf["tie_word_embeddings"]),
        lambda flags: "--untie-embeddings-and-output-weights" not in flags,
        _equal,
    ),
    Pairing("query-groups", "--num-query-groups", _key("num_key_value_heads"), _query_groups, _equal),
    Pairing("vocab-size", "--vocab-size", _key("vocab_size"), _one("--vocab-size", int), _equal),
)


def number(value: Any) -> str:
    """A number as a flag value: ``1e-6`` rather than ``1e-06``, ``1000000`` rather than ``1e+06``.

    :param value: the value.
    """
    if isinstance(value, float) and not isinstance(value, bool):
        if value.is_integer():
            return str(int(value))
        return re.sub(
            r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), f"{value:g}"
        )
    return str(value)


def shown(pairing: Pairing, ours: Any) -> str:
    """The command line's side of a pairing, as a user would write it.

    :param pairing: the pairing.
    :param ours: the effective value.
    """
    if pairing.name == "tied-embeddings":
        return "tied embeddings (no --untie-embeddings-and-output-weights)" if ours else pairing.flag
    return f"{pairing.flag} {number(ours)}"


def hf_shown(pairing: Pairing, value: Any) -> str:
    """config.json's side of a pairing.

    :param pairing: the pairing.
    :param value: the config.json value.
    """
    if pairing.name == "tied-embeddings":
        return f"tie_word_embeddings {str(bool(value)).lower()}"
    return number(value)


def _fix(pairing: Pairing, hf_value: Any) -> str:
    if pairing.name == "tied-embeddings":
        if hf_value:  # a store_true flag cannot be switched off by a later one
            return "copy the model script to a new MODEL_TYPE without --untie-embeddings-and-output-weights"
        return "add --untie-embeddings-and-output-weights to EXTRA_FLAGS"
    if pairing.name == "query-groups":
        return f"add --group-query-attention --num-query-groups {hf_value} to EXTRA_FLAGS"
    return f"add {pairing.flag} {number(hf_value)} to EXTRA_FLAGS (a later flag overrides the model script's)"


def compare(hf: dict[str, Any], words: list[str], script: str) -> list[Result]:
    """One result per value config.json and the command line must agree on.

    :param hf: config.json (its ``text_config`` for multimodal models).
    :param words: MODEL_ARGS followed by the pass-through flags.
    :param script: the model script's name, for messages.
    """
    flags = last_values(words)
    other = _another_model(hf, flags, script)
    if other is not None:
        return [other]
    results = []
    for pairing in PAIRINGS:
        name = f"model.{pairing.name}"
        hf_value = pairing.hf(hf)
        if hf_value is None:
            continue  # not in this config.json: nothing to compare
        ours = pairing.megatron(flags)
        if pairing.name == "vocab-size" and ours is None:
            results.append(passed(name, f"no --vocab-size: Megatron takes config.json's {hf_value}"))
            continue
        if ours is None:
            results.append(
                failed(
                    name,
                    f"{script} sets no usable {pairing.flag}; config.json has {hf_value}",
                    _fix(pairing, hf_value),
                )
            )
        elif pairing.same(ours, hf_value):
            results.append(passed(name, f"{shown(pairing, ours)} matches config.json"))
        else:
            results.append(
                failed(
                    name,
                    f"the command line has {shown(pairing, ours)} ({script} and EXTRA_FLAGS) "
                    f"but config.json has {hf_shown(pairing, hf_value)}",
                    _fix(pairing, hf_value),
                )
            )
    return results


#: the shape of a model: when both differ, config.json is another model than the script's
_SHAPE = ("num-layers", "hidden-size")


def _another_model(hf: dict[str, Any], flags: dict[str, list[str]], script: str) -> Result | None:
    """One FAIL when config.json and the model script disagree on the model's shape (layers
    and hidden size): MODEL_TYPE names another model, and a flag-by-flag list would suggest
    patching every one of them."""
    pairings = {p.name: p for p in PAIRINGS if p.name in _SHAPE}
    theirs = {name: pairing.hf(hf) for name, pairing in pairings.items()}
    ours = {name: pairing.megatron(flags) for name, pairing in pairings.items()}
    if any(v is None for v in (*theirs.values(), *ours.values())) or any(
        pairings[name].same(ours[name], theirs[name]) for name in _SHAPE
    ):
        return None
    layers, hidden = theirs["num-layers"], theirs["hidden-size"]
    return failed(
        "model.shape",
        f"MODEL_DIR is not the model {script} describes: config.json has {layers} layers and hidden "
        f"size {hidden}, {script} {ours['num-layers']} and {ours['hidden-size']}",
        f"set MODEL_TYPE to the model script of this model (one with --num-layers {layers} "
        f"--hidden-size {hidden} in SLIME_DIR/scripts/models/), or point MODEL_DIR at the model "
        f"{script} is for",
    )


def load_config_json(model_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """config.json of ``model_dir`` (its ``text_config`` when it has one), or the problem.

    :param model_dir: MODEL_DIR.
    """
    path = model_dir / "config.json"
    if model_dir.is_file():
        return None, f"MODEL_DIR {model_dir} is a file, not the model's folder (MODEL_DIR={model_dir.parent})"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except (OSError, ValueError) as exc:
        return None, f"{path} is not readable JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} is not a JSON object"
    text = data.get("text_config")
    return (text if isinstance(text, dict) else data), ""


def check_model(ctx: Context) -> list[Result]:
    """config.json, tokenizer files, and the model script against config.json.

    :param ctx: the check context.
    """
    model_dir = Path(str(ctx.value("MODEL_DIR")))
    hf, problem = load_config_json(model_dir)
    results = []
    if hf is None:
        results.append(failed("model.config", problem, "point MODEL_DIR at a local HF model directory"))
    else:
        kind = hf.get("model_type", "no model_type")
        results.append(passed("model.config", f"{model_dir}/config.json ({kind})"))
    tokenizer = [name for name in TOKENIZER_FILES if (model_dir / name).is_file()]
    if tokenizer:
        results.append(passed("model.tokenizer", f"{', '.join(tokenizer)} in {model_dir}"))
    else:
        results.append(
            failed(
                "model.tokenizer",
                f"no tokenizer file ({', '.join(TOKENIZER_FILES)}) in {model_dir}",
                "download the full model (tokenizer files included) into MODEL_DIR",
            )
        )
    results += check_parsers(ctx)  # the parsers and renderer family fit this model
    script = Path(str(ctx.value("SLIME_DIR"))) / "scripts" / "models" / f"{ctx.value('MODEL_TYPE')}.sh"
    words, error = read_model_args(ctx, script)
    if words is None:
        results.append(failed("model.script", error, f"fix MODEL_TYPE or {script}"))
        return results
    results.append(passed("model.script", f"{script.name} defines {len(words)} MODEL_ARGS words"))
    if hf is not None:
        command_line = words + passthrough_flags(ctx.config, ctx.slime_flags)
        results += compare(hf, command_line, script.name)
        results += check_routing_replay(hf, last_values(command_line))
    return results
