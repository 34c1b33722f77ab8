#!/usr/bin/env bats
# templates/lib/processes.sh, sourced directly: stale-process cleanup is scoped to this user.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/processes.sh
  source "$LIB_DIR/processes.sh"
  stub sleep
}

@test "stop_stale_processes: this user's SGLang, then this node's Ray processes of this user; never ray stop" {
  stub pkill 'exit 1'
  stub ray
  stub pgrep 'exit 1'
  run -0 stop_stale_processes /tmp/ray-x 6390
  local uid
  uid=$(id -u)
  assert_calls <<CALLS
pkill -TERM -u $uid -f \^sglang::\|sglang\\\\.launch_server\|sglang_router\\\\.launch
pgrep -u $uid -f =/tmp/ray-x/session_\|ray\\\\.util\\\\.client\\\\.server\ --address=\[\^\ \]\*:6390\(\ \|\\\$\)
CALLS
}

@test "SGLang processes get TERM and a grace period; the ones that ignore it get KILL" {
  stub pkill
  stub ray
  # pgrep of SGLang answers twice with a PID; pgrep of the Ray node finds nothing
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '[[ $4 == =* ]] && exit 1; n=$(grep -c "^pgrep .*sglang" "$CALL_LOG"); ((n <= 2)) && echo 4242 && exit 0; exit 1'
  run -0 stop_stale_processes /tmp/ray 6379
  run calls pkill
  ((${#lines[@]} == 1)) || flunk "exited within the grace period, yet: $output"
  [[ ${lines[0]} == "pkill -TERM -u $(id -u) -f "* ]] || flunk "$output"
  : >"$CALL_LOG"
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '[[ $4 == =* ]] && exit 1; echo 4242'
  TOOLKIT_STALE_GRACE=3 run -0 stop_stale_processes /tmp/ray 6379
  assert_output_contains "SGLang processes ignored TERM for 3s: killing them"
  run calls pkill
  [[ ${#lines[@]} == 2 && ${lines[1]} == "pkill -KILL -u $(id -u) -f "* ]] || flunk "$output"
  run calls sleep
  ((${#lines[@]} == 3)) || flunk "sleeps: $output"
}

@test "the SGLang pattern matches SGLang processes and not our script or an editor" {
  local cmdline
  for cmdline in "sglang::scheduler_TP0" "python3 -m sglang.launch_server --model-path /m" \
    "python3 -m sglang_router.launch_router --port 3000"; do
    [[ $cmdline =~ $TOOLKIT_SGLANG_PATTERN ]] || flunk "should match: $cmdline"
  done
  for cmdline in "bash runs/sglang-exp/train.sh" "vim sglang.py" "python3 -m pkill_sglang" "tail sglang::log"; do
    [[ ! $cmdline =~ $TOOLKIT_SGLANG_PATTERN ]] || flunk "should not match: $cmdline"
  done
}

@test "never a broad kill: no pkill without -u, never 'python'" {
  stub pkill
  stub ray
  stub pgrep 'exit 1'
  stop_stale_processes /tmp/ray 6379 2>/dev/null
  run calls pkill
  [[ $output == "pkill -TERM -u $(id -u) "* ]] || flunk "$output"
  refute_output_contains python
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
  stub pkill 'exit 1'
  run -0 stop_stale_processes /tmp/ray 6379
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
