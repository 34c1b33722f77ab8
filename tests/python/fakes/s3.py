"""A real local S3 server for tests: moto's ``ThreadedMotoServer`` on 127.0.0.1:<free port>.

boto3 reaches it unchanged through ``AWS_ENDPOINT_URL_S3`` (the service-specific
endpoint variable; never the global ``AWS_ENDPOINT_URL``, which would redirect every
service). :func:`s3_env` sets that variable, dummy credentials and the region, so the
production code path (``boto3.client("s3")``, list/get/put over HTTP) is exercised as is.

Usage in a conftest::

    from fakes.s3 import LocalS3

    @pytest.fixture(scope="session")
    def local_s3():
        with LocalS3() as server:
            yield server

    @pytest.fixture
    def s3_bucket(local_s3, monkeypatch):
        for key, value in local_s3.env().items():
            monkeypatch.setenv(key, value)
        return local_s3.create_bucket()
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

from fakes.ports import free_port

REGION = "us-west-2"


class LocalS3:
    """moto in server mode on loopback.

    :param region: the region used for clients and bucket creation.
    :param process: run moto as a separate process (``python -m moto.server``) instead of a
        thread of this process; benchmarks use it so the server does not compete with the
        code under test for the GIL (real S3 is remote).
    """

    def __init__(self, region: str = REGION, process: bool = False) -> None:
        self.region = region
        self.process = process
        self.url = ""
        self._server: Any = None

    def start(self) -> str:
        """Start the server; returns its url ``http://127.0.0.1:<port>``."""
        if self.process:
            return self._start_process()
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        return self.url

    def _start_process(self, timeout: float = 30.0) -> str:
        port = free_port()
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        self._server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1).close()
                return self.url
            except OSError:
                if self._server.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not start on {self.url}")

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self._server is None:
            return
        if isinstance(self._server, subprocess.Popen):
            self._server.terminate()
            self._server.wait(timeout=10)
        else:
            self._server.stop()
        self._server = None

    def env(self) -> dict[str, str]:
        """Environment that points boto3's S3 clients at this server, with dummy credentials."""
        return {
            "AWS_ENDPOINT_URL_S3": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }

    def client(self) -> Any:
        """A boto3 S3 client for this server (independent of the process environment)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh random name by default) and return its name."""
        bucket = name or f"test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": self.region}
        )
        return bucket

    def __enter__(self) -> LocalS3:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: how long a held GET waits for the others of its gathering before it goes on alone
GATHER_CEILING_S = 30.0


class S3Proxy:
    """A forwarding proxy in front of :class:`LocalS3` that plays S3's latency and faults.

    Every request goes to the server unchanged; a GET of an object (a path below the bucket,
    not a LIST of the bucket) waits ``get_delay`` seconds first, and ``faults[key]`` (a list of
    HTTP statuses) answers that key's next GETs with those statuses and an S3 error body
    (``503`` SlowDown, ``403`` AccessDenied, ...) before it is served. ``gets`` counts object
    GETs by key. With ``gather_gets`` N, each object GET is held until N are in flight at once
    (or :data:`GATHER_CEILING_S` passed: only a client that never sends N at once waits that
    long), and ``most_in_flight`` says how many were: concurrency shown by events, not timing.
    Point boto3 at :attr:`url` (``AWS_ENDPOINT_URL_S3``).
    """

    CODES = {403: "AccessDenied", 404: "NoSuchKey", 500: "InternalError", 503: "SlowDown"}

    def __init__(self, target: str, get_delay: float = 0.0) -> None:
        from aiohttp import web

        from fakes.http import ThreadedAiohttpServer

        self.target = target
        self.get_delay = get_delay
        self.faults: dict[str, list[int]] = {}
        self.gets: dict[str, int] = {}
        self.gather_gets = 0
        self.most_in_flight = 0
        self._in_flight = 0
        self._gathered: Any = None  # an asyncio.Event of the proxy's loop, made there
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._server = ThreadedAiohttpServer(app, name="s3-proxy")
        self.url = ""

    def __enter__(self) -> S3Proxy:
        self.url = self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    async def _gather(self) -> None:
        import asyncio

        if not self.gather_gets:
            return
        if self._gathered is None:
            self._gathered = asyncio.Event()
        if self._in_flight >= self.gather_gets:
            self._gathered.set()
        try:
            await asyncio.wait_for(self._gathered.wait(), GATHER_CEILING_S)
        except TimeoutError:
            pass  # the client never had that many GETs out at once: most_in_flight says so

    async def _forward(self, request: Any) -> Any:
        import asyncio

        import aiohttp
        from aiohttp import web

        body = await request.read()
        parts = request.path.strip("/").split("/", 1)
        if request.method == "GET" and len(parts) == 2:  # a LIST is GET /bucket?list-type=2
            key = parts[1]
            self.gets[key] = self.gets.get(key, 0) + 1
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
            try:
                await self._gather()
                await asyncio.sleep(self.get_delay)
            finally:
                self._in_flight -= 1
            pending = self.faults.get(key)
            if pending:
                status = pending.pop(0)
                code = self.CODES.get(status, "Error")
                xml = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>fault</Message></Error>"
                return web.Response(status=status, body=xml.encode(), content_type="application/xml")
        hop = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in hop}
        async with aiohttp.ClientSession(auto_decompress=False) as http:
            url = self.target + request.path_qs
            async with http.request(request.method, url, headers=headers, data=body) as reply:
                data = await reply.read()
                out = {k: v for k, v in reply.headers.items() if k.lower() not in hop}
                return web.Response(status=reply.status, body=data, headers=out)
