"""Run bin/train and the rendered scripts against the real Ray (CPU only, GPUs declared).

Every run gets its own short temp dir (Ray's unix sockets must fit in 107 bytes), free ports
for the head and a worker, its own HOME (so ``~/.ray/auth_token`` is the test's) and a fake
slime checkout whose train.py is :mod:`probe_train`. Output is read on a pipe or through a
pseudo-terminal (so that Ctrl-C is the terminal's SIGINT to the foreground process group).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fakes.ports import free_ports
from fakes.stack_node import write_node

REPO = Path(__file__).resolve().parents[3]
PROBE = Path(__file__).with_name("probe_train.py")
VENV_BIN = Path(sys.executable).parent
#: how long any wait for an event (an output line, an exit) may take before it counts as a hang:
#: never a bound on how fast a run is (a real Ray beside other CPU-bound work takes minutes where
#: it takes seconds alone); pytest's per-test timeout is the ceiling of a whole test
HANG_S = 420.0


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def live_processes(needle: str) -> list[str]:
    """Live processes (not zombies) whose command line contains ``needle``: 'PID cmdline'."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and _state(int(entry.name)) not in ("", "Z"):
            found.append(f"{entry.name} {cmdline[:160]}")
    return found


@dataclass
class Cluster:
    """One test's Ray settings, fake slime checkout and environment."""

    root: Path
    short: Path
    ports: dict[str, int]
    worker_agent_port: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def temp_dir(self) -> Path:
        return self.short / "ray"

    @property
    def worker_temp_dir(self) -> Path:
        return self.short / "wray"

    @property
    def marker(self) -> Path:
        return self.root / "probe.json"

    @property
    def token_file(self) -> Path:
        return Path(self.env["HOME"]) / ".ray" / "auth_token"

    def run_dir(self, exp_id: str = "realray") -> Path:
        return self.root / "runs" / exp_id

    def slot(self, temp_dir: Path) -> str:
        """The run lock's slot of a node's Ray (templates/lib/lock.sh lock_slot), its marker."""
        return "ray-" + hashlib.sha256(str(temp_dir).encode()).hexdigest()[:16]

    def leftovers(self) -> list[str]:
        """Live processes of this test's Ray nodes (both temp dirs) or its probe."""
        needles = [f"={self.temp_dir}/", f"={self.worker_temp_dir}/", str(self.marker)]
        needles.append(f"--port={self.ports['RAY_CLIENT_SERVER_PORT']}")
        return [proc for needle in needles for proc in live_processes(needle)]

    def write_env(self, name: str = "exp.env", *lines: str) -> Path:
        base = {
            "EXP_ID": "realray",
            "S3_BUCKET": "my-bucket",
            "AGENT_URL": "http://127.0.0.1:9",
            "MODEL_DIR": str(self.root / "model"),
            "DATA_PATH": str(self.root / "data.jsonl"),
            "MODEL_TYPE": "probe",
            "SLIME_DIR": str(self.root / "slime"),
            "MEGATRON_DIR": str(self.root / "Megatron-LM"),
            "NUM_GPUS": "1",
            "TP_SIZE": "1",
            "ROLLOUT_GPUS_PER_ENGINE": "1",
            "ROLLOUT_BATCH_SIZE": "1",
            "N_SAMPLES_PER_PROMPT": "1",
            "RAY_TEMP_DIR": str(self.temp_dir),
            "EXTRA_FLAGS": f"--probe-marker {self.marker}",
            **{key: str(port) for key, port in self.ports.items()},
        }
        for line in lines:
            key, _, value = line.partition("=")
            base[key] = value
        path = self.root / name
        path.write_text("".join(f"{key}='{value}'\n" for key, value in base.items()))
        return path


def make_cluster(root: Path) -> Cluster:
    """A fake slime install under ``root`` and free Ray ports; see the module docstring."""
    (root / "slime" / "scripts" / "models").mkdir(parents=True)
    shutil.copy(PROBE, root / "slime" / "train.py")
    # the pinned slime stack, as train.sh asks it (templates/lib/slime_helper.py): slime's
    # arguments module and an sglang 0.5.13 package (the site on the job's PYTHONPATH)
    _, site = write_node(root, "fa3c990")
    (root / "slime" / "scripts" / "models" / "probe.sh").write_text("MODEL_ARGS=(--num-layers 2)\n")
    (root / "Megatron-LM").mkdir()
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text('{"model_type": "qwen2"}\n')
    (root / "data.jsonl").write_text('{"prompt": "1+1?", "metadata": {"answer": "2"}}\n')
    home = root / "home"
    home.mkdir()
    ports = free_ports(5)
    names = ("RAY_PORT", "RAY_DASHBOARD_PORT", "RAY_CLIENT_SERVER_PORT", "RAY_DASHBOARD_AGENT_PORT")
    cluster = Cluster(
        root=root,
        short=Path(tempfile.mkdtemp(prefix="rr", dir="/tmp")),
        ports=dict(zip(names, ports[:4], strict=True)),
        worker_agent_port=ports[4],
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TOOLKIT_"))}
    env.update(
        PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        HOME=str(home),
        TOOLKIT_RUNS_DIR=str(root / "runs"),
        TOOLKIT_PYTHON=sys.executable,
        TOOLKIT_NODE_POLL="1",
        TOOLKIT_STALE_GRACE="1",
        # this test's private node-local dir (locks), short like the temp dirs
        TOOLKIT_RUNTIME_DIR=str(cluster.short / "rt"),
        RAY_USAGE_STATS_ENABLED="0",
    )
    env["PYTHONPATH"] = str(site)
    cluster.env = env
    return cluster


def kill_leftovers(cluster: Cluster) -> None:
    """Teardown safety net: SIGKILL whatever of this test's Ray is still alive."""
    for proc in cluster.leftovers():
        try:
            os.kill(int(proc.split()[0]), signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(cluster.short, ignore_errors=True)


class Run:
    """A child process whose output is collected in the background (pipe or pseudo-terminal)."""

    def __init__(self, argv: list[str], env: dict[str, str], tty: bool = False) -> None:
        self.output = ""
        self._lock = threading.Lock()
        self.master: int | None = None
        if tty:
            master, slave = os.openpty()
            self.master = master

            def take_terminal() -> None:  # runs in the child: a session whose terminal is the pty
                os.setsid()
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

            self.proc = subprocess.Popen(
                argv, env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_terminal
            )
            os.close(slave)
            reader = self._read_fd
        else:
            self.proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            reader = self._read_pipe
        self._thread = threading.Thread(target=reader, daemon=True)
        self._thread.start()

    def _append(self, data: bytes) -> None:
        with self._lock:
            self.output += data.decode(errors="replace")

    def _read_pipe(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self._append(line)
        except (ValueError, OSError):
            return  # the pipe was closed under the reader (the run was stopped): its output ends here
        self.proc.stdout.close()  # its output ended: closed even when a test never calls finish()

    def _read_fd(self) -> None:
        assert self.master is not None
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            self._append(data)

    def wait_for(self, text: str, timeout: float = HANG_S) -> None:
        """Block until ``text`` is in the output; fail (killing nothing) after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output:
                return
            if self.proc.poll() is not None:
                time.sleep(0.2)
                if text in self.output:
                    return
                raise AssertionError(f"exited {self.proc.returncode} before {text!r}:\n{self.output}")
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} within {timeout}s:\n{self.output}")

    def worker_command(self, timeout: float = HANG_S) -> list[str]:
        """The worker's command a head prints: the whole line after "on each worker run:", once
        it is there (the marker alone can arrive before the line: reading it then was an
        IndexError)."""
        self.wait_for("on each worker run:", timeout=timeout)
        deadline = time.monotonic() + HANG_S
        while True:
            lines = self.output.split("on each worker run:", 1)[1].split("\n")
            if len(lines) >= 3:  # the marker line's end, the command line, and its end
                return lines[1].split(": ", 1)[1].split()
            assert time.monotonic() < deadline, f"no worker command after the marker:\n{self.output}"
            time.sleep(0.1)

    def ctrl_c(self) -> None:
        """Type Ctrl-C on the terminal (the tty driver sends SIGINT to the foreground group)."""
        assert self.master is not None
        os.write(self.master, b"\x03")

    def finish(self, timeout: float = HANG_S) -> int:
        """The exit status; fails if the process is still running after ``timeout`` s."""
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"still running after {timeout}s:\n{self.output}") from None
        self._thread.join(5)
        if self.master is not None:
            os.close(self.master)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return status
