# shellcheck shell=bash
# processes.sh: stop what an earlier crashed run left behind, for the current user only,
# and stop the Ray node this script started. Never `ray stop`: it signals every Ray process
# on the host it can (every user's when run as root, every Ray of this user otherwise).

# Command-line patterns of SGLang processes (servers, schedulers, routers).
# Anchored so that no unrelated process (an editor on sglang.py, this script) matches.
TOOLKIT_SGLANG_PATTERN='^sglang::|sglang\.launch_server|sglang_router\.launch'

# stop_stale_processes RAY_TEMP_DIR GCS_PORT: stop this user's SGLang processes and this
# user's Ray processes of RAY_TEMP_DIR (or of the head's client server on GCS_PORT), then
# verify they are gone (exit 1 naming the survivors if not).
stop_stale_processes() { # <ray-temp-dir> <gcs-port>
  local uid
  uid=$(id -u)
  say "stopping stale SGLang and Ray processes of user $(id -un) (Ray temp dir $1)"
  stop_sglang_processes "$uid"
  stop_ray_processes "$uid" "$(ray_node_pattern "$1" "$2")"
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

# ray_node_pattern RAY_TEMP_DIR GCS_PORT: the pgrep -f pattern of one Ray node's daemons.
# gcs_server, raylet, dashboard, monitor and log_monitor have an option `--x=<temp dir>/session_...`
# on their command line (a `tail -f` of a log does not: no `=`); the head's client server
# names only the GCS address (a worker, GCS_PORT empty, has none). Workers and
# agents (ray::IDLE, ray::DashboardAgent) are found as the daemons' children.
ray_node_pattern() { # <ray-temp-dir> <gcs-port>
  local dir
  dir=$(printf '%s' "${1%/}" | sed 's/[][\.*^$+?(){}|]/\\&/g')
  printf '=%s/session_' "$dir"
  [[ -z $2 ]] || printf '|ray\\.util\\.client\\.server --address=[^ ]*:%s( |$)' "$2"
}

# is_live PID: true while PID runs (a zombie left for init to reap does not count).
is_live() { # <pid>
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ -n $state && $state != Z* ]]
}

# ray_process_tree UID PATTERN: the PIDs of UID's processes matching PATTERN and of all
# their descendants, one per line (never this script's own; zombies are filtered later).
ray_process_tree() { # <uid> <pattern>
  local -a queue=()
  local pid
  mapfile -t queue < <(pgrep -u "$1" -f "$2" || true)
  while ((${#queue[@]} > 0)); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    [[ $pid == "$$" || $pid == "${BASHPID:-}" ]] && continue
    printf '%s\n' "$pid"
    mapfile -t -O "${#queue[@]}" queue < <(pgrep -u "$1" -P "$pid" || true)
  done
}

# live_pids PID...: the PIDs that still run (zombies excluded), space-separated; one ps call.
live_pids() { # <pid>...
  local pid state out=""
  (($# > 0)) || return 0
  while read -r pid state; do
    [[ $state == Z* ]] || out+="$pid "
  done < <(ps -o pid=,stat= -p "$(IFS=,; printf '%s' "$*")" 2>/dev/null || true)
  printf '%s' "${out% }"
}

# raylet_pids PID...: those of PIDs that are a raylet, space-separated.
raylet_pids() { # <pid>...
  local pid comm out=""
  while read -r pid comm; do
    [[ $comm == raylet ]] && out+="$pid "
  done < <(ps -o pid=,comm= -p "$(IFS=,; printf '%s' "$*")" 2>/dev/null || true)
  printf '%s' "${out% }"
}

# wait_gone SECONDS PID...: poll until none of PIDs runs; false (TOOLKIT_LEFT = the
# survivors) after SECONDS.
wait_gone() { # <seconds> <pid>...
  local attempt
  for ((attempt = 0; attempt <= $1 * 4; attempt++)); do
    read -ra TOOLKIT_LEFT <<<"$(live_pids "${@:2}")"
    ((${#TOOLKIT_LEFT[@]} > 0)) || return 0
    sleep 0.25
  done
  return 1
}

# stop_ray_processes UID PATTERN: stop one Ray node's processes of UID (see ray_node_pattern)
# as `ray stop` would: TERM the raylet first (its agents and workers go with it, and the
# rest then exits in about a second), then TERM the rest; KILL what is left after
# TOOLKIT_RAY_STOP_GRACE seconds (default 5); exit 1 naming survivors of the KILL.
stop_ray_processes() { # <uid> <pattern>
  local -a pids=() raylets=()
  local grace=${TOOLKIT_RAY_STOP_GRACE:-5}
  mapfile -t pids < <(ray_process_tree "$1" "$2")
  ((${#pids[@]} > 0)) || return 0
  read -ra raylets <<<"$(raylet_pids "${pids[@]}")"
  if ((${#raylets[@]} > 0)); then
    kill -TERM "${raylets[@]}" 2>/dev/null || true
    wait_gone "$grace" "${raylets[@]}" || true
  fi
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait_gone "$grace" "${pids[@]}" && return 0
  say "Ray processes ignored TERM for ${grace}s: killing them ($(ps -o comm= -p "$(IFS=,; printf '%s' "${TOOLKIT_LEFT[*]}")" 2>/dev/null | tr '\n' ' '))"
  kill -KILL "${TOOLKIT_LEFT[@]}" 2>/dev/null || true
  wait_gone "${TOOLKIT_STALE_CHECKS:-10}" "${TOOLKIT_LEFT[@]}" ||
    die "Ray processes of this user survived SIGKILL (PIDs: ${TOOLKIT_LEFT[*]}); stop them with 'kill -9 PID' and rerun"
}

# kill_ray_processes_now UID PATTERN: SIGKILL one Ray node's processes at once (second Ctrl-C),
# and give the kernel up to 2 s to take them away.
kill_ray_processes_now() { # <uid> <pattern>
  local -a pids=()
  mapfile -t pids < <(ray_process_tree "$1" "$2")
  ((${#pids[@]} > 0)) || return 0
  kill -KILL "${pids[@]}" 2>/dev/null || true
  wait_gone 2 "${pids[@]}" || true
}
