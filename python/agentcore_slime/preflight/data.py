"""Data checks: DATA_PATH and VAL_DATA_PATH are JSONL rows of a string ``prompt`` and a dict ``metadata``.

A bad row otherwise surfaces only when the rollout reads it, deep into a run. Prompts longer
than the context budget (the model's context minus ROLLOUT_MAX_RESPONSE_LEN) are warned:
SGLang refuses or truncates them. Lengths are counted with the model's tokenizer.json when
the ``tokenizers`` library is importable, else estimated (3 bytes per token, on the safe side).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .context import Context
from .report import Result, failed, passed, warned

#: how many bad line numbers a result names
SHOWN = 10
#: a UTF-8 byte-order mark, as text (some Windows editors write one)
BOM, BOM_WORDS = "\ufeff", "UTF-8 byte-order mark (BOM)"
#: the data files slime reads, by their name (slime/utils/data.py read_file); others stop the run
SLIME_SUFFIXES = (".jsonl", ".parquet")
#: bytes per token when no tokenizer is available (an under-estimate of real tokenizers' ~4)
BYTES_PER_TOKEN = 3


@dataclass
class Scan:
    """What one pass over a JSONL file found.

    :param rows: rows read (good and bad).
    :param bad: 1-based line numbers of bad rows, with the first reason seen.
    :param long: line numbers of prompts longer than the budget.
    :param longest: the longest prompt, in tokens.
    """

    rows: int = 0
    bad: list[int] = field(default_factory=list)
    reason: str = ""
    long: list[int] = field(default_factory=list)
    longest: int = 0


def row_problem(line: str) -> tuple[str, str | None]:
    """Why one JSONL line is not a usable row ("" when it is), and its prompt.

    :param line: the line's text.
    """
    try:
        row: Any = json.loads(line)
    except ValueError:
        return "not valid JSON", None
    if not isinstance(row, dict):
        return "not a JSON object", None
    if not isinstance(row.get("prompt"), str):
        return "`prompt` is missing or not a string", None
    if not isinstance(row.get("metadata"), dict):
        return "`metadata` is missing or not an object (the agent's payload)", row["prompt"]
    return "", row["prompt"]


def scan(path: Path, budget: int | None, measure: Callable[[str], int]) -> Scan:
    """Read ``path`` once, recording bad rows and prompts over ``budget`` tokens.

    :param path: a JSONL file.
    :param budget: the prompt-token budget (``None`` = unknown, not checked).
    :param measure: prompt text -> tokens.
    """
    found = Scan()
    with path.open(encoding="utf-8", errors="replace") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            found.rows += 1
            problem, prompt = row_problem(line)
            if number == 1 and line.startswith(BOM):
                problem = f"the file starts with a {BOM_WORDS}, and slime skips the row as bad JSON"
            if problem:
                found.bad.append(number)
                found.reason = found.reason or f"line {number}: {problem}"
                continue
            if budget is not None and prompt is not None:
                tokens = measure(prompt)
                found.longest = max(found.longest, tokens)
                if tokens > budget:
                    found.long.append(number)
    return found


def context_budget(ctx: Context) -> int | None:
    """Prompt tokens that fit: the context length minus ROLLOUT_MAX_RESPONSE_LEN.

    :param ctx: the check context.
    """
    context = ctx.value("SGLANG_CONTEXT_LENGTH")
    if context is None:
        try:
            hf = json.loads((Path(str(ctx.value("MODEL_DIR"))) / "config.json").read_text(encoding="utf-8"))
            hf = hf.get("text_config", hf)
            context = hf.get("max_position_embeddings")
        except (OSError, ValueError, AttributeError):
            return None
    if not isinstance(context, int):
        return None
    return context - int(str(ctx.value("ROLLOUT_MAX_RESPONSE_LEN")))


def token_counter(model_dir: Path) -> tuple[Callable[[str], int], str]:
    """A prompt-length function: the model's tokenizer.json if possible, else an estimate.

    :param model_dir: MODEL_DIR.
    """
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - no library or no tokenizer.json: estimate instead
        return (lambda text: -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)), "estimated"
    return (lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)), "tokenizer.json"


def _bad_rows_fix(found: Scan, path: Path) -> str:
    if BOM_WORDS in found.reason:
        return f"save it as UTF-8 without a BOM: sed -i '1s/^\\xEF\\xBB\\xBF//' {shlex.quote(str(path))}"
    return 'each line must be {"prompt": "<text>", "metadata": {...agent payload...}}'


def check_file(
    name: str, path: Path, budget: int | None, measure: Callable[[str], int], how: str
) -> list[Result]:
    """The results for one data file.

    :param name: DATA_PATH or VAL_DATA_PATH.
    :param path: the file.
    :param budget: prompt-token budget (``None`` = not checked).
    :param measure: prompt text -> tokens.
    :param how: how tokens were counted, for messages.
    """
    check = f"data.{name}"
    if not path.is_file():
        return [failed(check, f"{path} does not exist", f"fix {name} in the env file")]
    if path.suffix == ".parquet":
        return [passed(check, f"{path} is parquet (slime reads it; bin/eval with pyarrow): its rows are not "
                       "checked here, JSONL rows are")]
    if path.suffix not in SLIME_SUFFIXES:
        return [failed(check, f"{path} ends in {path.suffix or 'no suffix'}: slime reads a data file by its "
                       "name, .jsonl or .parquet, and stops at any other",
                       f"one JSON object per line, in a file named *.jsonl: {path.with_suffix('.jsonl')}")]
    try:
        found = scan(path, budget, measure)
    except OSError as exc:
        return [failed(check, f"cannot read {path}: {exc}", f"make {name} readable")]
    if found.rows == 0:
        return [failed(check, f"{path} has no rows", "write one JSON object per line")]
    if found.bad:
        lines = ", ".join(map(str, found.bad[:SHOWN])) + (" ..." if len(found.bad) > SHOWN else "")
        results = [
            failed(
                check,
                f"{len(found.bad)} of {found.rows} rows of {path} are bad (lines {lines}; {found.reason})",
                _bad_rows_fix(found, path),
            )
        ]
    else:
        results = [
            passed(check, f"{found.rows} rows of {path}, each with a string prompt and a metadata object")
        ]
    if budget is None:
        return results
    if found.long:
        lines = ", ".join(map(str, found.long[:SHOWN])) + (" ..." if len(found.long) > SHOWN else "")
        results.append(
            warned(
                f"{check}.length",
                f"{len(found.long)} prompts exceed the {budget}-token budget ({how}; lines {lines})",
                "shorten them, lower ROLLOUT_MAX_RESPONSE_LEN, or raise SGLANG_CONTEXT_LENGTH",
            )
        )
    else:
        results.append(
            passed(
                f"{check}.length",
                f"longest prompt {found.longest} tokens ({how}) within the {budget}-token budget",
            )
        )
    return results


def check_data(ctx: Context) -> list[Result]:
    """DATA_PATH and (when set) VAL_DATA_PATH.

    :param ctx: the check context.
    """
    budget = context_budget(ctx)
    measure, how = token_counter(Path(str(ctx.value("MODEL_DIR"))))
    results = []
    for name in ("DATA_PATH", "VAL_DATA_PATH"):
        if ctx.value(name) is not None:
            results += check_file(name, Path(str(ctx.value(name))), budget, measure, how)
    return results
