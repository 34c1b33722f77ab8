# shellcheck shell=bash
# processes.sh: stop what an earlier crashed run left behind, for the current user only (by
# the marker its processes carry and by its Ray temp dir), and stop the Ray node this script
# started. Never `ray stop`: it signals every Ray process on the host it can (every user's
# when run as root, every Ray of this user otherwise).

# stop_stale_processes RAY_TEMP_DIR GCS_PORT MARKER: stop what this user's earlier run of this
# node's Ray left behind: the processes that carry its marker (MARKER, the environment entry
# AGENTCORE_SLIME_RUN=<slot>: Ray's daemons and workers, and the SGLang engines and router
# that slime's actors started), then this user's Ray processes of RAY_TEMP_DIR (or of the
# head's client server on GCS_PORT); verify they are gone (exit 1 naming survivors if not).
# Called with the run lock held: whoever carries MARKER belongs to a run that is gone.
stop_stale_processes() { # <ray-temp-dir> <gcs-port> <marker>
  local uid
  uid=$(id -u)
  say "stopping stale processes of an earlier run of user $(id -un) here (Ray temp dir $1)"
  stop_marked_processes "$uid" "$3"
  ((TOOLKIT_MARKED_COUNT == 0)) || say "stopped $TOOLKIT_MARKED_COUNT process(es) that an earlier run left behind ($3)"
  stop_ray_processes "$uid" "$(ray_node_pattern "$1" "$2")"
}

# The marked-process helper: processes_helper.py (python3 -I -S, in TOOLKIT_HELPER_DIR) lists
# (`list`) or signals (`signal SIG`) the live processes of UID whose environment holds MARKER as
# one whole entry, and all their descendants of UID (a process that retitles itself, as Ray's
# and SGLang's do, is found as the child of a marked one), never this script; a PID reused
# meanwhile is never signalled. Prints the PIDs. TOOLKIT_MARKED_HELPER overrides its path.

# is_run_marker TEXT: true when TEXT is a whole run marker (AGENTCORE_SLIME_RUN=<kind>-<hash>):
# an empty or partial one would match far more than one run's processes.
is_run_marker() { # <text>
  [[ $1 =~ ^AGENTCORE_SLIME_RUN=[a-z]+-[0-9a-f]{16}$ ]]
}

# signal_marked_processes SIGNAL UID MARKER: send SIGNAL (TERM, KILL) to UID's processes that
# carry MARKER; prints their PIDs.
signal_marked_processes() { # <signal> <uid> <marker>
  is_run_marker "$3" || die "not a run marker: '$3' (a bug: nothing was signalled)"
  python3 -I -S "${TOOLKIT_MARKED_HELPER:-$TOOLKIT_HELPER_DIR/processes_helper.py}" signal "$2" "$3" "$$ ${BASHPID:-}" "$1"
}

# marked_pids UID MARKER: the PIDs of UID's live processes that carry MARKER, one per line.
marked_pids() { # <uid> <marker>
  is_run_marker "$2" || die "not a run marker: '$2' (a bug)"
  python3 -I -S "${TOOLKIT_MARKED_HELPER:-$TOOLKIT_HELPER_DIR/processes_helper.py}" list "$1" "$2" "$$ ${BASHPID:-}"
}

# stop_marked_processes UID MARKER: TERM UID's processes that carry MARKER (how many:
# TOOLKIT_MARKED_COUNT), give them up to
# TOOLKIT_STALE_GRACE seconds (default 5) to exit and free their GPU memory, then KILL the
# ones still there (a crashed run often leaves hung SGLang schedulers behind).
stop_marked_processes() { # <uid> <marker>
  local -a pids=()
  local grace=${TOOLKIT_STALE_GRACE:-5}
  is_run_marker "$2" || die "not a run marker: '$2' (a bug: nothing was signalled)"
  mapfile -t pids < <(signal_marked_processes TERM "$1" "$2")
  TOOLKIT_MARKED_COUNT=${#pids[@]}
  ((${#pids[@]} > 0)) || return 0
  wait_gone "$grace" "${pids[@]}" && return 0
  say "processes marked $2 ignored TERM for ${grace}s: killing them"
  signal_marked_processes KILL "$1" "$2" >/dev/null
  wait_gone "${TOOLKIT_STALE_CHECKS:-10}" "${TOOLKIT_LEFT[@]}" ||
    die "processes marked $2 survived SIGKILL (PIDs: ${TOOLKIT_LEFT[*]}); stop them with 'kill -9 PID' and rerun"
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
