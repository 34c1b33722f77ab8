"""The parts a rehearsal stands in for when the real one is missing, each said out loud.

- S3: a store on loopback (moto's server, in this process) when no AWS credentials are found
  (``--s3 auto``) or when asked (``--s3 loopback``, what ``bin/eval --rehearse`` without an env
  file uses): the episode launcher, the result watcher and the agent reach it through
  ``AWS_ENDPOINT_URL_S3``, with credentials that name the rehearsal (never the user's).
- the agent: ``examples/math_agent/agent.py`` started on this machine (``--example-agent``) at
  the port of ``AGENT_URL``, its log in ``<out dir>/agent.log``, stopped when the rehearsal ends.
- the tokenizer: when ``MODEL_DIR`` has none, the toolkit's own small Qwen2.5-like one
  (:mod:`.toy_tokenizer`), built in ``<out dir>/stand-in-tokenizer`` in a second or two.

The policy is always the stand-in of :mod:`.standin`. moto is an optional extra
(``pip install -e "python/[rehearse]"``); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: what a model directory needs for the rehearsal (the tokenizer; weights are never read)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
#: the credentials a loopback store is reached with (moto checks none)
LOOPBACK_KEY = "rehearsal"
#: variables that would send the user's own identity to the loopback store
_USER_AWS = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_SHARED_CREDENTIALS_FILE")
AGENT_START_TIMEOUT = 120.0


def has_tokenizer(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds a tokenizer the gateway can load."""
    return any((Path(model_dir) / name).is_file() for name in TOKENIZER_FILES)


def aws_credentials_found() -> bool:
    """Whether boto3 finds AWS credentials here (environment, profile, instance role...)."""
    import boto3

    return boto3.session.Session().get_credentials() is not None


@dataclass
class StandIns:
    """What runs in place of the real parts, and one line per part saying so."""

    out_dir: Path
    lines: list[str] = field(default_factory=list)
    _s3: Any = None
    _agent: subprocess.Popen[bytes] | None = None
    _agent_log: Any = None

    def tokenizer(self, model_dir: str) -> str:
        """``model_dir`` when it has a tokenizer, else the toolkit's, built now."""
        if has_tokenizer(model_dir):
            return model_dir
        from .toy_tokenizer import build_toy_tokenizer

        built = build_toy_tokenizer(self.out_dir / "stand-in-tokenizer")
        self.lines.append(f"tokenizer: the toolkit's small Qwen2.5-like one ({built}): MODEL_DIR {model_dir} "
                          "has none")
        return str(built)

    def loopback_s3(self, bucket: str, region: str | None, why: str) -> str:
        """Start the loopback store with ``bucket`` in it; point this process (and the agent it
        starts) at it. Returns its URL."""
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        self._s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._s3.start()
        host, port = self._s3.get_host_and_port()
        url = f"http://{host}:{port}"
        for name in _USER_AWS:
            os.environ.pop(name, None)
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        os.environ.update({
            "AWS_ENDPOINT_URL_S3": url,
            "AWS_ACCESS_KEY_ID": LOOPBACK_KEY,
            "AWS_SECRET_ACCESS_KEY": LOOPBACK_KEY,
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
        })
        import boto3

        client = boto3.client("s3", region_name=region)
        where = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        client.create_bucket(Bucket=bucket, **where)
        self.lines.append(f"S3: a store on loopback ({url}, moto) with bucket {bucket}: {why}")
        return url

    def example_agent(self, repo: Path) -> str:
        """Start the example math agent on a free port it binds and names in its log; wait for its
        ``/ping``; returns its URL.

        :raises RuntimeError: it exited or did not answer in time (its log's tail in the message).
        """
        script = repo / "examples" / "math_agent" / "agent.py"
        log_path = self.out_dir / "agent.log"
        self._agent_log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._agent = subprocess.Popen(
            [sys.executable, str(script), "--host", "127.0.0.1", "--port", "0"],
            stdout=self._agent_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        deadline, agent_url = time.monotonic() + AGENT_START_TIMEOUT, ""
        while time.monotonic() < deadline:
            if self._agent.poll() is not None:
                break
            said = re.search(r"agent\.py: listening on port (\d+)", log_path.read_text(errors="replace"))
            agent_url = f"http://127.0.0.1:{said.group(1)}" if said else ""
            with contextlib.suppress(OSError, ValueError):
                urllib.request.urlopen(f"{agent_url.rstrip('/')}/ping", timeout=1).close()
                self.lines.append(f"agent: the example math agent (examples/math_agent) started here at "
                                  f"{agent_url}, its log {log_path}: no agent was given")
                return agent_url
            time.sleep(0.2)
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        self.stop()
        raise RuntimeError(f"the example agent did not start (log {log_path}: "
                           f"{' | '.join(tail) or 'empty'})")

    def stop(self) -> None:
        """Stop what was started here (the agent by its own process, the store)."""
        if self._agent is not None:
            self._agent.terminate()
            try:
                self._agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._agent.kill()
                self._agent.wait()
            self._agent = None
        if self._agent_log is not None:
            self._agent_log.close()
            self._agent_log = None
        if self._s3 is not None:
            self._s3.stop()
            self._s3 = None
