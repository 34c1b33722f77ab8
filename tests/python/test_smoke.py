"""The package imports without slime or a GPU."""

from __future__ import annotations


def test_package_imports_without_slime() -> None:
    import agentcore_slime

    assert agentcore_slime.__doc__
