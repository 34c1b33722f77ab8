#!/usr/bin/env python3
# Summary: turn GSM8K into the train/validation JSONL files bin/train reads
# Usage: prepare_gsm8k.py --train FILE [--validation FILE] --out-dir DIR [--limit N] [--force]
#        prepare_gsm8k.py --hub [--hub-name openai/gsm8k] --out-dir DIR [--limit N] [--force]
#
#   --train FILE         GSM8K rows (.jsonl or .parquet) with "question" and "answer" keys
#   --validation FILE    the same for the validation file (GSM8K's "test" split)
#   --hub                load the dataset with the `datasets` library instead (needs the internet)
#   --limit N            keep the first N rows of each split (--validation-limit overrides it)
#   --skip-invalid       drop rows whose answer cannot be parsed (default: stop with an error)
#   --force              overwrite existing output files (and remove a validation.jsonl
#                        from an earlier run when this one writes none)
"""Prepare GSM8K for training: one JSONL row per problem, its metadata is the agent payload.

Each output row is ``{"prompt": question, "metadata": {"prompt": question, "answer": final}}``:
slime reads ``prompt`` (``--input-key prompt``) for length filtering and hands ``metadata`` to the
rollout, which sends it verbatim to the agent as its payload (plus the ``_rollout`` settings).
``final`` is the number after the ``#### `` marker that ends every GSM8K answer, with thousands
separators removed.

Input is read from local ``.jsonl``/``.parquet`` files, or from the Hugging Face hub through the
``datasets`` library (imported only when ``--hub`` is used). Every row is checked before anything is
written; existing output files are never overwritten without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PROG = "prepare_gsm8k.py"
FINAL_MARKER = "####"
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_SPLIT_FILES = {"train": "train.jsonl", "validation": "validation.jsonl"}
_HUB_SPLITS = {"train": "train", "validation": "test"}


class InputError(Exception):
    """Bad input from the user: printed as ``prepare_gsm8k.py: <message>`` with exit status 2."""


@dataclass(frozen=True)
class Problem:
    """One parsed GSM8K problem.

    :param question: the problem text, stripped.
    :param answer: the final number as a plain string (``"1000"``, ``"-3"``, ``"2.5"``).
    """

    question: str
    answer: str

    def to_row(self) -> dict[str, Any]:
        """The JSONL row slime reads; ``metadata`` is the agent's payload."""
        return {"prompt": self.question, "metadata": {"prompt": self.question, "answer": self.answer}}


def extract_final_answer(solution: str) -> str:
    """Return the number after the last ``####`` marker of a GSM8K solution.

    :param solution: the GSM8K ``answer`` text (reasoning, then ``#### <number>``).
    :raises ValueError: when there is no marker or what follows it is not a single number.
    """
    if FINAL_MARKER not in solution:
        raise ValueError(f"answer has no '{FINAL_MARKER} <number>' final line")
    tail = solution.rsplit(FINAL_MARKER, 1)[1].strip()
    cleaned = tail.replace(",", "").replace("$", "").strip()
    if not _NUMBER.fullmatch(cleaned):
        raise ValueError(f"'{FINAL_MARKER}' is followed by {tail!r}, not a number")
    if cleaned.startswith("+"):
        cleaned = cleaned[1:]
    return cleaned


def parse_row(row: Any, where: str) -> Problem:
    """Check one raw GSM8K row and parse it.

    :param row: a decoded row; must be a mapping with string ``question`` and ``answer``.
    :param where: ``file:line`` used in error messages.
    :raises InputError: with the location, what is wrong and how to fix it.
    """
    if not isinstance(row, dict):
        raise InputError(f"{where}: row is a {type(row).__name__}, expected an object with "
                         "'question' and 'answer' (is this a GSM8K file?)")
    missing = [key for key in ("question", "answer") if key not in row]
    if missing:
        raise InputError(f"{where}: row has no {', '.join(repr(k) for k in missing)} "
                         f"(keys present: {sorted(row)}; GSM8K rows have 'question' and 'answer')")
    question, solution = row["question"], row["answer"]
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{where}: 'question' must be a non-empty string")
    if not isinstance(solution, str):
        raise InputError(f"{where}: 'answer' must be a string ending in '{FINAL_MARKER} <number>'")
    try:
        final = extract_final_answer(solution)
    except ValueError as err:
        raise InputError(f"{where}: {err}") from err
    return Problem(question=question.strip(), answer=final)


def read_rows(path: Path) -> list[tuple[str, Any]]:
    """Read a local ``.jsonl`` or ``.parquet`` file as ``(location, row)`` pairs.

    :param path: the input file.
    :raises InputError: missing file, unknown suffix, invalid JSON, or pyarrow missing for parquet.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such file (check the path given to --train/--validation)")
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".json", ".ndjson"}:
        return list(_read_jsonl(path))
    if suffix == ".parquet":
        return _read_parquet(path)
    raise InputError(f"{path}: unknown file type {suffix!r} (give a .jsonl or .parquet file)")


def _read_jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{where}: not valid JSON ({err.msg}; one JSON object per line)") from err


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise InputError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from err
    table = pq.read_table(path)
    return [(f"{path}:row {index}", row) for index, row in enumerate(table.to_pylist())]


def read_hub_split(name: str, split: str) -> list[tuple[str, Any]]:
    """Load one split of a hub dataset with the ``datasets`` library (imported lazily).

    :param name: the hub dataset name, e.g. ``openai/gsm8k``.
    :param split: ``train`` or ``test``.
    """
    try:
        import datasets
    except ImportError as err:
        raise InputError("--hub needs the `datasets` library (pip install datasets), "
                         "or download the parquet files and pass --train/--validation") from err
    dataset = datasets.load_dataset(name, "main", split=split)
    return [(f"{name}[{split}] row {index}", dict(row)) for index, row in enumerate(dataset)]


def parse_split(rows: Sequence[tuple[str, Any]], limit: int | None, skip_invalid: bool) -> list[Problem]:
    """Parse rows in order until ``limit`` valid problems are collected.

    :param rows: ``(location, row)`` pairs.
    :param limit: keep at most this many problems (None: all).
    :param skip_invalid: drop unparseable rows with a warning instead of raising.
    :raises InputError: on the first bad row unless ``skip_invalid``, or when nothing is left.
    """
    problems: list[Problem] = []
    skipped = 0
    for where, row in rows:
        if limit is not None and len(problems) >= limit:
            break
        try:
            problems.append(parse_row(row, where))
        except InputError as err:
            if not skip_invalid:
                raise InputError(f"{err} (fix the row, or pass --skip-invalid to drop such rows)") from err
            skipped += 1
            logger.warning("skipped %s", err)
    if skipped:
        logger.warning("skipped %d invalid row(s)", skipped)
    if not problems:
        raise InputError("no valid rows in the input (is it empty, or is every answer unparseable?)")
    return problems


def write_jsonl_atomic(path: Path, problems: Sequence[Problem]) -> None:
    """Write the rows to a temporary file beside ``path`` and rename it into place.

    The file gets the mode a plain ``open()`` would give it (0644 under the usual umask 022),
    not the 0600 of the temporary file.

    :param path: the output file.
    :param problems: the rows to write, in order.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for problem in problems:
                handle.write(json.dumps(problem.to_row(), ensure_ascii=False) + "\n")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_out_dir(out_dir: Path, targets: Iterable[Path]) -> None:
    """Refuse an ``--out-dir`` that cannot hold the output files, before anything is read.

    :param out_dir: the ``--out-dir`` value; it, or its nearest existing parent, must be a directory.
    :param targets: the output files; none may be a directory.
    :raises InputError: naming the path that is in the way.
    """
    existing = out_dir
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        inside = "" if existing == out_dir else f" (inside {existing})"
        raise InputError(f"--out-dir {out_dir}{inside}: {existing} exists and is not a directory (choose a "
                         "directory for --out-dir; --force replaces output files, never other files)")
    for target in targets:
        if target.is_dir():
            raise InputError(f"{target} is a directory (move it away, or choose another --out-dir)")


def _umask() -> int:
    """The process umask (reading it means setting it: put it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (see the ``Usage:`` header)."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--train", type=Path, help="local GSM8K train file (.jsonl or .parquet)")
    source.add_argument("--hub", action="store_true", help="load train/test with the datasets library")
    parser.add_argument("--validation", type=Path, help="local GSM8K file for validation (GSM8K 'test')")
    parser.add_argument("--hub-name", default="openai/gsm8k", help="hub dataset name (default: %(default)s)")
    parser.add_argument("--out-dir", type=Path, required=True, help="where train.jsonl/validation.jsonl go")
    parser.add_argument("--limit", type=_positive_int, help="keep the first N rows of each split")
    parser.add_argument("--validation-limit", type=_positive_int, help="validation rows (default: --limit)")
    parser.add_argument("--skip-invalid", action="store_true", help="drop unparseable rows, do not fail")
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")
    return parser


def _load_sources(options: argparse.Namespace) -> dict[str, list[tuple[str, Any]]]:
    if options.hub:
        if options.validation is not None:
            raise InputError("--validation is for local files; with --hub both splits come from the hub")
        return {split: read_hub_split(options.hub_name, hub) for split, hub in _HUB_SPLITS.items()}
    sources = {"train": read_rows(options.train)}
    if options.validation is not None:
        sources["validation"] = read_rows(options.validation)
    return sources


def run(options: argparse.Namespace) -> dict[str, Path]:
    """Validate everything, then write the split files; returns split name -> written path.

    :param options: parsed command-line options.
    :raises InputError: on any bad input, before any file is written.
    """
    targets = {split: options.out_dir / _SPLIT_FILES[split] for split in _SPLIT_FILES}
    check_out_dir(options.out_dir, targets.values())
    sources = _load_sources(options)
    # every split file counts: a validation.jsonl from an earlier run beside a new train.jsonl
    # would be evaluated on as if it belonged to it
    existing = [str(path) for path in targets.values() if path.exists()]
    if existing and not options.force:
        raise InputError(f"{', '.join(existing)} already exist(s) (pass --force to overwrite, "
                         "or choose another --out-dir)")
    limits = {"train": options.limit, "validation": options.validation_limit or options.limit}
    parsed = {
        split: parse_split(rows, limits[split], options.skip_invalid) for split, rows in sources.items()
    }
    for split, problems in parsed.items():
        try:
            write_jsonl_atomic(targets[split], problems)
        except OSError as err:
            raise InputError(f"cannot write {targets[split]}: {err.strerror or err} "
                             "(check that --out-dir is a writable directory)") from err
        logger.info("wrote %d rows to %s", len(problems), targets[split])
    for split, path in targets.items():
        if split not in parsed and path.exists():
            path.unlink()
            hint = f"pass --{split} to write a new one"
            logger.warning("removed %s: it came from an earlier run (%s)", path, hint)
    return {split: targets[split] for split in parsed}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status (2 bad input, 0 success)."""
    logging.basicConfig(level=logging.INFO, format=f"{PROG}: %(message)s", stream=sys.stderr)
    options = build_parser().parse_args(argv)
    try:
        written = run(options)
    except InputError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    for path in written.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
