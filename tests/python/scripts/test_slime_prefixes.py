"""No flag of a rendered command line is read as another by slime's parsers' prefix rule.

slime's ``parse_args`` reads ``sys.argv`` with several argparse parsers, each through
``parse_known_args``: a pre-parser (``allow_abbrev=False``), the engine-size pre-parser of
``sglang_parse_args`` (``--rollout-num-gpus-per-engine`` and the pipeline sizes alone, argparse's
default ``allow_abbrev=True``), the SGLang and router parser (``allow_abbrev=True``) and
Megatron's with slime's own flags (``allow_abbrev=False``). Where abbreviations are allowed, a
flag that parser does not have but that starts one of its options is read as that option:
``--rollout-num-gpus 4`` placed after ``--rollout-num-gpus-per-engine 2`` made the engine size 4.

slime's code cannot be installed here (it is on no package registry), so this is not slime's own
pre-parser running: it is each parser slime builds, as ``tests/slime_stacks/record.sh`` recorded
it from the real, patched stacks (``<stack>.parsers.json``: ``allow_abbrev`` and every action's
option strings, dest, kind and arity), rebuilt with Python's own ``argparse``, so the prefix
rule applied is argparse's exact one. Each variant's command line, as train.sh --print-command
prints it on a node of that stack, is read by every such parser twice, as slime's parser reads it
and with abbreviations off; any value that differs is a flag read as another.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from test_slime_stacks import (
    CASE_IDS,
    CASES,
    STACKS,
    STACKS_DIR,
    describe_node,
    flags_of,
    print_command,
    read_stack,
)

Recorded = dict[str, Any]


class _Refused(Exception):
    """argparse gave up on the command line (an ambiguous abbreviation, a missing value)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise _Refused(message)


def rebuild(recorded: Recorded, allow_abbrev: bool) -> argparse.ArgumentParser:
    """A parser with the recorded parser's options, arities and actions; its prefix rule on or off."""
    parser = _Parser(add_help=False, allow_abbrev=allow_abbrev, conflict_handler="resolve")
    for options, dest, kind, nargs in recorded["actions"]:
        if kind == "boolean_optional":  # it adds the --no- form itself
            parser.add_argument(*[o for o in options if not o.startswith("--no-")], dest=dest,
                                action=argparse.BooleanOptionalAction)
        elif kind in ("store_const", "append_const") or (kind == "custom" and nargs == 0):
            parser.add_argument(*options, dest=dest, action="append_const" if kind == "append_const"
                                else "store_const", const=True)
        elif kind in ("store_true", "store_false", "count"):
            parser.add_argument(*options, dest=dest, action=kind)
        else:  # store, append, extend, and classes of their own that take values (stored)
            parser.add_argument(*options, dest=dest, nargs=nargs,
                                action=kind if kind in ("append", "extend") else "store")
    return parser


def captured(recorded: Recorded, argv: list[str]) -> list[str]:
    """Each value the recorded parser reads differently because of its prefix rule, named with
    the flags that can have been read as another."""
    if not recorded["allow_abbrev"]:
        return []
    try:
        as_slime, _ = rebuild(recorded, True).parse_known_args(argv)
    except _Refused as exc:
        return [f"the parser refuses the command line: {exc}"]
    exact, _ = rebuild(recorded, False).parse_known_args(argv)
    options = {o for action in recorded["actions"] for o in action[0]}
    words = flags_of(argv)
    suspects = sorted({w for w in words if w not in options and any(o.startswith(w) for o in options)})
    return [f"{dest}: {getattr(exact, dest)!r} becomes {value!r} (flags starting an option: {suspects})"
            for dest, value in vars(as_slime).items() if getattr(exact, dest) != value]


def read_parsers(stack: str) -> list[Recorded]:
    recorded = json.loads((STACKS_DIR / f"{stack}.parsers.json").read_text(encoding="utf-8"))
    assert recorded["stack"] == stack
    return list(recorded["parsers"])


@pytest.mark.parametrize(("stack_name", "env_file", "variant"), CASES, ids=CASE_IDS)
def test_no_rendered_flag_is_read_as_another_by_any_parser_of_slime(
    stack_name: str, env_file: Path, variant: str, tmp_path: Path
) -> None:
    slime, site = describe_node(read_stack(stack_name), tmp_path / "node")
    argv, _ = print_command(env_file, variant, slime, site, tmp_path)
    parsers = read_parsers(stack_name)
    found = [f"parser {n}: {c}" for n, parser in enumerate(parsers) for c in captured(parser, argv[2:])]
    assert not found, f"{stack_name} {env_file.stem} {variant}: {found}"


def test_the_recordings_hold_the_parsers_that_read_abbreviations() -> None:
    """What the check above rests on: each stack has the engine-size pre-parser (abbreviations
    on) and the SGLang parser (on), beside the pre-parser and Megatron's (off)."""
    for stack in STACKS:
        parsers = read_parsers(stack)
        on = [sorted({o for a in p["actions"] for o in a[0]}) for p in parsers if p["allow_abbrev"]]
        assert ["--rollout-num-gpus-per-engine", "--sglang-pipeline-parallel-size", "--sglang-pp-size"] in on
        assert any("--sglang-mem-fraction-static" in options for options in on)
        assert any(not p["allow_abbrev"] and any(a[0] == ["--hf-checkpoint"] for a in p["actions"])
                   for p in parsers)


def test_the_check_finds_the_engine_size_read_from_rollout_num_gpus() -> None:
    """The order train.sh had before: --rollout-num-gpus after --rollout-num-gpus-per-engine is
    read as the engine size (4, not 2) by the engine-size pre-parser; the check says so."""
    engine_size = next(p for p in read_parsers("fa3c990")
                       if [a[0] for a in p["actions"]][0] == ["--rollout-num-gpus-per-engine"])
    before = ["--rollout-num-gpus-per-engine", "2", "--colocate", "--rollout-num-gpus", "4"]
    [found] = captured(engine_size, before)
    assert found.startswith("rollout_num_gpus_per_engine: '2' becomes '4'")
    assert "['--rollout-num-gpus']" in found
    after = ["--rollout-num-gpus", "4", "--colocate", "--rollout-num-gpus-per-engine", "2"]
    assert captured(engine_size, after) == []
