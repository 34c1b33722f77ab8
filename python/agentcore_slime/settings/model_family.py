"""Which tool-call parser, reasoning parser and renderer family fit a model directory.

Read from MODEL_DIR's files only (standard library: the launchers run on a python without
transformers): config.json (``model_type`` and ``architectures``, its ``text_config`` too), the
tokenizer's added tokens (tokenizer_config.json ``added_tokens_decoder`` and
``additional_special_tokens``, tokenizer.json ``added_tokens``) and its chat template. One
implementation for bin/train and bin/doctor (``preflight/model.py``'s ``model.parsers`` checks)
and the gateway (``auto`` resolved at start, gateway/family.py), so all three name the same
parsers for the same model.

The table :data:`FAMILIES` lists, per model family slime has a model script for, the SGLang
parser names that read what the model writes (the first is chosen when the env file leaves the
setting unset, ``auto``) and the renderers families that render its template.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import AUTO, NONE, REASONING_PARSERS, TOOL_CALL_PARSERS

#: the renderers family meaning "the model's own chat template": it fits every model
CHAT_TEMPLATE = "default"
TOOL_SETTING, REASONING_SETTING = "SGLANG_TOOL_CALL_PARSER", "SGLANG_REASONING_PARSER"
#: tokenizer.json files larger than this are not read for their added tokens (a safety bound;
#: the largest published ones are ~30 MB)
MAX_TOKENIZER_JSON = 96 * 1024**2


@dataclass(frozen=True)
class ModelFacts:
    """What a model directory says about its family.

    :param model_types: config.json ``model_type`` (and its ``text_config``'s).
    :param architectures: config.json ``architectures``.
    :param tokens: the tokenizer's added and special tokens.
    :param template: the chat template's text (every named template joined).
    :param names: config.json ``_name_or_path`` and the directory's name.
    """

    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    tokens: frozenset[str] = frozenset()
    template: str = ""
    names: tuple[str, ...] = ()

    def named(self, *parts: str) -> bool:
        """Whether a model name holds one of ``parts`` (case-insensitive)."""
        return any(part.lower() in name.lower() for name in self.names for part in parts)


@dataclass(frozen=True)
class Family:
    """A model family and what serves it.

    :param name: the family as people call it.
    :param tool_call_parsers: SGLang ``--tool-call-parser`` names that read its calls; the
        first is chosen when unset. Empty: no SGLang parser reads its calls.
    :param reasoning_parsers: SGLang ``--reasoning-parser`` names that split its reasoning; the
        first is chosen when unset. Empty: the model does not reason in its text.
    :param renderer_families: renderers families that render its template (``default``, the
        chat template itself, always fits). Empty: only the chat template.
    :param matches: whether a model directory is of this family, and the evidence.
    :param why_not: why the gateway cannot read its format yet (said with the refusal).
    """

    name: str
    tool_call_parsers: tuple[str, ...]
    reasoning_parsers: tuple[str, ...]
    renderer_families: tuple[str, ...]
    matches: Callable[[ModelFacts], str | None] = field(compare=False, repr=False)
    why_not: str = ""


def _types(*names: str) -> Callable[[ModelFacts], str | None]:
    def match(facts: ModelFacts) -> str | None:
        found = next((t for t in facts.model_types if t in names), None)
        return f"config.json model_type {found!r}" if found else None

    return match


def _token(*tokens: str) -> Callable[[ModelFacts], str | None]:
    def match(facts: ModelFacts) -> str | None:
        found = next((t for t in tokens if t in facts.tokens), None)
        return f"the tokenizer's {found} token" if found else None

    return match


def _either(*tests: Callable[[ModelFacts], str | None]) -> Callable[[ModelFacts], str | None]:
    def match(facts: ModelFacts) -> str | None:
        return next((why for why in (test(facts) for test in tests) if why), None)

    return match


def _both(
    first: Callable[[ModelFacts], str | None], second: Callable[[ModelFacts], str | None]
) -> Callable[[ModelFacts], str | None]:
    def match(facts: ModelFacts) -> str | None:
        a, b = first(facts), second(facts)
        return f"{a} and {b}" if a and b else None

    return match


def _template(*snippets: str) -> Callable[[ModelFacts], str | None]:
    def match(facts: ModelFacts) -> str | None:
        found = next((s for s in snippets if s in facts.template), None)
        return f"its chat template writes {found!r}" if found else None

    return match


def _named(*parts: str) -> Callable[[ModelFacts], str | None]:
    def match(facts: ModelFacts) -> str | None:
        name = next((n for n in facts.names for p in parts if p.lower() in n.lower()), None)
        return f"the model name {name!r}" if name else None

    return match


_DEEPSEEK_CALLS = "<｜tool▁calls▁begin｜>"
_DEEPSEEK_TOKEN = _token(_DEEPSEEK_CALLS)
_DEEPSEEK_TYPE = _types("deepseek_v3")
_DEEPSEEK = _either(_DEEPSEEK_TYPE, _DEEPSEEK_TOKEN)
#: DeepSeek-V3 and R1 templates write a call as ``tool['type'] + '<｜tool▁sep｜>' + name``, V3.1's
#: as ``name + '<｜tool▁sep｜>'``; V3.1's has a ``thinking`` switch and an empty ``</think>``
_DEEPSEEK_V3_TEMPLATE = _template("tool['type'] + '<｜tool▁sep｜>'", "function<｜tool▁sep｜>")
_DEEPSEEK_V31 = _either(_named("DeepSeek-V3.1"), _both(_template("thinking"), _template("</think>")))
_GLM47 = _either(_types("glm_moe_dsa", "glm4_moe_lite"), _named("GLM-4.7", "GLM-5", "glm4.7", "glm5"))

#: every family, most specific first (the first that matches a model directory is its family)
FAMILIES: tuple[Family, ...] = (
    Family(
        "Kimi-K2",
        ("kimi_k2",),
        ("kimi_k2",),
        ("kimi-k2", "kimi-k2.5"),
        _either(_types("kimi_k2", "kimi_k25"), _token("<|tool_calls_section_begin|>")),
    ),
    Family(
        "MiniMax-M2",
        ("minimax-m2",),
        ("minimax", "minimax-append-think"),
        ("minimax-m2",),
        _either(_types("minimax_m2"), _token("<minimax:tool_call>")),
    ),
    Family(
        "gpt-oss (harmony)",
        ("gpt-oss",),
        ("gpt-oss",),
        ("gpt-oss",),
        _either(_types("gpt_oss"), _both(_token("<|channel|>"), _token("<|call|>"))),
        "the harmony format (analysis and commentary channels, calls ended by <|call|>) needs a "
        "parser of its own",
    ),
    Family(
        "Gemma 4",
        ("gemma4",),
        ("gemma4",),
        ("gemma4",),
        _types("gemma4", "gemma4_text"),
    ),
    Family(
        "Llama 3",
        ("llama3",),
        (),
        ("llama-3",),
        _both(_types("llama"), _token("<|python_tag|>", "<|start_header_id|>")),
    ),
    Family(
        "DeepSeek-R1",
        ("deepseekv3",),
        ("deepseek-r1",),
        ("deepseek-r1",),
        _both(_both(_DEEPSEEK, _DEEPSEEK_V3_TEMPLATE), _template("<think>")),
    ),
    Family("DeepSeek-V3", ("deepseekv3",), (), ("deepseek-v3",), _both(_DEEPSEEK, _DEEPSEEK_V3_TEMPLATE)),
    Family("DeepSeek-V3.1", ("deepseekv31",), ("deepseek-v3",), (), _both(_DEEPSEEK, _DEEPSEEK_V31)),
    Family("DeepSeek-V3", ("deepseekv3",), (), ("deepseek-v3",), _both(_DEEPSEEK_TYPE, _DEEPSEEK_TOKEN)),
    Family(
        "MiMo-V2 (XML calls)",
        ("mimo",),
        ("mimo",),
        (),
        _either(_types("mimo_v2_flash"), _both(_types("mimo"), _template("<function="))),
    ),
    # MiMo-7B (slime's mimo-7B-rl): Qwen2's tokenizer, calls as Hermes JSON in <tool_call>
    Family("MiMo-7B", ("hermes", "qwen25", "qwen"), ("qwen3",), (), _types("mimo")),
    Family("GLM-4.7 / GLM-5", ("glm47",), ("glm45",), ("glm-5", "glm-5.1", "glm-5.3"), _GLM47),
    Family("GLM-4.5 / 4.6", ("glm45", "glm", "glm47"), ("glm45",), ("glm-4.5",), _types("glm4_moe")),
    Family(
        "Qwen3.5",
        ("qwen3_coder",),
        ("qwen3", "qwen3-thinking"),
        ("qwen3.5", "qwen3.6", "qwen3.8"),
        _types("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"),
    ),
    Family(
        "Qwen3-Coder",
        ("qwen3_coder",),
        (),
        (),
        _both(_types("qwen3", "qwen3_moe"), _template("<function=")),
    ),
    Family(
        "Qwen3",
        ("qwen", "qwen25", "hermes"),
        ("qwen3", "qwen3-thinking"),
        ("qwen3",),
        _types("qwen3", "qwen3_moe", "qwen3_next"),
    ),
    Family("Qwen2.5", ("qwen", "qwen25", "hermes"), (), (), _types("qwen2")),
)


# --------------------------------------------------------------------------- reading a model
def _json_file(path: Path, limit: int | None = None) -> dict[str, Any]:
    try:
        if limit is not None and path.stat().st_size > limit:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _token_text(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return str(entry["content"])
    return None


def _tokens(root: Path, tokenizer_config: dict[str, Any]) -> frozenset[str]:
    found: list[Any] = []
    decoder = tokenizer_config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        found += decoder.values()
    for key in ("additional_special_tokens", "extra_special_tokens"):
        values = tokenizer_config.get(key)
        if isinstance(values, dict):
            values = list(values.values())
        found += values if isinstance(values, list) else []
    added = _json_file(root / "tokenizer.json", MAX_TOKENIZER_JSON).get("added_tokens")
    if isinstance(added, list):
        found += added
    return frozenset(t for t in map(_token_text, found) if t)


def _template_text(root: Path, tokenizer_config: dict[str, Any]) -> str:
    parts: list[str] = []
    template = tokenizer_config.get("chat_template")
    if isinstance(template, str):
        parts.append(template)
    elif isinstance(template, list):  # named templates: [{"name", "template"}]
        parts += [str(t.get("template", "")) for t in template if isinstance(t, dict)]
    for name in ("chat_template.jinja", "chat_template.json"):
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (OSError, ValueError):
            continue
        parts.append(text)
    return "\n".join(parts)


def read_model(model_dir: str | Path) -> ModelFacts | None:
    """The facts of a model directory; None when it has no config.json to read.

    :param model_dir: MODEL_DIR.
    """
    root = Path(model_dir)
    config = _json_file(root / "config.json")
    if not config:
        return None
    text = config.get("text_config")
    types = [config.get("model_type"), text.get("model_type") if isinstance(text, dict) else None]
    architectures = config.get("architectures")
    tokenizer_config = _json_file(root / "tokenizer_config.json")
    names = [config.get("_name_or_path"), tokenizer_config.get("name_or_path"), root.resolve().name]
    return ModelFacts(
        model_types=tuple(str(t) for t in types if isinstance(t, str) and t),
        architectures=tuple(str(a) for a in architectures) if isinstance(architectures, list) else (),
        tokens=_tokens(root, tokenizer_config),
        template=_template_text(root, tokenizer_config),
        names=tuple(str(n) for n in names if isinstance(n, str) and n),
    )


def identify(facts: ModelFacts) -> tuple[Family | None, str]:
    """The family of a model and the evidence; ``(None, what it is)`` when none fits."""
    for family in FAMILIES:
        why = family.matches(facts)
        if why:
            return family, why
    kind = ", ".join(repr(t) for t in facts.model_types) or "none"
    return None, f"config.json model_type {kind}"


# --------------------------------------------------------------------------- the fit
@dataclass(frozen=True)
class Problem:
    """A setting that does not fit the model: which, what is wrong, how to fix it.

    :param unreadable: the setting was ``auto`` and the model's format is one the gateway
        cannot read (a refusal, not a misfit the user typed).
    """

    setting: str
    message: str
    fix: str
    unreadable: bool = False


@dataclass
class Fit:
    """The parsers and renderer family for a model, chosen or checked.

    :param family: the model's family (None: no family of the table fits).
    :param evidence: why it is that family.
    :param tool_call_parser: the tool-call parser the gateway uses (None = off).
    :param reasoning_parser: the reasoning parser (None = off).
    :param chosen: the settings that were ``auto`` and what they resolved to, for messages.
    :param problems: settings that do not fit (bin/train refuses them).
    :param notes: what a user should know (no family fits: nothing was chosen).
    """

    family: Family | None
    evidence: str
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    chosen: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    renderer_splits: bool = False  # a renderers family (not the chat template) splits the reasoning

    def describe(self) -> str:
        """The family, its evidence and the parsers, in one line (bin/doctor, the rehearsal)."""
        name = self.family.name if self.family else "no known family"
        family = f"{name} ({self.evidence})"
        tool = self._shown(self.tool_call_parser, TOOL_SETTING)
        reasoning = self._shown(self.reasoning_parser, REASONING_SETTING)
        return f"{family}: tool-call parser {tool}, reasoning parser {reasoning}"

    def _shown(self, value: str | None, setting: str) -> str:
        if setting in self.chosen:
            return f"{value} (chosen from the model)"
        return value if value is not None else NONE


def _names(values: tuple[str, ...]) -> str:
    return " or ".join(values)


#: what each parser setting reads, for messages
_READS = {TOOL_SETTING: "tool calls", REASONING_SETTING: "reasoning"}


def _misfit(fit: Fit, setting: str, value: str, fitting: tuple[str, ...]) -> Problem:
    family = fit.family
    assert family is not None
    what = _READS[setting]
    if fitting:
        return Problem(
            setting,
            f"{setting}={value} does not fit MODEL_DIR: it is {family.name} ({fit.evidence}), whose "
            f"{what} SGLang reads with {_names(fitting)}",
            f"set {setting}={fitting[0]}, or leave it unset (chosen from the model)",
        )
    return Problem(
        setting,
        f"{setting}={value} does not fit MODEL_DIR: it is {family.name} ({fit.evidence}), which writes "
        f"no {what} in a form SGLang parses",
        f"set {setting}=none, or leave it unset (chosen from the model)",
    )


def _unreadable_fix(family: Family, setting: str) -> str:
    if setting == TOOL_SETTING and family.renderer_families:
        return (
            f"set {setting}=none: the {family.renderer_families[0]} renderer (RENDERER_FAMILY=auto) then "
            "reads the calls with its own parser, which no test compares with SGLang's"
        )
    return f"set {setting}=none to train without it (the agent then gets the model's raw text)"


def _choose(
    fit: Fit, setting: str, value: str | None, fitting: tuple[str, ...], known: dict[str, Any]
) -> str | None:
    """One parser setting against the family: ``auto`` picks, a name is checked, ``none`` is off."""
    family = fit.family
    if value is None or value in ("", NONE):
        return None
    if value != AUTO:
        if family is not None and value not in fitting:
            fit.problems.append(_misfit(fit, setting, value, fitting))
        return value
    if family is None or not fitting:
        return None
    if fitting[0] not in known and setting == REASONING_SETTING and fit.renderer_splits:
        return None  # the family's renderer splits its reasoning itself; the name is not used
    if fitting[0] not in known:
        fit.problems.append(
            Problem(
                setting,
                f"MODEL_DIR is {family.name} ({fit.evidence}), whose {_READS[setting]} SGLang reads with "
                f"{setting}={fitting[0]}, which the gateway cannot read yet"
                + (f": {family.why_not}" if family.why_not and setting == TOOL_SETTING else ""),
                _unreadable_fix(family, setting),
                unreadable=True,
            )
        )
        return None
    fit.chosen[setting] = fitting[0]
    return fitting[0]


def fit_model(
    facts: ModelFacts | None,
    tool_call_parser: str | None = AUTO,
    reasoning_parser: str | None = AUTO,
    renderer_family: str | None = AUTO,
) -> Fit:
    """Choose the ``auto`` settings from the model and check the others against it.

    :param facts: the model directory's facts (:func:`read_model`); None: nothing to check
        (``auto`` then turns a parser off).
    :param tool_call_parser: SGLANG_TOOL_CALL_PARSER (``auto``, a name, ``none``).
    :param reasoning_parser: SGLANG_REASONING_PARSER.
    :param renderer_family: RENDERER_FAMILY (``auto``, ``default`` and any family fit).
    """
    family, evidence = identify(facts) if facts is not None else (None, "no config.json")
    fit = Fit(family, evidence)
    tools = family.tool_call_parsers if family else ()
    reasoning = family.reasoning_parsers if family else ()
    fit.tool_call_parser = _choose(fit, TOOL_SETTING, tool_call_parser, tools, TOOL_CALL_PARSERS)
    fit.renderer_splits = bool(family and family.renderer_families) and renderer_family != CHAT_TEMPLATE
    fit.reasoning_parser = _choose(fit, REASONING_SETTING, reasoning_parser, reasoning, REASONING_PARSERS)
    renderers = family.renderer_families if family else ()
    if family is not None and renderer_family not in (None, AUTO, CHAT_TEMPLATE, *renderers):
        which = f"the {_names(renderers)} renderer renders" if renderers else "only its chat template renders"
        fit.problems.append(
            Problem(
                "RENDERER_FAMILY",
                f"RENDERER_FAMILY={renderer_family} does not fit MODEL_DIR: it is {family.name} "
                f"({evidence}), which {which}",
                "set RENDERER_FAMILY=auto (chosen from the model) or default (the model's own chat template)",
            )
        )
    if family is None and facts is not None and tool_call_parser == AUTO:
        fit.notes.append(
            f"no family of docs/gateway.md's table fits MODEL_DIR ({evidence}): nothing is chosen from "
            "the model, the parsers left unset are off"
        )
    return fit


def model_fit(
    model_dir: str | Path,
    tool_call_parser: str | None = AUTO,
    reasoning_parser: str | None = AUTO,
    renderer_family: str | None = AUTO,
) -> Fit:
    """:func:`fit_model` for a model directory (its files read here)."""
    return fit_model(read_model(model_dir), tool_call_parser, reasoning_parser, renderer_family)

