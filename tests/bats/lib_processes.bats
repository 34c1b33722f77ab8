#!/usr/bin/env bats
# templates/lib/processes.sh, sourced directly: stale-process cleanup is scoped to this user and
# to the marker of this run's processes.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/lock.sh
  source "$LIB_DIR/lock.sh"
  # shellcheck source=templates/lib/processes.sh
  source "$LIB_DIR/processes.sh"
  stub sleep
}

# marked MARKER NAME COMMAND...: start COMMAND in the background with the environment entry
# MARKER (none when empty) and argv[0] NAME (e.g. sglang::scheduler_TP0, as SGLang sets its
# schedulers' titles); its PID goes to $WORK/pid.NAME.
marked() { # <marker> <name> <command>...
  local marker=$1 name=$2
  shift 2
  # shellcheck disable=SC2016 # $0 and $@ expand in the child shell
  if [[ -n $marker ]]; then
    env "$marker" bash -c 'exec -a "$0" "$@"' "$name" "$@" >/dev/null 2>&1 &
  else
    bash -c 'exec -a "$0" "$@"' "$name" "$@" >/dev/null 2>&1 &
  fi
  echo $! >"$WORK/pid.${name//[^a-z0-9]/_}"
}

# pid_of NAME: the PID marked() recorded for NAME.
pid_of() { # <name>
  cat "$WORK/pid.${1//[^a-z0-9]/_}"
}

# wait_started NAME...: until each process runs under its NAME (its environment is then set).
wait_started() { # <name>...
  local name i
  for name; do
    for ((i = 0; i < 100; i++)); do
      [[ $(tr '\0' ' ' <"/proc/$(pid_of "$name")/cmdline" 2>/dev/null) == "$name "* ]] && break
      /bin/sleep 0.05
    done
  done
}

@test "stale cleanup stops exactly the processes that carry this run's marker (real processes)" {
  rm -f "$STUB_DIR/sleep"
  local mine other
  mine=$(run_marker_env "$(lock_slot ray /tmp/ray-a)")
  other=$(run_marker_env "$(lock_slot ray /tmp/ray-b)")
  # a stale SGLang scheduler and a router (forked from slime's driver: its command line is
  # train.py's) of this run; the same of another run; unmarked ones; an unrelated shell
  marked "$mine" "sglang::scheduler_TP0" /bin/sleep 60
  marked "$mine" "/v/python3 /slime/train.py" /bin/sleep 60
  marked "$other" "sglang::scheduler_TP1" /bin/sleep 60
  marked "${mine}0" "sglang::detokenizer" /bin/sleep 60
  marked "" "python3 -m sglang.launch_server" /bin/sleep 60
  marked "" "bash -c : sglang.launch_server" /bin/sleep 60
  marked "" "$mine" /bin/sleep 60
  # a marked server whose scheduler retitled itself (setproctitle overwrites what
  # /proc/PID/environ shows; here: a child with an empty environment): found as its child
  # shellcheck disable=SC2016 # $! and $0 expand in the child shell
  marked "$mine" "python3 -c from multiprocessing.spawn" bash -c \
    'env -i bash -c "exec -a sglang::scheduler_TP3 /bin/sleep 60" & echo $! >"$0"; wait' "$WORK/pid.titled"
  wait_started "sglang::scheduler_TP0" "/v/python3 /slime/train.py" "sglang::scheduler_TP1" "sglang::detokenizer" \
    "python3 -m sglang.launch_server" "bash -c : sglang.launch_server" "$mine" "python3 -c from multiprocessing.spawn"
  local i
  for ((i = 0; i < 2400; i++)); do [[ -s $WORK/pid.titled ]] && break; /bin/sleep 0.05; done
  stub pgrep 'exit 1'
  run -0 stop_stale_processes /tmp/ray-a 6379 "$mine"
  assert_output_contains "stopped 4 process(es) that an earlier run left behind ($mine)"
  local name
  for name in "sglang::scheduler_TP0" "/v/python3 /slime/train.py" "python3 -c from multiprocessing.spawn" titled; do
    ! is_live "$(pid_of "$name")" || flunk "not stopped: $name"
  done
  for name in "sglang::scheduler_TP1" "sglang::detokenizer" "python3 -m sglang.launch_server" \
    "bash -c : sglang.launch_server" "$mine"; do
    is_live "$(pid_of "$name")" || flunk "stopped, but not ours: $name"
    kill "$(pid_of "$name")"
  done
}

@test "a marked process that ignores TERM gets KILL after the grace period" {
  rm -f "$STUB_DIR/sleep"
  local mine
  mine=$(run_marker_env "$(lock_slot ray /tmp/ray-a)")
  env "$mine" bash -c "trap '' TERM; echo up >'$WORK/up'; while :; do /bin/sleep 0.1; done" >/dev/null 2>&1 &
  local pid=$!
  until [[ -e $WORK/up ]]; do /bin/sleep 0.05; done
  TOOLKIT_STALE_GRACE=1 run -0 stop_marked_processes "$(id -u)" "$mine"
  assert_output_contains "processes marked $mine ignored TERM for 1s: killing them"
  ! is_live "$pid" || flunk "still running"
}

@test "another user's process with our marker and our Ray's command line is never signalled" {
  rm -f "$STUB_DIR/sleep"
  with_other_user
  local mine
  mine=$(run_marker_env "$(lock_slot ray /tmp/ray-a)")
  as_other_user env "$mine" bash -c 'exec -a "sglang::scheduler_TP0 --x=/tmp/ray-a/session_1" /bin/sleep 60' &
  local i
  for ((i = 0; i < 2400; i++)); do pgrep -u "$OTHER_USER" -f "^sglang::" >/dev/null && break; /bin/sleep 0.05; done
  local theirs
  theirs=$(pgrep -u "$OTHER_USER" -f "^sglang::") || flunk "the other user's process did not start"
  rm -f "$STUB_DIR/pgrep"
  run -0 stop_stale_processes /tmp/ray-a 6379 "$mine"
  refute_output_contains "stopped"
  is_live "$theirs" || flunk "the toolkit signalled another user's process"
}

@test "no marker, no signal: an empty or partial marker is refused before anything is signalled" {
  run -1 stop_marked_processes "$(id -u)" ""
  assert_output_contains "not a run marker: ''"
  run -1 stop_marked_processes "$(id -u)" "AGENTCORE_SLIME_RUN="
  assert_output_contains "not a run marker"
  run -1 python3 "$TOOLKIT_HELPER_DIR/processes_helper.py" signal "$(id -u)" "" "" TERM
  assert_output_contains "not a run marker"
}

@test "the Ray node pattern matches this node's daemons only (observed Ray 2.60 command lines)" {
  local pattern cmdline
  pattern=$(ray_node_pattern /tmp/ray-x/ 6390)
  for cmdline in \
    "/v/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray-x/session_2026-11-23_17-45-10_590856_12573/logs --gcs_server_port=6390" \
    "/v/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray-x/session_2026-11-23_1/sockets/raylet" \
    "/v/bin/python3 /v/ray/dashboard/dashboard.py --host=127.0.0.1 --temp-dir=/tmp/ray-x --log-dir=/tmp/ray-x/session_1/logs" \
    "/v/bin/python3 -m ray.util.client.server --address=192.0.2.2:6390 --host=192.0.2.2 --port=10001"; do
    [[ $cmdline =~ $pattern ]] || flunk "should match: $cmdline"
  done
  for cmdline in \
    "/v/ray/raylet/raylet --raylet_socket_name=/tmp/ray-xy/session_1/sockets/raylet" \
    "/v/ray/raylet/raylet --raylet_socket_name=/tmp/ray/session_1/sockets/raylet" \
    "tail -f /tmp/ray-x/session_latest/logs/raylet.out" \
    "/v/bin/python3 /v/bin/ray start --head --temp-dir /tmp/ray-x --port 6390" \
    "/v/bin/python3 -m ray.util.client.server --address=192.0.2.2:63901 --port=10001" \
    "bash runs/exp/train.sh"; do
    [[ ! $cmdline =~ $pattern ]] || flunk "should not match: $cmdline"
  done
  pattern=$(ray_node_pattern /tmp/ray-x "")
  [[ "/v/bin/python3 -m ray.util.client.server --address=192.0.2.2:6390 " =~ $pattern ]] &&
    flunk "a worker's pattern must not match the head's client server"
  [[ "/v/raylet --raylet_socket_name=/tmp/ray-x/session_1/sockets/raylet" =~ $pattern ]] || flunk "worker raylet"
}

# fake_process_table: pgrep and ps stubs that answer from $PROCS ("UID PID PPID STAT COMM
# CMDLINE" per line) as the real ones would (-u, -f, -P; -o pid=,stat= / pid=,comm= -p LIST),
# and a `kill` function that records its argv and drops the signalled PIDs from the table.
fake_process_table() {
  export PROCS="$BATS_TEST_TMPDIR/procs"
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '
uid="" pattern="" parent=""
while (($#)); do case $1 in -u) uid=$2; shift 2 ;; -f) pattern=$2; shift 2 ;; -P) parent=$2; shift 2 ;; *) shift ;; esac; done
found=1
while read -r u pid ppid _stat _comm cmd; do
  [[ -n $uid && $u != "$uid" ]] && continue
  [[ -n $parent && $ppid != "$parent" ]] && continue
  [[ -n $pattern && ! $cmd =~ $pattern ]] && continue
  echo "$pid"; found=0
done <"$PROCS"
exit $found'
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ps '
fields=$2 list=,$4,
while read -r _u pid _ppid stat comm _cmd; do
  [[ $list == *",$pid,"* ]] || continue
  case $fields in pid=,stat=) echo "$pid $stat" ;; pid=,comm=) echo "$pid $comm" ;; comm=) echo "$comm" ;; stat=) echo "$stat" ;; esac
done <"$PROCS"'
  # shellcheck disable=SC2329 # called by the library under test
  kill() {
    local signal=$1 pid
    shift
    echo "kill $signal $*" >>"$CALL_LOG"
    for pid; do sed -i "/^[0-9]* $pid /d" "$PROCS"; done
  }
}

@test "another user's Ray on the same temp dir and port is never signalled; ours is, raylet first" {
  fake_process_table
  local me other
  me=$(id -u)
  other=$((me + 1))
  cat >"$PROCS" <<TABLE
$me 100 1 S raylet /v/raylet --raylet_socket_name=/tmp/ray/session_1/sockets/raylet
$me 101 100 S ray::IDLE ray::IDLE
$me 102 1 S gcs_server /v/gcs_server --log_dir=/tmp/ray/session_1/logs
$me 103 1 S python3 /v/python3 -m ray.util.client.server --address=10.0.0.1:6379 --port=10001
$other 200 1 S raylet /v/raylet --raylet_socket_name=/tmp/ray/session_9/sockets/raylet
$other 201 200 S ray::IDLE ray::IDLE
$other 202 1 S python3 /v/python3 -m ray.util.client.server --address=10.0.0.1:6379 --port=10001
TABLE
  run -0 stop_ray_processes "$me" "$(ray_node_pattern /tmp/ray 6379)"
  run calls kill
  assert_output "kill -TERM 100
kill -TERM 100 102 103 101"
  run cat "$PROCS"
  assert_output "$other 200 1 S raylet /v/raylet --raylet_socket_name=/tmp/ray/session_9/sockets/raylet
$other 201 200 S ray::IDLE ray::IDLE
$other 202 1 S python3 /v/python3 -m ray.util.client.server --address=10.0.0.1:6379 --port=10001"
}

@test "Ray processes that ignore TERM get KILL after the grace period; survivors of KILL are named" {
  fake_process_table
  local me
  me=$(id -u)
  echo "$me 300 1 S gcs_server /v/gcs_server --log_dir=/tmp/ray/session_1/logs" >"$PROCS"
  kill() { echo "kill $*" >>"$CALL_LOG"; } # the process ignores every signal
  TOOLKIT_RAY_STOP_GRACE=1 TOOLKIT_STALE_CHECKS=1 run -1 stop_ray_processes "$me" "$(ray_node_pattern /tmp/ray 6379)"
  assert_output_contains "Ray processes ignored TERM for 1s: killing them (gcs_server )"
  assert_output_contains "Ray processes of this user survived SIGKILL (PIDs: 300)"
  run calls kill
  assert_output "kill -TERM 300
kill -KILL 300"
}

teardown() {
  [[ -z ${OTHER_USER:-} ]] || remove_other_user
}
