"""The one stand-in of the real-Ray tests: replaces slime's train.py inside the Ray job.

It connects to the cluster the way slime's train.py does (``ray.init()`` inside the job, which
authenticates with the run's token), records what it saw in the file named by
``--probe-marker`` (the cluster's GPUs, the alive nodes, its argv), then sleeps
``--probe-sleep`` seconds and exits with ``--probe-exit``. slime's own flags are ignored.

``--probe-engines``: on every alive node, a Ray actor starts an SGLang stand-in the way slime's
``launch_server_process`` starts SGLang (``multiprocessing`` with the spawn method, from the
actor), and that child leaves an orphan behind (argv[0] ``sglang::scheduler_TP0``, as SGLang
titles its schedulers), as a crashed engine's scheduler would be: outside Ray's process tree,
findable only by what it inherited. Their PIDs and the run marker they carry are recorded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
class EngineStandin:
    """Like slime's SGLang engine actor: starts its server with multiprocessing (spawn)."""

    def start(self, pid_file: str) -> dict[str, str | int | None]:
        # the spawned 'server' leaves its 'scheduler' behind (own session, parent gone)
        command = "setsid bash -c 'exec -a sglang::scheduler_TP0 /bin/sleep 600' </dev/null >/dev/null 2>&1"
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=os.system, args=(f"{command} & echo $! >{pid_file}",))
        proc.start()
        proc.join()
        with open(pid_file, encoding="utf-8") as f:
            orphan = int(f.read())
        with open(f"/proc/{orphan}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        marker = env.get(b"AGENTCORE_SLIME_RUN")
        return {"pid": orphan, "marker": marker.decode() if marker else None}


def start_engines(marker_file: str) -> list[dict[str, str | int | None]]:
    """One engine stand-in per alive node; what each orphan carries."""
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    actors = [
        EngineStandin.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for node in nodes
    ]
    return ray.get([actor.start.remote(f"{marker_file}.engine{i}") for i, actor in enumerate(actors)])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe-marker", required=True)
    parser.add_argument("--probe-sleep", type=float, default=0.0)
    parser.add_argument("--probe-exit", type=int, default=0)
    parser.add_argument("--probe-engines", action="store_true")
    args, _slime_flags = parser.parse_known_args()
    ray.init()
    seen = {
        "gpus": ray.cluster_resources().get("GPU", 0.0),
        "alive_nodes": sum(1 for node in ray.nodes() if node["Alive"]),
        "argv": sys.argv[1:],
        "driver_marker": os.environ.get("AGENTCORE_SLIME_RUN"),
    }
    if args.probe_engines:
        seen["engines"] = start_engines(args.probe_marker)
    with open(args.probe_marker, "w", encoding="utf-8") as out:
        json.dump(seen, out)
    print("probe: running", flush=True)
    time.sleep(args.probe_sleep)
    return args.probe_exit


if __name__ == "__main__":
    sys.exit(main())
