"""Root pytest configuration shared by every test directory.

The test folders mirror the package's rooms (docs/layout.md; tests/python/test_layout.py).
Fixtures that several rooms use live in fakes/ and are registered here; a fixture of one folder
stays in its own conftest.py. Nothing here may reach the internet or a model hub.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from other_user import OtherUser
from other_user import other_user as make_other_user

#: the rollout stand-ins (local S3, stand-in agents and gateway, the rollout's state holder), the
#: repository's paths, and bin/doctor's check context (doctor/ and preflight/ tests)
pytest_plugins = ["fakes.rollout_fixtures", "fakes.repo_fixtures", "fakes.doctor_fixtures"]

# Never let transformers / huggingface_hub try the network: tests build what they need.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture
def other_user() -> Iterator[OtherUser]:
    """A second local user (a real uid, made for the test and removed after it): see other_user.py."""
    with make_other_user() as user:
        yield user


@pytest.fixture(autouse=True)
def private_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test's own TOOLKIT_RUNTIME_DIR (templates/lib/lock.sh): the scripts a test runs take
    their kernel locks there, not in the user's /tmp/agentcore-slime-<uid>, so tests running at
    the same time (another checkout's, or a real run of this user) never hold each other's locks.
    Short (Ray puts its sockets under the default RAY_TEMP_DIR inside it) and 0700 (mkdtemp)."""
    path = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("TOOLKIT_RUNTIME_DIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)
