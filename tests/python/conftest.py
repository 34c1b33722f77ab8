"""Root pytest configuration shared by every test directory.

Sub-directories (shim/, gateway/, launcher/, e2e/) keep their own fixtures in their
own conftest.py. Nothing here may reach the internet or a model hub.
"""

from __future__ import annotations

import os

# Never let transformers / huggingface_hub try the network: tests build what they need.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
