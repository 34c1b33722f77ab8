"""Run slime's own pre-parsers over rendered command lines: is any flag read as another?

Where slime's code can be imported (a slime checkout, its SGLang and sglang-router; CPU is
enough), this runs slime's real ``_pre_parse_mode`` and ``sglang_parse_args`` (every parser they
build, argparse's abbreviations as slime leaves them) over each command line and over it again
with abbreviations off, and names every value that differs. Megatron's parser is not run here: it
is built with ``allow_abbrev=False`` (tests/slime_stacks/*.parsers.json records it so).

The test suite cannot import slime (no package registry has it); there
``tests/python/scripts/test_slime_prefixes.py`` rebuilds these parsers from their recording.
Usage (the argv files are what test_slime_stacks.py writes to ``$TOOLKIT_STACK_ARGV_DIR``)::

    python check_prefixes.py --slime DIR [--stand-in MOD ...] ARGV_FILE...

Prints one line per file, ``ok`` or what was read as another; exits 1 when any was.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from record_flags import _StandIn

_ORIGINAL = argparse.ArgumentParser.parse_known_args
differences: list[str] = []


def _both_ways(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
    """slime's parse, and the same parser's parse with abbreviations off; differences noted."""
    result = _ORIGINAL(self, args, namespace)
    if self.allow_abbrev:
        self.allow_abbrev = False
        try:
            exact, _ = _ORIGINAL(self, args, None)
        finally:
            self.allow_abbrev = True
        for dest, value in vars(result[0]).items():
            if hasattr(exact, dest) and getattr(exact, dest) != value:
                differences.append(f"{dest}: {getattr(exact, dest)!r} read as {value!r}")
    return result


def check(argv_file: Path) -> list[str]:
    """What slime's pre-parsers read differently in the command line of ``argv_file``."""
    words = shlex.split(argv_file.read_text(encoding="utf-8"))
    sys.argv = ["train.py", *words[2:]]
    differences.clear()
    from slime.backends.sglang_utils.arguments import sglang_parse_args
    from slime.utils.arguments import _pre_parse_mode

    _pre_parse_mode()
    sglang_parse_args()
    return list(differences)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slime", required=True, help="a slime checkout")
    parser.add_argument("--stand-in", action="append", default=[], help="a module no parser needs")
    parser.add_argument("argv", nargs="+", type=Path, help="a file holding one command line")
    options = parser.parse_args()
    sys.path.insert(0, options.slime)
    sys.meta_path.insert(0, _StandIn(options.stand_in))
    argparse.ArgumentParser.parse_known_args = _both_ways  # type: ignore[method-assign]
    failed = False
    for argv_file in options.argv:
        found = check(argv_file)
        failed = failed or bool(found)
        print(f"{argv_file.name}: {'; '.join(found) if found else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
