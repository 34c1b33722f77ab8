"""Parse command lines with SGLang 0.5.13's own argument parser; run by the .venv-sglang python.

Reads a JSON list of argv lists on stdin and prints one JSON object per argv: either
``{"ok": true, "args": {...}}`` (the parsed namespace, as SGLang's ``prepare_server_args`` builds
it: ``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser``, a ``--config`` YAML merged by
SGLang's ``ConfigArgumentMerger``) or ``{"ok": false, "error": "..."}`` (argparse's message).

The one stand-in: ``torchvision``. ``import sglang.srt.server_args`` imports it (image decoding
in ``srt/utils/common.py``, image processors registered in ``srt/configs``), and no build of it
loads beside the CPU torch of this machine (PyPI's needs CUDA's ``libc10_cuda.so``). Image code
never runs while arguments are parsed, so an importable stand-in whose every name is an inert
placeholder is enough; everything else, SGLang and its parser included, is the real package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import sys
import types
from typing import Any


class _Placeholder(type):
    """A class whose every attribute is another placeholder (enum members such as
    ``InterpolationMode.NEAREST_EXACT`` that transformers reads at import)."""

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


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``torchvision`` and any ``torchvision.*`` as modules of placeholders."""

    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__dict__["__version__"] = "0.28.0"  # the release that pairs with torch 2.13

        def placeholder(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (_Inert,), {})

        module.__dict__["__getattr__"] = placeholder
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger

    if "--config" in argv:  # as prepare_server_args does
        argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(argv)
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1]}
    return {"ok": True, "args": {k: v for k, v in vars(namespace).items() if _plain(v)}}


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, list))


def main() -> int:
    sys.meta_path.insert(0, _TorchvisionStandIn())
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    results = [_parse(parser, list(argv)) for argv in json.load(sys.stdin)]
    print(json.dumps({"version": sglang.__version__, "results": results}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
