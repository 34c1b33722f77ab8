# shellcheck shell=bash
# sglang.sh: the SGLang servers owned by this script (bin/eval's eval.sh): one or more engines
# (no router in front of several: the gateway spreads sessions over them). Each runs in a
# process group of its own; the script waits until each is healthy, notices when one dies, and
# stops exactly those groups.

TOOLKIT_SERVER_PIDS=()
TOOLKIT_SERVER_STARTS=()
TOOLKIT_SERVER_LOGS=()
TOOLKIT_SERVER_NAMES=()
TOOLKIT_SERVER_ROLES=()
TOOLKIT_SERVER_DEAD=()
TOOLKIT_ENGINE_KEY_FILES=()

# start_sglang_server LOG COMMAND...: start_server for "the SGLang server" (one engine).
start_sglang_server() { # <log> <command>...
  start_server "the SGLang server" engine "$@"
}

# start_server NAME ROLE LOG COMMAND...: run COMMAND in the background, in a process group of its
# own (job control on for that one fork), output to LOG. ROLE is engine (the evaluation goes on
# while another engine serves) or anything else (its death stops the evaluation). Appends to
# the TOOLKIT_SERVER_* arrays (PID = process group id, start time, log, name, role); the last one
# started is also TOOLKIT_SERVER_PID, its index TOOLKIT_SERVER_INDEX.
start_server() { # <name> <role> <log> <command>...
  local name=$1 role=$2 log=$3
  shift 3
  mkdir -p "$(dirname "$log")"
  refuse_link "$log"
  (umask 077 && : >"$log") # 0600 whatever the umask: the server's log is the run's
  say "starting $name (log: $log)"
  set -m
  "$@" >"$log" 2>&1 </dev/null &
  TOOLKIT_SERVER_PID=$!
  set +m
  TOOLKIT_SERVER_PIDS+=("$TOOLKIT_SERVER_PID")
  TOOLKIT_SERVER_STARTS+=("$(process_start_time "$TOOLKIT_SERVER_PID")")
  TOOLKIT_SERVER_LOGS+=("$log")
  TOOLKIT_SERVER_NAMES+=("$name")
  TOOLKIT_SERVER_ROLES+=("$role")
  TOOLKIT_SERVER_INDEX=$((${#TOOLKIT_SERVER_PIDS[@]} - 1))
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

# server_running [INDEX]: true while server INDEX (default: the last started) still runs.
server_running() { # [index]
  local i=${1:-${TOOLKIT_SERVER_INDEX:--1}}
  ((i >= 0)) && [[ -n ${TOOLKIT_SERVER_PIDS[i]:-} ]] && kill -0 "${TOOLKIT_SERVER_PIDS[i]}" 2>/dev/null
}

# show_server_log [LINES] [INDEX]: the last LINES (default TOOLKIT_LOG_TAIL or 30) lines of
# server INDEX's log (default: the last started).
show_server_log() { # [lines] [index]
  local lines=${1:-${TOOLKIT_LOG_TAIL:-30}} i=${2:-${TOOLKIT_SERVER_INDEX:--1}}
  local log=${TOOLKIT_SERVER_LOGS[i]:-}
  [[ -s $log ]] || return 0
  say "last $lines lines of $log:"
  tail -n "$lines" "$log" | sed 's/^/  | /' >&2
}

# reap_server [INDEX]: once server INDEX (default: the last started) has exited, set
# TOOLKIT_SERVER_STATUS to its exit status (not in a subshell: only this shell can wait for its child).
reap_server() { # [index]
  local i=${1:-${TOOLKIT_SERVER_INDEX:--1}}
  TOOLKIT_SERVER_STATUS=0
  wait "${TOOLKIT_SERVER_PIDS[i]}" 2>/dev/null || TOOLKIT_SERVER_STATUS=$?
}

# server_is_ready INDEX URL: true when URL's port is held by server INDEX (a process of the
# process group this script started: its socket's inode among their /proc/PID/fd) and URL/health
# answers 200. A port held by anyone else stops the script before anything (the key, a prompt)
# is sent there: whoever binds a port first receives what is sent to it.
server_is_ready() { # <index> <url>
  local who status=0
  who=$(python3 "$TOOLKIT_HELPER_DIR/sglang_helper.py" ready "$2" "${TOOLKIT_SERVER_PIDS[$1]}" 2>/dev/null) ||
    status=$?
  ((status != 4)) ||
    die "port ${2##*:} of ${TOOLKIT_SERVER_NAMES[$1]} is held by another process, $who, not by the server this script started: nothing was sent to it (someone took the port first; choose another SGLANG_PORT, or 0, and run again)"
  ((status == 0))
}

# wait_for_sglang URL TIMEOUT: wait_for_server for the last server started, TIMEOUT seconds from now.
wait_for_sglang() { # <url> <timeout-seconds>
  say "waiting up to ${2}s for $1/health"
  wait_for_server "${TOOLKIT_SERVER_INDEX:--1}" "$1" $((SECONDS + $2)) "$2"
}

# wait_for_server INDEX URL DEADLINE TIMEOUT: poll URL/health once a second until it answers;
# die with server INDEX's log tail when it exits first or SECONDS reaches DEADLINE (TIMEOUT is
# the limit the message names).
wait_for_server() { # <index> <url> <deadline> <timeout-seconds>
  local i=$1 url=$2 deadline=$3 timeout=$4 name=${TOOLKIT_SERVER_NAMES[$1]}
  until server_is_ready "$i" "$url"; do
    if ! server_running "$i"; then
      reap_server "$i"
      show_server_log "" "$i"
      die "$name exited with status $TOOLKIT_SERVER_STATUS before it became healthy (see its log above)"
    fi
    if ((SECONDS >= deadline)); then
      show_server_log "" "$i"
      die "$name was not healthy after ${timeout}s (raise EVAL_HEALTH_TIMEOUT for a large model, or see its log above)"
    fi
    sleep 1
  done
  say "$name is healthy"
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

# stop_sglang_server: stop every server's process group (each with its schedulers), the last
# started first.
stop_sglang_server() {
  local i pgid
  for ((i = ${#TOOLKIT_SERVER_PIDS[@]} - 1; i >= 0; i--)); do
    pgid=${TOOLKIT_SERVER_PIDS[i]}
    [[ -n $pgid ]] || continue
    TOOLKIT_SERVER_PIDS[i]=
    stop_group "$pgid" "${TOOLKIT_SERVER_STARTS[i]}" "${TOOLKIT_SERVER_NAMES[i]}"
    say "stopped ${TOOLKIT_SERVER_NAMES[i]} (process group $pgid)"
  done
}

# run_while_server_lives COMMAND...: run COMMAND (the evaluation) in a process group of its own
# and return its status. If a server that is not an engine, or the last live engine, dies first,
# stop COMMAND and die with its log's tail. An engine that dies while another serves is reported
# (its log's tail) and the evaluation goes on: the gateway sends the dead engine's sessions to the
# engines left, the episodes whose calls ran out of retries fail as infrastructure failures, and
# the summary is written; then exit 1.
run_while_server_lives() { # <command>...
  set -m
  "$@" </dev/null &
  TOOLKIT_EVAL_PID=$!
  set +m
  TOOLKIT_EVAL_START=$(process_start_time "$TOOLKIT_EVAL_PID")
  TOOLKIT_ENGINES_LOST=0
  while kill -0 "$TOOLKIT_EVAL_PID" 2>/dev/null; do
    check_servers_alive
    sleep 1
  done
  local status=0
  wait "$TOOLKIT_EVAL_PID" || status=$?
  # whatever the evaluation left behind in its group (it would hold the log pipe open)
  stop_group "$TOOLKIT_EVAL_PID" "$TOOLKIT_EVAL_START" "the evaluation"
  TOOLKIT_EVAL_PID=
  check_servers_alive # a server that died in the evaluation's last second counts too
  if ((TOOLKIT_ENGINES_LOST > 0)); then
    die "$TOOLKIT_ENGINES_LOST SGLang engine(s) died during the evaluation (see above): its episodes count as infrastructure failures in the summary"
  fi
  return "$status"
}

# check_servers_alive: die (stopping the evaluation) when a server that is not an engine, or every
# engine, has exited;
# report, once, an engine that exited while others still serve (its process group is still
# stopped on exit: its children may outlive it).
check_servers_alive() {
  local i live=0 dead=()
  for i in "${!TOOLKIT_SERVER_PIDS[@]}"; do
    [[ -n ${TOOLKIT_SERVER_PIDS[i]} && -z ${TOOLKIT_SERVER_DEAD[i]:-} ]] || continue
    if server_running "$i"; then
      [[ ${TOOLKIT_SERVER_ROLES[i]} != engine ]] || live=$((live + 1))
    elif [[ ${TOOLKIT_SERVER_ROLES[i]} == engine ]]; then
      dead+=("$i")
    else
      reap_server "$i"
      server_died "$i"
    fi
  done
  for i in "${dead[@]}"; do
    reap_server "$i"
    TOOLKIT_SERVER_DEAD[i]=1
    ((live > 0)) || server_died "$i"
    TOOLKIT_ENGINES_LOST=$((TOOLKIT_ENGINES_LOST + 1))
    show_server_log "" "$i"
    say "${TOOLKIT_SERVER_NAMES[i]} exited with status $TOOLKIT_SERVER_STATUS during the evaluation; the gateway sends its sessions to the $live engine(s) left"
  done
}

# server_died INDEX: stop the evaluation, show server INDEX's log tail, die naming it.
server_died() { # <index>
  stop_evaluation
  show_server_log "" "$1"
  die "${TOOLKIT_SERVER_NAMES[$1]} exited with status $TOOLKIT_SERVER_STATUS during the evaluation (see its log above)"
}

# stop_evaluation: stop the evaluation's process group if it still runs.
stop_evaluation() {
  local pgid=${TOOLKIT_EVAL_PID:-}
  [[ -n $pgid ]] || return 0
  TOOLKIT_EVAL_PID=
  stop_group "$pgid" "${TOOLKIT_EVAL_START:-}" "the evaluation"
}

# free_port [TAKEN...]: a TCP port on 127.0.0.1 that nothing holds right now, outside the
# kernel's ephemeral range (SGLang binds it minutes later, after loading: an ephemeral port
# could be handed to any process meanwhile) and Ray's worker ports, and not one of TAKEN.
free_port() { # [taken port]...
  python3 "$TOOLKIT_HELPER_DIR/sglang_helper.py" free-port "$@"
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

# make_engine_api_key [COUNT]: COUNT (default 1) random API keys, one for each SGLang server
# this script starts (SGLang's --api-key: every route but /health* and /metrics needs
# `Authorization: Bearer KEY`), so that only this run's evaluation can call /generate and the
# admin routes (other local users reach 127.0.0.1 too), and a key one engine's port leaked
# opens no other engine. Never on argv: SGLang reads its key from a private YAML given with
# --config (TOOLKIT_ENGINE_KEY_FILES[i]: mktemp, mode 0600, a new name; deleted by remove_engine_key_file once SGLang has read it), and the
# evaluation's gateway gets them, in engine order joined by commas, as TOOLKIT_ENGINE_API_KEY
# (exported: /proc/PID/environ is readable by this user only).
make_engine_api_key() { # [count]
  local i file key keys=()
  TOOLKIT_ENGINE_KEY_FILES=()
  for ((i = 0; i < ${1:-1}; i++)); do
    file=$(mktemp --suffix=.yaml "${TMPDIR:-/tmp}/agentcore-sglang-key.XXXXXXXX") ||
      die "cannot create a private file for the SGLang API key (set TMPDIR to a directory of yours)"
    TOOLKIT_ENGINE_KEY_FILES+=("$file")
    read -r key < <(python3 "$TOOLKIT_HELPER_DIR/sglang_helper.py" api-key "$file") ||
      die "python3 could not make the SGLang API key"
    keys+=("$key")
  done
  TOOLKIT_ENGINE_API_KEY=$(IFS=,; echo "${keys[*]}")
  export TOOLKIT_ENGINE_API_KEY
}

# remove_engine_key_file: delete the keys' YAML files (SGLang reads them only while it starts).
remove_engine_key_file() {
  local file
  for file in "${TOOLKIT_ENGINE_KEY_FILES[@]}"; do
    rm -f -- "$file"
  done
  TOOLKIT_ENGINE_KEY_FILES=()
}
