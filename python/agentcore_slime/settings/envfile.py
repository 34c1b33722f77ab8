"""Read an env file as data with python-dotenv: no ``source``, no ``eval``.

python-dotenv parses the syntax (comments, quotes, escapes, ``export``); ``${VAR}`` and
``${VAR:-default}`` references are resolved against the keys written *earlier in the same
file* only, never against the process environment, so a config renders the same everywhere
and cannot pull a secret out of the shell. A single-quoted value is literal, as in the shell:
no reference is resolved in it, which is how ``runs/<EXP_ID>/env`` writes every value, so a
literal ``${...}`` survives the round trip. The file is read without newline translation: a
CR inside a quoted value stays a CR.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from dotenv.parser import Binding, parse_stream
from dotenv.variables import Variable, parse_variables

from .errors import ConfigError, raise_all

logger = logging.getLogger(__name__)

#: the start of a binding whose value is single-quoted (python-dotenv's key and `=` syntax)
_SINGLE_QUOTED = re.compile(r"\s*(?:export[^\S\r\n]+)?(?:'[^']+'|[^=#\s]+)[^\S\r\n]*=[^\S\r\n]*'")


@dataclass(frozen=True)
class EnvEntry:
    """One key of an env file.

    :param value: the value after interpolation (``None`` when the line has no ``=``).
    :param line: 1-based line number in the file, for error messages.
    :param broken: the line has a problem that was already reported (validation skips it).
    """

    value: str | None
    line: int
    broken: bool = False


def read_env_file(path: Path, problems: list[ConfigError] | None = None) -> dict[str, EnvEntry]:
    """Parse ``path`` into ordered entries, reporting malformed lines and repeated keys.

    A UTF-8 byte-order mark (some Windows editors write one) is ignored.

    :param path: the env file.
    :param problems: where to add every problem found; when ``None`` they are raised here.
    :raises ConfigError: the file cannot be read; or (only when ``problems`` is ``None``) a
        line does not parse, a key repeats, or a ``${VAR}`` reference names no earlier key.
    """
    try:
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not part of the first key
        with path.open(encoding="utf-8-sig", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read env file {path}: {exc}", "pass a readable UTF-8 dotenv file") from exc
    found: list[ConfigError] = []
    bindings = list(parse_stream(io.StringIO(text)))
    _refuse_if_not_an_env_file(path, bindings)
    _refuse_an_unclosed_quote(path, bindings)
    entries: dict[str, EnvEntry] = {}
    for binding in bindings:
        line = binding.original.line
        if binding.error:
            snippet = (binding.original.string.strip().splitlines() or [""])[0]
            opened = _unclosed_quote(snippet)
            if opened is not None:  # its key is known: nothing else says "required" or "not set"
                key, quote, rest = opened
                entries.setdefault(key, EnvEntry(None, line, broken=True))
                found.append(
                    ConfigError(
                        f"{path}:{line}: the {quote} opened in {snippet!r} is never closed",
                        f"close it: {key}={quote}{rest.strip()}{quote}",
                    )
                )
                continue
            found.append(
                ConfigError(
                    f"{path}:{line}: cannot parse {snippet!r}",
                    "write KEY=VALUE, quote values that contain spaces or #",
                )
            )
            continue
        if binding.key is None:
            continue  # blank line or comment
        if binding.key in entries:
            found.append(
                ConfigError(
                    f"{path}:{line}: {binding.key} is set twice (first on line {entries[binding.key].line})",
                    "keep one of the two lines",
                )
            )
            continue
        value = binding.value
        try:
            if not _SINGLE_QUOTED.match(binding.original.string):
                value = _interpolate(path, line, binding.key, value, entries)
            entries[binding.key] = EnvEntry(value, line)
        except _RefersToBroken:  # the key it refers to was reported on its own line
            entries[binding.key] = EnvEntry(None, line, broken=True)
        except ConfigError as exc:
            found.append(exc)
            entries[binding.key] = EnvEntry(None, line, broken=True)
    found = _cap_parse_errors(path, found)
    if problems is None:
        raise_all(found)
    else:
        problems.extend(found)
    return entries


#: more unparsable lines than this are listed as a count after the first ones
MAX_PARSE_ERRORS_SHOWN = 10


def _refuse_if_not_an_env_file(path: Path, bindings: list[Binding]) -> None:
    """One clear error for a file that is not an env file at all (a README, a YAML config:
    most of its lines do not parse), instead of one line per line and a list of missing keys.

    :raises ConfigError: at least 3 lines do not parse, and more than parse.
    """
    unparsable = [b for b in bindings if b.error]
    parsed = [b for b in bindings if not b.error and b.key is not None]
    if len(unparsable) < 3 or len(unparsable) <= len(parsed):
        return
    first = unparsable[0]
    snippet = (first.original.string.strip().splitlines() or [""])[0][:60]
    raise ConfigError(
        f"{path} is not an env file: {len(unparsable)} of its {len(unparsable) + len(parsed)} "
        f"lines are not KEY=VALUE (the first, line {first.original.line}: {snippet!r})",
        "pass a dotenv file of KEY=VALUE lines, such as examples/gsm8k.env",
    )


_OPENED_QUOTE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(['\"])(.*)$")


class _RefersToBroken(Exception):
    """A value refers to a key whose own line was reported: nothing more to say about it."""


def _unclosed_quote(line: str) -> tuple[str, str, str] | None:
    """``(key, quote, rest)`` when ``line`` is ``KEY=`` then a quote never closed on it."""
    opened = _OPENED_QUOTE.match(line)
    if opened is None or opened.group(2) in opened.group(3).replace("\\" + opened.group(2), ""):
        return None
    return opened.group(1), opened.group(2), opened.group(3)


def _refuse_an_unclosed_quote(path: Path, bindings: list[Binding]) -> None:
    """A value whose quote is never closed on its line and that swallowed the lines after it
    (a later quote closed it): report that line alone (the keys it swallowed would otherwise be
    reported missing, and references to them wrong).

    :raises ConfigError: such a line.
    """
    for binding in bindings:
        lines = binding.original.string.strip().splitlines() or [""]
        opened = _unclosed_quote(lines[0]) if binding.error and len(lines) > 1 else None
        if opened is not None:
            key, quote, value = opened
            raise ConfigError(
                f"{path}:{binding.original.line}: the {quote} opened in {lines[0].strip()!r} is never "
                "closed (the lines after it were read as part of this value)",
                f"close it: {key}={quote}{value.strip()}{quote}",
            )


def _cap_parse_errors(path: Path, found: list[ConfigError]) -> list[ConfigError]:
    """At most :data:`MAX_PARSE_ERRORS_SHOWN` "cannot parse" lines, then how many more."""
    parse_errors = [error for error in found if ": cannot parse " in error.what]
    if len(parse_errors) <= MAX_PARSE_ERRORS_SHOWN:
        return found
    hidden = parse_errors[MAX_PARSE_ERRORS_SHOWN:]
    kept = [error for error in found if error not in hidden]
    kept.append(ConfigError(f"{path}: {len(hidden)} more lines cannot be parsed", "write KEY=VALUE lines"))
    return kept


def _interpolate(
    path: Path, line: int, key: str, value: str | None, earlier: dict[str, EnvEntry]
) -> str | None:
    """Resolve ``${NAME}`` / ``${NAME:-default}`` in ``value`` against earlier keys only."""
    if value is None:
        return None
    known = {name: entry.value for name, entry in earlier.items()}
    for atom in parse_variables(value):
        if isinstance(atom, Variable) and atom.name in earlier and earlier[atom.name].broken:
            raise _RefersToBroken(atom.name)
        if isinstance(atom, Variable) and atom.name not in known and atom.default is None:
            raise ConfigError(
                f"{path}:{line}: {key} refers to ${{{atom.name}}}, "
                "which is not a key set earlier in the file",
                "only earlier keys can be referenced; write the value out or define the key above",
            )
    return "".join(atom.resolve(known) for atom in parse_variables(value))
