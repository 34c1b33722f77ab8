"""bin/train and the rendered train.sh / join.sh against the real Ray (``ray[default]`` pinned in
tests/requirements.txt), CPU only, GPUs declared with ``--num-gpus``.

The only stand-in is slime's train.py, replaced by :mod:`probe_train` (it connects to the cluster
from inside the job like train.py does, records the GPUs it sees, sleeps and exits as told).
Everything else is production code: token authentication, the one-run lock, scoped cleanup,
the signal traps, join.sh and the head's wait for the workers' GPUs.

Each test uses its own temp dir, ports and HOME; nothing touches another Ray on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import HANG_S, REPO, VENV_BIN, Cluster, Run, kill_leftovers, make_cluster

pytestmark = pytest.mark.timeout(600)

TRAIN = str(REPO / "bin" / "train")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if shutil.which("ray", path=str(VENV_BIN)) is None:
        pytest.fail("ray not installed in this venv (pip install -r tests/requirements.txt)")
    made = make_cluster(tmp_path)
    yield made
    kill_leftovers(made)


def _train(cluster: Cluster, *args: str, tty: bool = False) -> Run:
    # the doctor's blocking checks (model files, data, disk) are not what these tests are about
    return Run([TRAIN, "--skip-doctor", *args], cluster.env, tty=tty)


def _script(cluster: Cluster, name: str = "train.sh", *args: str, tty: bool = False) -> Run:
    return Run(["bash", str(cluster.run_dir() / name), *args], cluster.env, tty=tty)


def _script_pid(cluster: Cluster) -> int:
    """train.sh's PID, from the line that opens its last attempt in train.log."""
    log = (cluster.run_dir() / "train.log").read_text()
    return int(log.split("attempt started")[-1].split("(pid ")[1].split(")")[0])


def _wait_until_gone(pid: int, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive {timeout}s after SIGKILL"
        time.sleep(0.1)


def _assert_clean(cluster: Cluster, run: Run) -> None:
    assert cluster.leftovers() == [], f"processes left behind:\n{run.output}"


def _no_token_anywhere(cluster: Cluster) -> None:
    token = cluster.token_file.read_text()
    assert len(token) >= 32
    for path in cluster.run_dir().rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), f"token leaked into {path}"


def test_job_succeeds_and_three_reruns_succeed_with_the_token(cluster: Cluster) -> None:
    """bin/train, then `bash train.sh` three times (the second after a dead run's lock): each
    exits 0; the token file is created once (0600), reused, and appears nowhere under runs/."""
    env_file = cluster.write_env()
    first = _train(cluster, str(env_file))
    assert first.finish() == 0, first.output
    assert "Ray token authentication: created" in first.output
    seen = json.loads(cluster.marker.read_text())
    assert seen["gpus"] == 1.0 and seen["alive_nodes"] == 1
    assert stat.S_IMODE(cluster.token_file.stat().st_mode) == 0o600
    _assert_clean(cluster, first)
    token = cluster.token_file.read_text()
    lock = Path(cluster.env["TOOLKIT_RUNTIME_DIR"]) / f"{cluster.slot(cluster.temp_dir)}.lock"
    assert lock.read_text() == f"{_script_pid(cluster)} realray\n"
    inode = lock.stat().st_ino
    for attempt in range(3):
        cluster.marker.unlink()
        if attempt == 1:
            lock.write_text("999999999 crashed-exp\n")  # a run that died without cleaning up
        rerun = _script(cluster)
        assert rerun.finish() == 0, rerun.output
        assert "Ray token authentication: using" in rerun.output
        assert cluster.marker.exists()
        _assert_clean(cluster, rerun)
    assert cluster.token_file.read_text() == token
    assert lock.stat().st_ino == inode  # the lock file is never unlinked
    _no_token_anywhere(cluster)
    assert token not in first.output


def test_failing_job_fails_the_script(cluster: Cluster) -> None:
    """The probe exits 3: `ray job submit` reports the failure and the script exits non-zero."""
    env_file = cluster.write_env("exp.env", f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-exit 3")
    run = _train(cluster, str(env_file))
    status = run.finish()
    assert status != 0, run.output
    assert "failed" in run.output
    assert f"stopped Ray (exit status {status})" in run.output
    _assert_clean(cluster, run)


@pytest.mark.parametrize("moment", ["starting the Ray head", "submitting Ray job", "probe: running"])
def test_ctrl_c_at_a_terminal_stops_everything(cluster: Cluster, moment: str) -> None:
    """Ctrl-C through a pseudo-terminal before Ray is up, while the job is pending and while it
    runs: exit 130, no process of this run's Ray (or the probe) left behind."""
    env_file = cluster.write_env("exp.env", f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep 120")
    run = _train(cluster, str(env_file), tty=True)
    run.wait_for(moment)
    run.ctrl_c()
    assert run.finish() == 130, run.output
    assert "caught SIGINT" in run.output
    _assert_clean(cluster, run)


def test_second_ctrl_c_exits_at_once_and_leaves_no_raylet(cluster: Cluster) -> None:
    env_file = cluster.write_env("exp.env", f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep 120")
    run = _train(cluster, str(env_file), tty=True)
    run.wait_for("probe: running")
    run.ctrl_c()
    run.wait_for("caught SIGINT")
    run.ctrl_c()
    assert run.finish() == 130, run.output
    assert "second SIGINT: killing this run's Ray processes now" in run.output
    _assert_clean(cluster, run)


def test_concurrent_run_is_refused_then_term_stops_the_first(cluster: Cluster) -> None:
    """A second run on the same node's Ray is refused with the holder's PID and EXP_ID and does
    not disturb it; TERM then stops the first: exit 143, nothing left."""
    env_file = cluster.write_env("exp.env", f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep 120")
    first = _train(cluster, str(env_file))
    first.wait_for("probe: running")
    other = cluster.write_env("other.env", "EXP_ID=other-exp")
    second = _train(cluster, str(other))
    assert second.finish() == 1, second.output
    assert f"another run uses this node's Ray: PID {first.proc.pid} (EXP_ID realray)" in second.output
    assert first.proc.poll() is None, first.output
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish() == 143, first.output
    assert "caught SIGTERM" in first.output
    _assert_clean(cluster, first)


def test_port_held_by_another_process_is_named_with_its_key(cluster: Cluster) -> None:
    env_file = cluster.write_env()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", cluster.ports["RAY_DASHBOARD_PORT"]))
        holder.listen()
        run = _train(cluster, str(env_file))
        assert run.finish() == 1, run.output
    port = cluster.ports["RAY_DASHBOARD_PORT"]
    assert f"ports in use by another process (another user's Ray?): {port} (RAY_DASHBOARD_PORT)" in run.output
    assert "train.sh: starting the Ray head" not in run.output


def test_two_nodes_on_one_machine_and_a_worker_that_dies(cluster: Cluster) -> None:
    """The head waits for the worker started by the rendered join.sh (own temp dir and port),
    the job sees both nodes' GPUs, and the worker's death mid-run is reported with its address."""
    env_file = cluster.write_env(
        "exp.env",
        "NUM_NODES=2",
        "ROLLOUT_BATCH_SIZE=2",
        f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep 120",
    )
    head = _train(cluster, str(env_file))
    command = head.worker_command()
    assert command[:2] == ["bash", str(cluster.run_dir() / "join.sh")]
    worker_env = dict(
        cluster.env,
        TOOLKIT_RAY_TEMP_DIR=str(cluster.worker_temp_dir),
        TOOLKIT_RAY_AGENT_PORT=str(cluster.worker_agent_port),
    )
    worker = Run(command, worker_env)
    head.wait_for("probe: running")
    seen = json.loads(cluster.marker.read_text())
    assert seen["gpus"] == 2.0 and seen["alive_nodes"] == 2, seen
    assert "--actor-num-nodes 2" in " ".join(seen["argv"])
    assert "--rollout-num-gpus 2" in " ".join(seen["argv"])
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish() == 143, worker.output
    head.wait_for("error: worker node ")
    head.proc.send_signal(signal.SIGTERM)
    assert head.finish() == 143, head.output
    _assert_clean(cluster, head)


def test_join_timeout_names_who_joined_and_who_is_missing(cluster: Cluster) -> None:
    env_file = cluster.write_env("exp.env", "NUM_NODES=2", "JOIN_TIMEOUT=3", "ROLLOUT_BATCH_SIZE=2")
    run = _train(cluster, str(env_file))
    assert run.finish() == 1, run.output
    assert "JOIN_TIMEOUT: after 3 s, 1 of 2 nodes (1 of 2 GPUs) joined:" in run.output
    assert "missing: 1 node(s) with 1 GPUs each" in run.output
    assert "train.sh: submitting Ray job" not in run.output
    _assert_clean(cluster, run)
    assert os.path.exists(cluster.run_dir() / "join.sh")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_engines_carry_the_run_marker_and_a_crashed_runs_orphans_are_stopped(
    cluster: Cluster,
) -> None:
    """What slime's actors start (here: an SGLang stand-in started by a Ray actor with
    multiprocessing spawn, as slime's launch_server_process does, which leaves an orphan
    'scheduler' outside Ray's process tree) inherits this node's run marker. train.sh is then
    SIGKILLed (no trap runs; Ray, the job and the orphan stay): the rerun takes the lock the
    kernel released, stops the orphan by its marker, and succeeds."""
    env_file = cluster.write_env(
        "exp.env",
        f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep 120 --probe-engines",
    )
    first = _train(cluster, str(env_file))
    first.wait_for("probe: running")
    seen = json.loads(cluster.marker.read_text())
    slot = cluster.slot(cluster.temp_dir)
    assert seen["driver_marker"] == slot, seen
    [engine] = seen["engines"]
    assert engine["marker"] == slot, seen
    assert _alive(int(engine["pid"]))
    script_pid = _script_pid(cluster)
    os.kill(script_pid, signal.SIGKILL)
    _wait_until_gone(script_pid)
    assert _alive(int(engine["pid"])), "the orphan should outlive the crashed script"
    cluster.marker.unlink()
    # the user's fix before the rerun, made in the rendered script as users debug: the job no
    # longer sleeps (the first run's long sleep only kept it busy while it was killed)
    script = cluster.run_dir() / "train.sh"
    rendered = script.read_text()
    assert "  --probe-sleep\n  120\n" in rendered
    script.write_text(rendered.replace("  --probe-sleep\n  120\n", "  --probe-sleep\n  0\n"))
    rerun = _script(cluster)
    rerun_status = rerun.finish()
    first.finish()  # bin/train's output pipe was held by the crashed run's job client
    assert not _alive(int(engine["pid"])), f"the crashed run's orphan is still running:\n{rerun.output}"
    assert (
        "stopped " in rerun.output
        and f"that an earlier run left behind (AGENTCORE_SLIME_RUN={slot})" in rerun.output
    )
    assert rerun_status == 0, rerun.output
    _assert_clean(cluster, rerun)


def _start_two_nodes(cluster: Cluster, sleep: float) -> tuple[Run, Run]:
    env_file = cluster.write_env(
        "exp.env",
        "NUM_NODES=2",
        "ROLLOUT_BATCH_SIZE=2",
        f"EXTRA_FLAGS=--probe-marker {cluster.marker} --probe-sleep {sleep}",
    )
    head = _train(cluster, str(env_file))
    command = head.worker_command()
    worker_env = dict(
        cluster.env,
        TOOLKIT_RAY_TEMP_DIR=str(cluster.worker_temp_dir),
        TOOLKIT_RAY_AGENT_PORT=str(cluster.worker_agent_port),
        # a lost GCS is given up on after 10 s instead of 60 (Ray's own setting)
        RAY_gcs_rpc_server_reconnect_timeout_s="10",
    )
    worker = Run(command, worker_env)
    head.wait_for("probe: running")
    return head, worker


def test_worker_leaves_with_exit_0_when_the_heads_run_ends(cluster: Cluster) -> None:
    """The head's run ends (job done): it tells the workers through Ray's key-value store before
    it stops Ray; join.sh prints one line and exits 0 at once (no raylet error tail)."""
    head, worker = _start_two_nodes(cluster, sleep=3)
    assert head.finish() == 0, head.output
    assert worker.finish() == 0, worker.output
    after_join = worker.output.split("Ctrl-C leaves the cluster")[-1]
    assert "join.sh: the head's run ended: this node leaves the cluster" in after_join
    assert "error" not in after_join.lower(), worker.output
    assert "without word from the head" not in worker.output
    _assert_clean(cluster, head)


def test_worker_reports_a_head_that_died(cluster: Cluster) -> None:
    """The head dies (its script and its Ray SIGKILLed: no word to the workers): join.sh still
    fails, naming a lost head."""
    head, worker = _start_two_nodes(cluster, sleep=120)
    os.kill(_script_pid(cluster), signal.SIGKILL)
    for proc in cluster.leftovers():
        if f"={cluster.temp_dir}/" in proc or str(cluster.marker) in proc:
            try:
                os.kill(int(proc.split()[0]), signal.SIGKILL)
            except OSError:
                pass
    head.proc.wait(HANG_S)  # (not finish(): the dead script's orphans may still hold its pipe)
    assert worker.finish() == 1, worker.output
    assert "this node's Ray stopped without word from the head that its run ended" in worker.output
    assert "the head's run ended:" not in worker.output
