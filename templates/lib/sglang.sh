# shellcheck shell=bash
# sglang.sh: one SGLang server owned by this script (bin/eval's eval.sh): start it in its own
# process group, wait until it is healthy, notice when it dies, and stop exactly that group.

# start_sglang_server LOG COMMAND...: run COMMAND in the background, in a process group of its
# own (job control on for that one fork), output to LOG. Records the PID (= the group id).
start_sglang_server() { # <log> <command>...
  local log=$1
  shift
  mkdir -p "$(dirname "$log")"
  refuse_link "$log"
  (umask 077 && : >"$log") # 0600 whatever the umask: the server's log is the run's
  say "starting the SGLang server (log: $log)"
  set -m
  "$@" >"$log" 2>&1 </dev/null &
  TOOLKIT_SERVER_PID=$!
  set +m
  TOOLKIT_SERVER_START=$(process_start_time "$TOOLKIT_SERVER_PID")
  TOOLKIT_SERVER_LOG=$log
}

# process_start_time PID: the process's start time (clock ticks after boot, /proc/PID/stat
# field 22); nothing when PID does not exist.
process_start_time() { # <pid>
  local stat
  [[ -r /proc/$1/stat ]] || return 0
  stat=$(<"/proc/$1/stat") || return 0
  stat=${stat##*) } # the fields after the command name (which may hold spaces)
  read -r -a stat <<<"$stat"
  printf '%s\n' "${stat[19]}"
}

# group_is_ours PGID START: false when the number PGID now belongs to another process group.
# While any member of our group lives, Linux does not hand its number out again; once all are
# gone it may, and then a process with that PID exists but started at another time.
group_is_ours() { # <pgid> <start-time>
  [[ ! -e /proc/$1 || $(process_start_time "$1") == "$2" ]]
}

# server_running: true while the server we started still runs.
server_running() {
  [[ -n ${TOOLKIT_SERVER_PID:-} ]] && kill -0 "$TOOLKIT_SERVER_PID" 2>/dev/null
}

# show_server_log [LINES]: the last LINES (default TOOLKIT_LOG_TAIL or 30) lines of the server log.
show_server_log() { # [lines]
  local lines=${1:-${TOOLKIT_LOG_TAIL:-30}}
  [[ -s ${TOOLKIT_SERVER_LOG:-} ]] || return 0
  say "last $lines lines of $TOOLKIT_SERVER_LOG:"
  tail -n "$lines" "$TOOLKIT_SERVER_LOG" | sed 's/^/  | /' >&2
}

# reap_server: once the server has exited, set TOOLKIT_SERVER_STATUS to its exit status (not
# in a subshell: only this shell can wait for its child).
reap_server() {
  TOOLKIT_SERVER_STATUS=0
  wait "$TOOLKIT_SERVER_PID" 2>/dev/null || TOOLKIT_SERVER_STATUS=$?
}

# sglang_is_healthy URL: true when GET URL/health answers 200 within 5 seconds.
sglang_is_healthy() { # <url>
  python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/health", timeout=5) as reply:
    sys.exit(0 if reply.status == 200 else 1)
PY
}

# wait_for_sglang URL TIMEOUT: poll URL/health once a second until it answers; die with the
# server log's tail when the server exits first or TIMEOUT seconds pass.
wait_for_sglang() { # <url> <timeout-seconds>
  local url=$1 timeout=$2 deadline=$((SECONDS + $2))
  say "waiting up to ${timeout}s for $url/health"
  until sglang_is_healthy "$url"; do
    if ! server_running; then
      reap_server
      show_server_log
      die "the SGLang server exited with status $TOOLKIT_SERVER_STATUS before it became healthy (see its log above)"
    fi
    if ((SECONDS >= deadline)); then
      show_server_log
      die "the SGLang server was not healthy after ${timeout}s (raise EVAL_HEALTH_TIMEOUT for a large model, or see its log above)"
    fi
    sleep 1
  done
  say "the SGLang server is healthy ($((timeout - deadline + SECONDS))s)"
}

# group_alive PGID START: true while a process of our process group PGID (leader started at START) exists.
group_alive() { # <pgid> <start-time>
  group_is_ours "$1" "$2" && kill -0 -- "-$1" 2>/dev/null
}

# stop_group PGID START WHAT: TERM our process group PGID (its leader started at START: a process
# we started, with its children), wait up to TOOLKIT_SERVER_GRACE seconds (default 15), then KILL
# what is left, and reap it. Only that group is signalled, and only while it is ours.
stop_group() { # <pgid> <start-time> <what>
  local pgid=$1 start=$2 what=$3 tick grace=${TOOLKIT_SERVER_GRACE:-15}
  group_is_ours "$pgid" "$start" || return 0
  if group_alive "$pgid" "$start"; then
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for ((tick = 0; tick < grace * 5; tick++)); do
      group_alive "$pgid" "$start" || break
      sleep 0.2
    done
    if group_alive "$pgid" "$start"; then
      say "$what ignored TERM for ${grace}s: killing its process group $pgid"
      kill -KILL -- "-$pgid" 2>/dev/null || true
    fi
  fi
  wait "$pgid" 2>/dev/null || true
}

# stop_sglang_server: stop the server's process group (the server and its schedulers).
stop_sglang_server() {
  local pgid=${TOOLKIT_SERVER_PID:-}
  [[ -n $pgid ]] || return 0
  TOOLKIT_SERVER_PID=
  stop_group "$pgid" "${TOOLKIT_SERVER_START:-}" "the SGLang server"
  say "stopped the SGLang server (process group $pgid)"
}

# run_while_server_lives COMMAND...: run COMMAND (the evaluation) in a process group of its own
# and return its status; if the server dies first, stop COMMAND and die with the server log's tail.
run_while_server_lives() { # <command>...
  set -m
  "$@" </dev/null &
  TOOLKIT_EVAL_PID=$!
  set +m
  TOOLKIT_EVAL_START=$(process_start_time "$TOOLKIT_EVAL_PID")
  while kill -0 "$TOOLKIT_EVAL_PID" 2>/dev/null; do
    if ! server_running; then
      reap_server
      stop_evaluation
      show_server_log
      die "the SGLang server exited with status $TOOLKIT_SERVER_STATUS during the evaluation (see its log above)"
    fi
    sleep 1
  done
  local status=0
  wait "$TOOLKIT_EVAL_PID" || status=$?
  # whatever the evaluation left behind in its group (it would hold the log pipe open)
  stop_group "$TOOLKIT_EVAL_PID" "$TOOLKIT_EVAL_START" "the evaluation"
  TOOLKIT_EVAL_PID=
  return "$status"
}

# stop_evaluation: stop the evaluation's process group if it still runs.
stop_evaluation() {
  local pgid=${TOOLKIT_EVAL_PID:-}
  [[ -n $pgid ]] || return 0
  TOOLKIT_EVAL_PID=
  stop_group "$pgid" "${TOOLKIT_EVAL_START:-}" "the evaluation"
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# eval_cleanup_on_signal SIGNAL: stop the evaluation, then exit 128+N (the EXIT trap stops the
# server). The evaluation and the server run in process groups of their own, so a Ctrl-C at the
# terminal reaches only this script, which stops them in order.
eval_cleanup_on_signal() { # <signal-name>
  trap - INT TERM
  say "caught SIG$1: stopping the evaluation and the SGLang server"
  stop_evaluation
  case $1 in
    INT) exit 130 ;;
    *) exit 143 ;;
  esac
}

# eval_cleanup_on_exit: stop what is still running (evaluation, server), keep the exit status.
eval_cleanup_on_exit() {
  local status=$?
  trap - EXIT
  stop_evaluation
  stop_sglang_server
  remove_engine_key_file
  say "exit status $status"
  stop_logging
  exit "$status"
}

# install_eval_cleanup_trap: on Ctrl-C, TERM and every exit, stop the evaluation and the server.
install_eval_cleanup_trap() {
  trap 'eval_cleanup_on_signal INT' INT
  trap 'eval_cleanup_on_signal TERM' TERM
  trap eval_cleanup_on_exit EXIT
}

# make_engine_api_key: a random API key that the SGLang server this script starts requires
# (SGLang's --api-key: every route but /health* and /metrics needs `Authorization: Bearer
# KEY`), so that only this run's evaluation can call /generate and the admin routes; other
# local users reach 127.0.0.1 too. Never on argv: SGLang reads it from a private YAML given with
# --config (TOOLKIT_ENGINE_KEY_FILE: mktemp, mode 0600, a new name; deleted by
# remove_engine_key_file once SGLang has read it), and the evaluation's gateway gets it as
# TOOLKIT_ENGINE_API_KEY (exported: /proc/PID/environ is readable by this user only).
make_engine_api_key() {
  TOOLKIT_ENGINE_KEY_FILE=$(mktemp --suffix=.yaml "${TMPDIR:-/tmp}/agentcore-sglang-key.XXXXXXXX") ||
    die "cannot create a private file for the SGLang API key (set TMPDIR to a directory of yours)"
  read -r TOOLKIT_ENGINE_API_KEY < <(
    python3 - "$TOOLKIT_ENGINE_KEY_FILE" <<'PY'
import secrets, sys
key = secrets.token_hex(32)
with open(sys.argv[1], "w", encoding="utf-8") as out:  # mktemp made it: ours, 0600
    out.write(f"api-key: {key}\n")
print(key)
PY
  ) || die "python3 could not make the SGLang API key"
  export TOOLKIT_ENGINE_API_KEY
}

# remove_engine_key_file: delete the key's YAML (SGLang reads it only while it starts).
remove_engine_key_file() {
  [[ -z ${TOOLKIT_ENGINE_KEY_FILE:-} ]] || rm -f -- "$TOOLKIT_ENGINE_KEY_FILE"
  TOOLKIT_ENGINE_KEY_FILE=
}
