"""The one error type of the launcher: bad input, reported as ``bin/train: <what> (<how>)``."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad input (env file, --set, command line): exit status 2, nothing started.

    :param what: what is wrong.
    :param how: how to fix it.
    """

    def __init__(self, what: str, how: str) -> None:
        super().__init__(f"{what} ({how})")
        self.what = what
        self.how = how


class ConfigErrors(ConfigError):
    """Several problems found in one pass over the env file, reported together.

    ``str()`` is one ``<what> (<how>)`` line per problem; ``what``/``how`` are the first's.

    :param errors: the problems, in the order they were found (at least two).
    """

    def __init__(self, errors: list[ConfigError]) -> None:
        super().__init__(errors[0].what, errors[0].how)
        self.errors = errors
        self.args = ("\n".join(str(error) for error in errors),)

    def __str__(self) -> str:
        return str(self.args[0])


def raise_all(errors: list[ConfigError]) -> None:
    """Raise nothing, the one problem, or all of them together.

    :param errors: the problems collected so far.
    """
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)
