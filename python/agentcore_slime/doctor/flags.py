"""Flag check: every flag of the final command line is one the installed slime stack accepts.

slime parses Megatron's and its own flags with ``ignore_unknown_args=True`` and SGLang's with
``parse_known_args``: a misspelt or removed flag is dropped silently. The accepted flags are read
from the installed parsers themselves (``_parser_probe.py``, run by the job's python), so they
match whatever slime, Megatron and SGLang versions are installed. The command line includes the
flags train.sh chooses for the slime stack it finds (STACK_ARGS: ``scripts/stack.py`` asks
templates/lib/slime.sh, as train.sh does, with the job's python as python3).
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path

from ..preflight.context import Context
from ..preflight.model import read_model_args
from ..preflight.report import Result, failed, passed, warned
from ..scripts.stack import read_stack

_PROBE = Path(__file__).with_name("_parser_probe.py")


def flags_of(words: list[str]) -> list[str]:
    """The flag names of a command line (``--x=1`` counts as ``--x``), first occurrence order.

    :param words: the command line.
    """
    names = [word.partition("=")[0] for word in words if word.startswith("--") and len(word) > 2]
    return list(dict.fromkeys(names))


def unknown_flags(words: list[str], known: set[str]) -> list[str]:
    """Each unknown flag, with the closest known one when there is one.

    :param words: the command line.
    :param known: every flag the parsers accept.
    """
    found = []
    for flag in flags_of(words):
        if flag in known:
            continue
        close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.7)
        found.append(f"{flag} (did you mean {close[0]}?)" if close else f"{flag} (no similar flag)")
    return found


def check_flags(ctx: Context) -> list[Result]:
    """The flags of the final command line against the installed parsers.

    :param ctx: the check context.
    """
    name = "flags.known"
    data, error = ctx.run_job_python(_PROBE)
    known = set(data.get("flags") or []) if data else set()
    if not known:
        why = error or (data or {}).get("error") or "no parser was built"
        return [warned(name, f"cannot read slime's argument parsers ({why})", "fix env.imports first")]
    script = Path(str(ctx.value("SLIME_DIR"))) / "scripts" / "models" / f"{ctx.value('MODEL_TYPE')}.sh"
    model_args, _ = read_model_args(ctx, script)
    stack = read_stack(ctx.repo, str(ctx.value("SLIME_DIR")), ctx.job_environ(), ctx.job_python, "bin/doctor")
    words = ctx.command_line(model_args or []) + stack.args
    unknown = unknown_flags(words, known)
    if unknown:
        return [
            failed(
                name,
                f"slime would silently ignore {len(unknown)} flag(s): {'; '.join(unknown)}",
                "correct or remove them in EXTRA_FLAGS, after --, or in the model script",
            )
        ]
    accepted = f"all {len(flags_of(words))} flags are accepted by the installed slime/Megatron/SGLang"
    if stack.error:
        return [
            warned(
                name,
                f"{accepted}, but not the flags train.sh chooses for the slime stack: it cannot tell "
                f"which stack this node has ({stack.error}), and train.sh stops on that too",
                "make SLIME_DIR a slime checkout and install SGLang for the job's python (install_slime.sh)",
            )
        ]
    return [passed(name, f"{accepted}, {shlex.join(stack.args)} (chosen for this slime stack) included")]
