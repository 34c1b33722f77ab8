"""Test stand-in for the ``sglang`` package: only ``python -m sglang.launch_server`` (see there).

Put ``tests/python/fakes/sglang_shim`` and ``tests/python`` on PYTHONPATH to use it.
"""
