"""What the slime stack of the job's python accepts (templates/lib/slime.sh, slime_stack_args).

Run as ``python3 slime_helper.py SLIME_DIR`` with the job's python, by its own path (a venv's
python finds its site-packages only there): the packages themselves are asked, never the text
of their files. SGLang's version is its distribution's; its options are those
``ServerArgs.add_cli_args`` adds to a fresh parser, and slime's those its
``get_slime_extra_args_provider()`` adds (slime imported from SLIME_DIR first, as
``python3 SLIME_DIR/train.py`` imports it). Prints, on stdout::

    0.5.15.post1              SGLang's version
    slime --some-flag         each option of OPTIONS_ASKED the stack has
    sglang --other-flag

and status 0; or one line saying what could not be read, and status 1. What the imports print
goes to stderr, so stdout holds only the answer.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
import warnings
from collections.abc import Callable, Iterator

#: the options whose presence decides a flag of STACK_ARGS (templates/lib/slime.sh)
OPTIONS_ASKED = {
    "slime": ("--megatron-to-hf-mode",),
    "sglang": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
}


class StackUnreadable(Exception):
    """The stack cannot be asked; the message says why and how to fix it."""


def _options(add_arguments: Callable[[argparse.ArgumentParser], object]) -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return set(parser._option_string_actions)


def sglang_options() -> tuple[str, set[str]]:
    """(version, option strings of ``ServerArgs.add_cli_args``) of this python's sglang."""
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise StackUnreadable(
            f"python3 ({sys.executable}) has no sglang package "
            "(activate the environment that has the slime stack)"
        ) from None
    try:
        from sglang.srt.server_args import ServerArgs

        return version, _options(ServerArgs.add_cli_args)
    except Exception as exc:  # noqa: BLE001 - whatever SGLang raises, the stack is unreadable
        raise StackUnreadable(f"cannot build SGLang {version}'s server arguments ({_said(exc)})") from None


def slime_options(slime_dir: str) -> set[str]:
    """The option strings slime at ``slime_dir`` adds to Megatron's parser."""
    sys.path.insert(0, slime_dir)
    try:
        from slime.utils.arguments import get_slime_extra_args_provider

        return _options(get_slime_extra_args_provider())
    except Exception as exc:  # noqa: BLE001 - whatever slime raises, the stack is unreadable
        raise StackUnreadable(f"cannot build slime's arguments from {slime_dir} ({_said(exc)})") from None


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def answer(slime_dir: str) -> list[str]:
    """The lines printed on success (the module docstring)."""
    version, sglang = sglang_options()
    slime = slime_options(slime_dir)
    found = {"slime": slime, "sglang": sglang}
    return [version] + [f"{part} {option}" for part, asked in OPTIONS_ASKED.items()
                        for option in asked if option in found[part]]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 slime_helper.py SLIME_DIR")
        return 2
    try:
        with _stdout_to_stderr(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lines = answer(argv[0])
    except StackUnreadable as exc:
        print(exc)
        return 1
    print("\n".join(lines))
    return 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """What the imports write to stdout, Python's print and C's write(1, ...) alike, goes to
    stderr: stdout carries only the answer."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
