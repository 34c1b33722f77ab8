"""Which renderer serves the model: an explicit family name, or one inferred from the model
directory (config.json ``model_type``/``_name_or_path``, the tokenizer's name, the chat template).

Built on the ``renderers`` package (PrimeIntellect) and the model's own tokenizer loaded from
``MODEL_DIR``. Models no family fits (e.g. Qwen2.5-Instruct) use renderers' ``DefaultRenderer``
over the model's chat template with the tool/reasoning parsers mapped from SGLang's parser names.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcore_slime.errors import ConfigError
from agentcore_slime.settings.model_family import Fit, identify, model_fit, read_model
from agentcore_slime.settings.schema import REASONING_PARSERS, TOOL_CALL_PARSERS

logger = logging.getLogger(__name__)

# SGLang parser names -> renderers parser names (DefaultRenderer only) come from the settings
# schema: bin/train refuses any other name before anything starts. Which family a model is, and
# the parsers and renderer family that fit it, come from settings/model_family.py (bin/train and
# bin/doctor check the same table).
CHAT_TEMPLATE_FAMILY = "default"  # renderers' name for "the model's own chat template"


@dataclass
class RendererChoice:
    """Which renderer serves the model and why (logged once at start), and the parsers that
    read its completions (``auto`` resolved from the model: None = off)."""

    family: str
    reason: str
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    parsers: str = ""  # the model's family and the parsers, and why (Fit.describe)



def load_tokenizer(model_dir: str) -> Any:
    """Load the model's tokenizer from a local directory (or a cached Hub id), offline-safe."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def infer_family(model_dir: str, tokenizer: Any) -> RendererChoice:
    """Guess the renderers family of a model directory; ``default`` when none fits.

    Looks, in order, at the Hub ids the directory names (config.json ``_name_or_path``,
    the tokenizer's ``name_or_path``, the directory name against the Hub ids renderers
    maps), at config.json ``model_type``, and at the chat template.
    """
    from renderers.base import MODEL_RENDERER_MAP

    root = Path(model_dir)
    config = _read_json(root / "config.json")
    by_basename = {k.split("/")[-1].lower(): v for k, v in MODEL_RENDERER_MAP.items()}
    for name in (config.get("_name_or_path"), getattr(tokenizer, "name_or_path", None), root.name):
        if not name:
            continue
        family = MODEL_RENDERER_MAP.get(str(name)) or by_basename.get(Path(str(name)).name.lower())
        if family:
            return RendererChoice(family, f"model name {name!r}")
    facts = read_model(root)
    family, evidence = identify(facts) if facts is not None else (None, "")
    if family is not None:
        if family.renderer_families:
            return RendererChoice(family.renderer_families[0], f"{family.name} ({evidence})")
        return RendererChoice(CHAT_TEMPLATE_FAMILY, f"no renderers family renders {family.name} ({evidence})")
    template = str(getattr(tokenizer, "chat_template", "") or "")
    if "<|im_start|>" in template and "enable_thinking" in template and "<tool_response>" in template:
        return RendererChoice("qwen3", "a Qwen3-style chat template (enable_thinking, <tool_response>)")
    model_type = str(config.get("model_type") or "")
    why = f"model_type {model_type!r}" if model_type else "no model_type"
    return RendererChoice(CHAT_TEMPLATE_FAMILY, f"no renderers family fits ({why})")


def generation_stop_ids(model_dir: str) -> list[int]:
    """``eos_token_id`` of the model's generation_config.json (an int or a list), if any."""
    eos = _read_json(Path(model_dir) / "generation_config.json").get("eos_token_id")
    values = eos if isinstance(eos, list) else [eos]
    return [int(v) for v in values if isinstance(v, int)]


def _parser(
    name: str | None, table: dict[str, str | None] | dict[str, str], what: str, env: str
) -> str | None:
    if not name:
        return None
    if name in table:
        return table[name]  # None: no renderers parser (the gateway's own reads it)
    names = ", ".join(sorted(table))
    raise ConfigError(f"unknown {what} {name!r}", f"set {env} to one of: {names}, or unset it")


def build_renderer(
    tokenizer: Any,
    family: str,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> Any:
    """Create the renderer for ``family`` (``default`` = chat template + mapped parsers).

    :raises ValueError: for an unknown family or parser name, with the valid names.
    """
    from renderers import DefaultRendererConfig, config_from_name, create_renderer

    tool = _parser(tool_call_parser, TOOL_CALL_PARSERS, "tool call parser", "SGLANG_TOOL_CALL_PARSER")
    reasoning = _parser(reasoning_parser, REASONING_PARSERS, "reasoning parser", "SGLANG_REASONING_PARSER")
    if family == CHAT_TEMPLATE_FAMILY:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the model's tokenizer has no chat template (set RENDERER_FAMILY to a renderers family)"
            )
        return create_renderer(tokenizer, DefaultRendererConfig(tool_parser=tool, reasoning_parser=reasoning))
    try:
        config = config_from_name(family)
    except ValueError as err:
        raise ConfigError(f"unknown RENDERER_FAMILY {family!r}: {err}") from None
    return create_renderer(tokenizer, config)


def resolve_parsers(
    model_dir: str, family: str, tool_call_parser: str | None, reasoning_parser: str | None
) -> Fit:
    """The parsers for the model: ``auto`` chosen from it (settings/model_family.py, the table
    bin/train and bin/doctor check with); a name that does not fit it is logged, not refused
    (bin/train refused it already; a hand-built config may know better).

    :raises ConfigError: ``auto`` on a family whose format the gateway cannot read.
    """
    fit = model_fit(model_dir, tool_call_parser, reasoning_parser, family)
    unreadable = [p for p in fit.problems if p.unreadable]
    if unreadable:
        raise ConfigError(unreadable[0].message, unreadable[0].fix)
    for problem in fit.problems:  # misfits
        logger.warning("%s (%s)", problem.message, problem.fix)
    if fit.chosen:
        chosen = ", ".join(f"{k}={v}" for k, v in fit.chosen.items())
        assert fit.family is not None
        logger.info("parsers chosen from the model, %s (%s): %s", fit.family.name, fit.evidence, chosen)
    return fit


def _for_build(parsers: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parsers.items() if k != "parsers"}


def choose_renderer(
    model_dir: str,
    tokenizer: Any,
    family: str,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> tuple[Any, RendererChoice]:
    """The renderer for the gateway: explicit ``family``, or inferred when ``auto``; and the
    parsers, ``auto`` resolved from the model (:func:`resolve_parsers`), in the choice.

    An inferred family whose renderer cannot be built on this tokenizer falls back to the
    chat template (logged once); an explicit one raises.
    """
    fit = resolve_parsers(model_dir, family, tool_call_parser, reasoning_parser)
    parsers: dict[str, Any] = {
        "tool_call_parser": fit.tool_call_parser,
        "reasoning_parser": fit.reasoning_parser,
        "parsers": fit.describe(),
    }
    if family != "auto":
        renderer = build_renderer(tokenizer, family, **_for_build(parsers))
        return renderer, RendererChoice(family, "RENDERER_FAMILY", **parsers)
    choice = infer_family(model_dir, tokenizer)
    if choice.family != CHAT_TEMPLATE_FAMILY:
        try:
            return build_renderer(tokenizer, choice.family, **_for_build(parsers)), RendererChoice(
                choice.family, choice.reason, **parsers
            )
        except Exception as err:  # noqa: BLE001 - any failure to fit means: use the chat template
            choice = RendererChoice(CHAT_TEMPLATE_FAMILY, f"family {choice.family!r} did not fit ({err})")
    logger.warning("renderer: %s; falling back to the model's chat template", choice.reason)
    renderer = build_renderer(tokenizer, CHAT_TEMPLATE_FAMILY, **_for_build(parsers))
    return renderer, RendererChoice(CHAT_TEMPLATE_FAMILY, choice.reason, **parsers)
