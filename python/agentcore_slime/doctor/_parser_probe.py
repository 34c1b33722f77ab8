"""Probe run by the job's python: every flag slime's ``parse_args`` accepts, as JSON.

slime parses with several argparse parsers (a pre-parser, SGLang's ``ServerArgs`` prefixed
``--sglang-``, the router's ``--router-``, Megatron's with slime's own flags), each through
``parse_known_args``. This probe records the option strings of every parser that slime's
``parse_args`` asks to parse, and hands back defaults instead of parsing, so no flag value
matters; the validation that follows then fails on the missing values, which is expected.

Usage: python3 _parser_probe.py  -> {"flags": [...], "error": "..."} on the last stdout line.
"""

import argparse
import json
import sys
from typing import Any

seen: set[str] = set()


def _recording(
    self: argparse.ArgumentParser, args: Any = None, namespace: Any = None
) -> tuple[Any, list[str]]:
    seen.update(option for option in self._option_string_actions if option.startswith("--"))
    namespace = namespace if namespace is not None else argparse.Namespace()
    for action in self._actions:
        if action.dest is not argparse.SUPPRESS and not hasattr(namespace, action.dest):
            setattr(namespace, action.dest, action.default)
    return namespace, []


argparse.ArgumentParser.parse_known_args = _recording  # type: ignore[method-assign]
sys.argv = ["train.py"]
error = ""
try:
    from slime.utils.arguments import parse_args

    parse_args()
except BaseException as exc:  # noqa: BLE001 - validation of the empty command line fails
    error = f"{type(exc).__name__}: {exc}"[:300]
print()
print(json.dumps({"flags": sorted(seen), "error": error}))
