"""Test stand-in of the slime package (see tests/python/slime_standin/README.md)."""
