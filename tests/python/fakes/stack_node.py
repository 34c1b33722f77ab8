"""A stand-in node of one supported slime stack: slime's and SGLang's argument definitions.

train.sh chooses the flags that differ between stacks by asking the installed packages
(templates/lib/slime_helper.py): SGLang's version (its distribution's metadata), the options
``sglang.srt.server_args.ServerArgs.add_cli_args`` adds to a parser, and those slime's
``slime.utils.arguments.get_slime_extra_args_provider()`` adds. This module writes packages that
answer those three questions as each stack's real ones do, under the same import paths and
signatures, and nothing else: no other module of slime or SGLang exists in them.

The options are what the stacks' real parsers hold (tests/slime_stacks/<stack>.flags, recorded
from them; ``STACKS`` below has the ones the choice reads when no list is given).

As a script, for the bats tests: ``python3 stack_node.py DIR STACK`` writes DIR/slime (a
checkout: the parser module and train.py) and DIR/site (sglang with its dist-info) for STACK.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StackFacts:
    """What a stack's packages say: SGLang's version and the options the choice reads."""

    sglang: str
    slime_options: tuple[str, ...]
    sglang_options: tuple[str, ...]


#: the supported stacks, as their real parsers have them (tests/slime_stacks/*.flags: only
#: fa3c990's slime has --megatron-to-hf-mode; SGLang 0.5.15 added --cuda-graph-max-bs-decode and
#: kept the old name as a deprecated alias)
STACKS = {
    "fa3c990": StackFacts(
        "0.5.13", ("--megatron-to-hf-mode", "--rollout-num-gpus"), ("--cuda-graph-max-bs",)
    ),
    "v0.3.1": StackFacts(
        "0.5.15.post1", ("--rollout-num-gpus", "--rollout-sample-hook-path"),
        ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ),
    "624b824a8": StackFacts(
        "0.5.15.post1", ("--rollout-num-gpus", "--rollout-sample-hook-path"),
        ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ),
}

_SERVER_ARGS = '''"""Stand-in of SGLang {version}'s sglang/srt/server_args.py
(tests/python/fakes/stack_node.py): ServerArgs.add_cli_args adds the options of that version."""

OPTIONS = {options!r}


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        for option in OPTIONS:
            parser.add_argument(option)
'''

_SLIME_ARGUMENTS = '''"""Stand-in of slime's slime/utils/arguments.py (tests/python/fakes/stack_node.py):
get_slime_extra_args_provider() adds slime's own options to Megatron's parser."""

OPTIONS = {options!r}


def get_slime_extra_args_provider(add_custom_arguments=None):
    def add_slime_arguments(parser):
        for option in OPTIONS:
            parser.add_argument(option)
        return parser

    return add_slime_arguments
'''


def write_sglang(site: Path, version: str, options: Iterable[str]) -> None:
    """An installed ``sglang`` distribution in ``site`` (a site-packages or a PYTHONPATH entry).

    :param site: the directory.
    :param version: its version (dist-info metadata).
    :param options: what ``ServerArgs.add_cli_args`` adds (unprefixed, ``--cuda-graph-max-bs``).
    """
    srt = site / "sglang" / "srt"
    srt.mkdir(parents=True, exist_ok=True)
    (site / "sglang" / "__init__.py").write_text("", encoding="utf-8")
    (srt / "__init__.py").write_text("", encoding="utf-8")
    text = _SERVER_ARGS.format(version=version, options=sorted(options))
    (srt / "server_args.py").write_text(text, encoding="utf-8")
    for old in site.glob("sglang-*.dist-info"):
        for path in old.iterdir():
            path.unlink()
        old.rmdir()
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
    (info / "METADATA").write_text(metadata, encoding="utf-8")


def write_slime_arguments(package_root: Path, options: Iterable[str], extra: str = "") -> None:
    """``slime/utils/arguments.py`` under ``package_root`` (a checkout or a site-packages).

    :param package_root: the directory holding the ``slime`` package.
    :param options: slime's own options.
    :param extra: more module source appended (a ``parse_args`` stand-in, for instance).
    """
    utils = package_root / "slime" / "utils"
    utils.mkdir(parents=True, exist_ok=True)
    (package_root / "slime" / "__init__.py").write_text("", encoding="utf-8")
    (utils / "__init__.py").write_text("", encoding="utf-8")
    text = _SLIME_ARGUMENTS.format(options=sorted(options)) + extra
    (utils / "arguments.py").write_text(text, encoding="utf-8")


def write_node(root: Path, stack: str) -> tuple[Path, Path]:
    """A node of ``stack`` under ``root``: (SLIME_DIR, the site holding sglang).

    :param root: the directory.
    :param stack: a name of :data:`STACKS`.
    """
    facts = STACKS[stack]
    slime, site = root / "slime", root / "site"
    write_slime_arguments(slime, facts.slime_options)
    (slime / "train.py").touch()
    write_sglang(site, facts.sglang, facts.sglang_options)
    return slime, site


if __name__ == "__main__":
    write_node(Path(sys.argv[1]), sys.argv[2])
