# shellcheck shell=bash
# processes.sh: stop what an earlier crashed run left behind, for the current user only.

# Command-line patterns of SGLang processes (servers, schedulers, routers).
# Anchored so that no unrelated process (an editor on sglang.py, this script) matches.
TOOLKIT_SGLANG_PATTERN='^sglang::|sglang\.launch_server|sglang_router\.launch'

# stop_stale_processes: stop this user's SGLang processes, `ray stop --force`, then
# verify that no raylet or gcs_server of this user is left (exit 1 naming them if one is).
stop_stale_processes() {
  local uid
  uid=$(id -u)
  say "stopping stale SGLang and Ray processes of user $(id -un)"
  stop_sglang_processes "$uid"
  ray stop --force >&2 || true
  wait_for_ray_exit "$uid"
}

# stop_sglang_processes UID: TERM the SGLang processes of UID, give them up to
# TOOLKIT_STALE_GRACE seconds (default 5) to exit and free their GPU memory, then KILL the
# ones still there (a crashed run often leaves hung schedulers behind).
stop_sglang_processes() { # <uid>
  local uid=$1 second
  pkill -TERM -u "$uid" -f "$TOOLKIT_SGLANG_PATTERN" || return 0 # none running
  for ((second = 0; second < ${TOOLKIT_STALE_GRACE:-5}; second++)); do
    pgrep -u "$uid" -f "$TOOLKIT_SGLANG_PATTERN" >/dev/null || return 0
    sleep 1
  done
  say "SGLang processes ignored TERM for ${TOOLKIT_STALE_GRACE:-5}s: killing them"
  pkill -KILL -u "$uid" -f "$TOOLKIT_SGLANG_PATTERN" || true
}

# wait_for_ray_exit UID: poll (up to TOOLKIT_STALE_CHECKS times, 1 s apart) until no raylet
# or gcs_server of UID runs; die with their PIDs if some survive.
wait_for_ray_exit() { # <uid>
  local uid=$1 attempt left
  for ((attempt = 1; attempt <= ${TOOLKIT_STALE_CHECKS:-10}; attempt++)); do
    left=$(ray_daemon_pids "$uid" | tr '\n' ' ')
    [[ -z $left ]] && return 0
    sleep 1
  done
  die "Ray processes of this user survived 'ray stop --force' (PIDs: ${left% }); stop them with 'kill PID' and rerun"
}

# ray_daemon_pids UID: the PIDs of UID's raylet and gcs_server processes. One exact-name
# pgrep per name: a process name has at most 15 characters, and procps-ng 4 warns about any
# longer pattern (such as 'raylet|gcs_server') on every run.
ray_daemon_pids() { # <uid>
  local name
  for name in raylet gcs_server; do
    pgrep -u "$1" -x "$name" || true
  done
}
