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
