"""The one stand-in of the real-Ray tests: replaces slime's train.py inside the Ray job.

It connects to the cluster the way slime's train.py does (``ray.init()`` inside the job, which
authenticates with the run's token), records what it saw in the file named by
``--probe-marker`` (the cluster's GPUs, the alive nodes, its argv), then sleeps
``--probe-sleep`` seconds and exits with ``--probe-exit``. slime's own flags are ignored.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ray


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe-marker", required=True)
    parser.add_argument("--probe-sleep", type=float, default=0.0)
    parser.add_argument("--probe-exit", type=int, default=0)
    args, _slime_flags = parser.parse_known_args()
    ray.init()
    seen = {
        "gpus": ray.cluster_resources().get("GPU", 0.0),
        "alive_nodes": sum(1 for node in ray.nodes() if node["Alive"]),
        "argv": sys.argv[1:],
    }
    with open(args.probe_marker, "w", encoding="utf-8") as out:
        json.dump(seen, out)
    print("probe: running", flush=True)
    time.sleep(args.probe_sleep)
    return args.probe_exit


if __name__ == "__main__":
    sys.exit(main())
