"""The toolkit's one error hierarchy (:mod:`agentcore_slime.errors`), as the settings' modules
and the launchers import it.

Bad input is reported as ``bin/train: <what> (<how>)`` with exit status 2.
"""

from __future__ import annotations

from agentcore_slime.errors import ConfigError, ConfigErrors, raise_all

__all__ = ["ConfigError", "ConfigErrors", "raise_all"]
