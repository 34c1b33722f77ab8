"""Record every flag one slime stack's ``parse_args`` accepts: slime's own, Megatron-LM's, SGLang's
(``--sglang-*``) and the router's (``--router-*``), one per line, for ``tests/slime_stacks/<stack>.flags``.

The parsers are the real ones, imported from a slime checkout and a Megatron-LM checkout at the
stack's commits and from the python running this script, which must have that stack's SGLang and
sglang-router installed (CPU is enough). ``argparse.ArgumentParser.parse_known_args`` is replaced
by a recorder (as ``agentcore_slime/doctor/_parser_probe.py`` does on a node), so no value is
parsed and slime's validation of the empty command line fails afterwards, which is expected.

Modules that only GPU builds provide (``torchvision``, kernels) and that no parser needs can be
stood in for with ``--stand-in NAME`` (every attribute an inert placeholder); the file header
lists them. Usage (tests/slime_stacks/README.md shows the whole regeneration):

    python record_flags.py --slime DIR --megatron DIR --stack NAME [--stand-in MOD ...] > NAME.flags
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import subprocess
import sys
import traceback
import types
from importlib import metadata
from typing import Any


class _Placeholder(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


class _Inert(metaclass=_Placeholder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Inert()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


def _module_attribute(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Inert if name[:1].isupper() else _Inert()


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports each named module (and its submodules) as a module of placeholders."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if any(name == n or name.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_attribute  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


#: argparse's own action classes by the ``action=`` name that makes them
_KINDS = {
    argparse._StoreAction: "store",
    argparse._StoreConstAction: "store_const",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._AppendAction: "append",
    argparse._AppendConstAction: "append_const",
    argparse._CountAction: "count",
    argparse._ExtendAction: "extend",
    argparse.BooleanOptionalAction: "boolean_optional",
}


def _describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """What decides how ``parser`` reads a command line: ``allow_abbrev`` and, per optional
    action, its option strings, dest, how many values it takes and what it does with them (a
    class of its own, such as SGLang's deprecated alias, as ``custom``)."""
    actions = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        kind = next((name for cls, name in _KINDS.items() if type(action) is cls), "custom")
        nargs = action.nargs if kind in ("store", "append", "extend", "custom") else None
        actions.append([action.option_strings, action.dest, kind, nargs])
    return {"allow_abbrev": parser.allow_abbrev, "actions": actions}


def _commit(directory: str) -> str:
    done = subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else "(not a git checkout)"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slime", required=True, help="a slime checkout at the stack's commit")
    parser.add_argument("--megatron", required=True, help="a Megatron-LM checkout at the stack's commit")
    parser.add_argument("--stack", required=True, help="the stack's name (the file's header)")
    parser.add_argument("--slime-commit", default="", help="the commit, when --slime is not a git checkout")
    parser.add_argument("--megatron-commit", default="", help="the commit, when --megatron is not a git checkout")
    parser.add_argument("--stand-in", action="append", default=[], help="a module no parser needs")
    parser.add_argument("--patched", default="", help="the patches applied (the file's header)")
    parser.add_argument("--parsers", default="", help="also write each parser slime builds, as JSON, here")
    options = parser.parse_args()
    sys.path[:0] = [options.slime, options.megatron]
    sys.meta_path.insert(0, _StandIn(options.stand_in))

    seen: set[str] = set()
    renamed: dict[str, str] = {}
    parsers: list[dict[str, Any]] = []

    def recording(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        seen.update(o for o in self._option_string_actions if o.startswith("--"))
        parsers.append(_describe(self))
        for option, action in self._option_string_actions.items():
            new = getattr(action, "new_flag", None)
            if "Deprecated" in type(action).__name__ and isinstance(new, str):
                prefix = "--sglang-" if option.startswith("--sglang-") else "--"
                renamed[option] = prefix + new.removeprefix("--")
        namespace = namespace if namespace is not None else argparse.Namespace()
        for action in self._actions:
            if action.dest is not argparse.SUPPRESS and not hasattr(namespace, action.dest):
                setattr(namespace, action.dest, action.default)
        return namespace, []

    argparse.ArgumentParser.parse_known_args = recording  # type: ignore[method-assign]
    sys.argv = ["train.py"]
    error = ""
    try:
        from slime.utils.arguments import parse_args

        parse_args()
    except BaseException as exc:  # noqa: BLE001 - validation of the empty command line fails
        error = f"{type(exc).__name__}: {exc}"[:200].replace("\n", " ")
        traceback.print_exc(limit=-4)
    if not any(f.startswith("--sglang-") for f in seen) or "--hf-checkpoint" not in seen:
        sys.exit(f"record_flags: the parsers were not all built ({error or 'no error'})")
    print(f"# stack {options.stack}: every flag slime's parse_args accepts (tests/slime_stacks/record_flags.py)")
    print(f"# slime {options.slime_commit or _commit(options.slime)}")
    print(f"# Megatron-LM {options.megatron_commit or _commit(options.megatron)}")
    print(f"# sglang {_version('sglang')}, sglang-router {_version('sglang-router')}")
    print(f"# patched as slime's docker/Dockerfile patches them: {options.patched or 'no'}")
    print(f"# stand-ins: {', '.join(options.stand_in) or 'none'}")
    print("# FLAG, or FLAG -> NEW for a deprecated alias (accepted with a warning)")
    for flag in sorted(seen):
        print(f"{flag} -> {renamed[flag]}" if flag in renamed else flag)
    if options.parsers:
        with open(options.parsers, "w", encoding="utf-8") as out:
            json.dump({"stack": options.stack, "parsers": parsers}, out, indent=0, separators=(",", ":"))
            out.write("\n")


if __name__ == "__main__":
    main()
