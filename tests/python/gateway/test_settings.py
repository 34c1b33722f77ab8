"""The gateway's settings come from the one schema, and its name tables match the installed
``renderers`` library (the real one: tests/requirements.txt pins it)."""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields

import pytest
import renderers
from agentcore_slime.gateway import GatewayConfig
from agentcore_slime.settings.schema import (
    NONE,
    REASONING_PARSERS,
    RENDERER_FAMILIES,
    TOOL_CALL_PARSERS,
    gateway_keys,
    parse_text,
)
from renderers.parsers import REASONING_PARSERS as RENDERERS_REASONING
from renderers.parsers import TOOL_PARSERS as RENDERERS_TOOLS


def _renderers_family_names() -> set[str]:
    """Every ``name`` of the ``renderers.RendererConfig`` union (``custom`` needs a loader path)."""
    union = typing.get_args(renderers.RendererConfig)[0]
    return {member.model_fields["name"].default for member in typing.get_args(union)} - {"custom"}


def test_renderer_families_are_the_installed_librarys() -> None:
    """bin/train's choices for RENDERER_FAMILY are exactly what this renderers accepts."""
    assert set(RENDERER_FAMILIES) == _renderers_family_names()
    for family in RENDERER_FAMILIES:
        if family != "auto":
            assert renderers.config_from_name(family) is not None


def test_parser_tables_map_onto_installed_parsers() -> None:
    assert set(TOOL_CALL_PARSERS.values()) - {None} <= set(RENDERERS_TOOLS)  # None: the gateway parses
    assert set(REASONING_PARSERS.values()) <= set(RENDERERS_REASONING)


def test_every_gateway_setting_names_a_field_whose_default_is_the_declared_one() -> None:
    by_name = {f.name: f for f in fields(GatewayConfig)}
    for key in gateway_keys():
        field = by_name[key.gateway]
        declared = parse_text(key, "")
        declared = None if declared == NONE else declared
        if key.required:
            assert field.default is MISSING
        else:
            assert field.default == declared, key.name


CHECKED = [key for key in gateway_keys() if key.choices or key.kind.name in ("INT", "FLOAT", "BOOL")]


@pytest.mark.parametrize("key", CHECKED, ids=lambda k: k.name)
def test_from_env_refuses_a_bad_value_with_the_schemas_message(key: typing.Any) -> None:
    bad = {"INT": "x", "FLOAT": "x", "BOOL": "yes"}.get(key.kind.name, "no-such-name")
    with pytest.raises(ValueError, match=f"{key.name}="):
        GatewayConfig.from_env({"MODEL_DIR": "/m", key.name: bad})


def test_from_env_none_turns_a_parser_off() -> None:
    config = GatewayConfig.from_env({"MODEL_DIR": "/m", "SGLANG_TOOL_CALL_PARSER": "none"})
    assert config.tool_call_parser is None


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("port", 70000, "GATEWAY_PORT must be an integer >= 0 and <= 65535"),
        ("log_level", "loud", "GATEWAY_LOG_LEVEL must be one of"),
        ("max_calls_per_episode", 0, "MAX_CALLS_PER_EPISODE must be an integer >= 1"),
        ("max_tokens_per_episode", True, "a bool is not an integer"),
    ],
)
def test_the_constructor_checks_settings_with_the_schema(field: str, value: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        GatewayConfig("/m", **{field: value})
