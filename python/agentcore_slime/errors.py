"""The toolkit's one error hierarchy (standard library only).

:class:`ConfigError` is bad input anywhere: an env file or command line (``bin/train`` exits
2 with ``bin/train: <what> (<how>)``), a toolkit.yaml value or a slime flag the rollout
cannot honour (raised at the rollout's first call, before any session starts), or a
gateway setting. It is a :class:`ValueError`, so callers that catch ``ValueError`` keep
working.
"""

from __future__ import annotations


class ToolkitError(Exception):
    """Base of every error the toolkit raises on purpose."""


class ConfigError(ToolkitError, ValueError):
    """A bad setting: what is wrong and how to fix it.

    :param what: what is wrong.
    :param how: how to fix it (empty when ``what`` already says it).
    """

    def __init__(self, what: str, how: str = "") -> None:
        super().__init__(f"{what} ({how})" if how else what)
        self.what = what
        self.how = how


class ConfigErrors(ConfigError):
    """Several problems found in one pass, reported together.

    ``str()`` is one ``<what> (<how>)`` line per problem; ``what``/``how`` are the first's.

    :param errors: the problems, in the order they were found (at least one).
    :param title: an optional first line (e.g. which file the problems are in).
    """

    def __init__(self, errors: list[ConfigError], title: str = "") -> None:
        super().__init__(errors[0].what, errors[0].how)
        self.errors = errors
        lines = ([title] if title else []) + [("  " if title else "") + str(error) for error in errors]
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


def raise_all(errors: list[ConfigError], title: str = "") -> None:
    """Raise nothing, the one problem, or all of them together.

    :param errors: the problems collected so far.
    :param title: a first line naming where the problems are (used only with a title).
    """
    if len(errors) == 1 and not title:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors, title)
