"""The parsers fit the model: SGLANG_TOOL_CALL_PARSER, SGLANG_REASONING_PARSER and
RENDERER_FAMILY against MODEL_DIR's config.json and tokenizer (settings/model_family.py).

A blocking check (bin/train, bin/eval and bin/doctor run it, as part of the ``model`` group):
a parser that does not fit the model makes every tool call of the run unreadable, and the agent
sees raw text while training goes on. ``auto`` (the default) is chosen here from the model, and
the line says what was chosen and why; the gateway chooses the same at start.
"""

from __future__ import annotations

from pathlib import Path

from ..settings.model_family import fit_model, read_model
from .context import Context
from .report import Result, failed, passed, warned

#: the check's name per setting
CHECK_NAMES = {
    "SGLANG_TOOL_CALL_PARSER": "model.tool-call-parser",
    "SGLANG_REASONING_PARSER": "model.reasoning-parser",
    "RENDERER_FAMILY": "model.renderer-family",
}


def check_parsers(ctx: Context) -> list[Result]:
    """One result per setting that does not fit MODEL_DIR, else one PASS saying what was chosen.

    Nothing when MODEL_DIR has no config.json (``model.config`` says so).

    :param ctx: the check context.
    """
    facts = read_model(Path(str(ctx.value("MODEL_DIR"))))
    if facts is None:
        return []
    fit = fit_model(
        facts,
        ctx.value("SGLANG_TOOL_CALL_PARSER"),
        ctx.value("SGLANG_REASONING_PARSER"),
        ctx.value("RENDERER_FAMILY"),
    )
    results = [failed(CHECK_NAMES[p.setting], p.message, p.fix) for p in fit.problems]
    results += [
        warned(
            "model.parsers",
            note,
            "set SGLANG_TOOL_CALL_PARSER (and SGLANG_REASONING_PARSER) to the model's formats, or "
            "none if the agent uses no tools",
        )
        for note in fit.notes
    ]
    if not results:
        results.append(passed("model.parsers", fit.describe()))
    return results
