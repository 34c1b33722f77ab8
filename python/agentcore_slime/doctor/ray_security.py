"""Ray security checks: token authentication, Ray's TLS files, and the engines' open HTTP.

``ray.tls`` checks the head's files the way Ray uses them (mutual TLS of its gRPC): each file
is there, readable and safe (no other user can write it, nobody else can read the key), and a
TLS handshake in memory, both sides presenting the certificate, succeeds: the key matches the
certificate, the certificate is valid now and signed by the CA, and it names the head's
address. The handshake is train.sh's own check (templates/lib/ray_helper.py, run the way
``check_ray_tls_files`` of templates/lib/ray.sh runs it); each worker's join.sh checks its own
certificate with it before it joins. docs/launcher.md, "Ray security: tokens and
TLS", says what TLS covers and what stays cleartext.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from ..addresses import own_address
from ..preflight.context import Context
from ..preflight.report import Result, failed, passed, warned

DOCS = "docs/launcher.md, 'Ray security: tokens and TLS'"
SHARED_DOCS = "docs/launcher.md, 'Shared nodes: engines, routers and sessions'"
TLS_FILES = ("RAY_TLS_CA_CERT", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY")


def unsafe_file_problem(name: str, path: Path, private: bool) -> str | None:
    """Why ``path`` cannot be trusted as ``name``, or ``None``.

    :param name: the setting (for messages).
    :param path: the file (links resolved).
    :param private: the file is a private key: nobody else may read it either.
    """
    try:
        real = path.resolve(strict=True)
        info = real.stat()
    except OSError as exc:
        return f"{name} {path} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode) or not os.access(real, os.R_OK):
        return f"{name} {path} is not a readable file"
    if info.st_uid not in (os.getuid(), 0):
        return f"{name} {path} belongs to uid {info.st_uid}, not to you or root: its content may be theirs"
    if info.st_mode & 0o022:
        return f"{name} {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    if private and info.st_mode & 0o077:
        return f"the private key {path} is readable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def handshake_problem(repo: Path, ca: Path, cert: Path, key: Path) -> str | None:
    """What train.sh's own check of the files says (templates/lib/ray_helper.py ``tls-check``:
    a mutual TLS handshake in memory, verified for this node's address as a head finds it, the
    route to 8.8.8.8): the problem, or ``None``.

    :param repo: the toolkit's checkout.
    :param ca: the CA certificate.
    :param cert: the node's certificate.
    :param key: its private key.
    """
    helper = repo / "templates" / "lib" / "ray_helper.py"
    argv = [sys.executable, "-I", str(helper), "tls-check", str(ca), str(cert), str(key), "8.8.8.8"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode == 0:
        return None
    problem = done.stderr.strip().removeprefix("RAY_TLS: ")
    return problem or f"{helper.name} exited with status {done.returncode}"


def check_ray_tls(ctx: Context) -> Result:
    """RAY_TLS: the head's files, or a warning when a multi-node run goes without it.

    :param ctx: the check context.
    """
    nodes = int(str(ctx.value("NUM_NODES") or 1))
    if not ctx.value("RAY_TLS"):
        if nodes > 1:
            return warned(
                "ray.tls",
                f"RAY_TLS is off on a {nodes}-node run: Ray's traffic between the nodes, its token "
                "included, crosses the network in cleartext",
                f"set RAY_TLS=true and the RAY_TLS_* files ({DOCS})",
            )
        return passed("ray.tls", "off (one node: Ray's traffic stays on this machine)")
    paths = {name: Path(str(ctx.value(name))) for name in TLS_FILES}
    for name, path in paths.items():
        problem = unsafe_file_problem(name, path, private=name == "RAY_TLS_SERVER_KEY")
        if problem:
            return failed("ray.tls", problem, f"fix {name} in the env file ({DOCS})")
    address = own_address()
    problem = handshake_problem(
        ctx.repo, paths["RAY_TLS_CA_CERT"], paths["RAY_TLS_SERVER_CERT"], paths["RAY_TLS_SERVER_KEY"]
    )
    if problem:
        return failed(
            "ray.tls",
            problem,
            f"issue this node a certificate that names {address}, signed by the CA ({DOCS})",
        )
    return passed(
        "ray.tls",
        f"on: {paths['RAY_TLS_SERVER_CERT']} is valid, signed by the CA and names this node ({address}); "
        "each worker's join.sh checks its own before it joins",
    )


def check_ray_auth_setting(ctx: Context) -> Result:
    """RAY_AUTH: token (required) or an explicit opt-out.

    :param ctx: the check context.
    """
    if ctx.value("RAY_AUTH") == "none":
        return warned(
            "ray.auth",
            "RAY_AUTH=none: Ray runs without token authentication; anyone who reaches this node's "
            "Ray ports can run code as you",
            "remove RAY_AUTH=none (and install the Ray that install_slime.sh pins)",
        )
    return passed("ray.auth", "token authentication required (train.sh refuses a Ray without it)")


def check_engines_exposure(ctx: Context) -> Result:
    """The SGLang engines and router slime starts take unauthenticated HTTP: say who can reach them.

    :param ctx: the check context.
    """
    nodes = int(str(ctx.value("NUM_NODES") or 1))
    if nodes > 1 or ctx.environ.get("SLIME_HOST_IP"):
        where = "on each node's network address (slime binds them to the Ray node's address)"
        who = "anyone on the nodes' network and every local user"
    else:
        where = "on 127.0.0.1 (train.sh binds one-node runs there)"
        who = "other local users of this node"
    return warned(
        "ray.engines",
        f"the SGLang engines and router take unauthenticated HTTP {where}: {who} can call "
        "/generate and the weight-update routes (slime's own calls send no API key, so the "
        "engines cannot require one)",
        f"run on nodes you do not share with untrusted users, or firewall the engine ports ({DOCS})",
    )


def check_router_workers(ctx: Context) -> Result:
    """slime's router (sglang-router 0.3.2) takes no inbound key: anyone who reaches it can add or
    remove workers. Say what stays open in training (bin/eval starts no router) and what the
    toolkit already closed (no session id ever reaches the router or a worker).

    :param ctx: the check context.
    """
    nodes = int(str(ctx.value("NUM_NODES") or 1))
    networked = nodes > 1 or ctx.environ.get("SLIME_HOST_IP")
    who = "anyone on the nodes' network" if networked else "another local user"
    return warned(
        "ray.router",
        f"{who} can register a worker with slime's router (POST /workers, no key in sglang-router "
        "0.3.2): it then receives some of this run's prompts and its answers are trained on, or "
        "remove a real engine (DELETE /workers); sessions reach the router only as a digest of "
        "their id, never the id itself",
        f"run on nodes you do not share with untrusted users, or firewall the router's port ({SHARED_DOCS})",
    )


def check_ray_security(ctx: Context) -> list[Result]:
    """Token authentication, Ray's TLS and the engines' and router's exposure.

    :param ctx: the check context.
    """
    return [
        check_ray_auth_setting(ctx),
        check_ray_tls(ctx),
        check_engines_exposure(ctx),
        check_router_workers(ctx),
    ]
