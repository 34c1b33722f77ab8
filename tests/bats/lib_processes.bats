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

@test "stop_stale_processes: this user's SGLang, then ray stop --force, then a check for raylet/gcs_server" {
  stub pkill 'exit 1'
  stub ray
  stub pgrep 'exit 1'
  run -0 stop_stale_processes
  local uid
  uid=$(id -u)
  assert_calls <<CALLS
pkill -TERM -u $uid -f \^sglang::\|sglang\\\\.launch_server\|sglang_router\\\\.launch
ray stop --force
pgrep -u $uid -x raylet
pgrep -u $uid -x gcs_server
CALLS
}

@test "SGLang processes get TERM and a grace period; the ones that ignore it get KILL" {
  stub pkill
  stub ray
  # pgrep -f (SGLang still there) answers twice with a PID; pgrep -x (raylet) finds nothing
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '[[ $3 == -x ]] && exit 1; n=$(grep -c "^pgrep .* -f " "$CALL_LOG"); ((n <= 2)) && echo 4242 && exit 0; exit 1'
  run -0 stop_stale_processes
  run calls pkill
  ((${#lines[@]} == 1)) || flunk "exited within the grace period, yet: $output"
  [[ ${lines[0]} == "pkill -TERM -u $(id -u) -f "* ]] || flunk "$output"
  : >"$CALL_LOG"
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '[[ $3 == -x ]] && exit 1; echo 4242'
  TOOLKIT_STALE_GRACE=3 run -0 stop_stale_processes
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

@test "a raylet that survives is a clear error naming its PIDs, after a bounded wait" {
  stub pkill
  stub ray
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '[[ $3 == -f ]] && exit 1; [[ $4 == raylet ]] && printf "4242\n4343\n"; [[ $4 == gcs_server ]] && echo 4444'
  TOOLKIT_STALE_CHECKS=3 run -1 stop_stale_processes
  assert_output_contains "Ray processes of this user survived 'ray stop --force' (PIDs: 4242 4343 4444)"
  run calls sleep
  ((${#lines[@]} == 3)) || flunk "sleeps: $output"
}

@test "processes that exit after a moment are waited for" {
  stub pkill
  stub ray
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub pgrep '[[ $3 == -f ]] && exit 1; n=$(grep -c "^pgrep .* -x raylet" "$CALL_LOG"); ((n >= 3)) && exit 1; echo 4242'
  run -0 stop_stale_processes
  run grep -c "^pgrep .* -x raylet" "$CALL_LOG"
  assert_output 3
}

@test "never a broad kill: no pkill without -u, never 'python'" {
  stub pkill
  stub ray
  stub pgrep 'exit 1'
  stop_stale_processes 2>/dev/null
  run calls pkill
  [[ $output == "pkill -TERM -u $(id -u) "* ]] || flunk "$output"
  refute_output_contains python
}

@test "ray_daemon_pids finds raylet and gcs_server by exact name with the real pgrep, and it warns about nothing" {
  local name pids=()
  for name in raylet gcs_server raylet-other; do
    cp "$(PATH=/usr/bin:/bin command -v sleep)" "$BATS_TEST_TMPDIR/$name"
    "$BATS_TEST_TMPDIR/$name" 30 &
    pids+=("$!")
  done
  run --separate-stderr ray_daemon_pids "$(id -u)"
  kill "${pids[@]}"
  [[ -z $stderr ]] || flunk "pgrep said: $stderr"
  # other sessions on this machine may run Ray too: look for ours only
  assert_line "${pids[0]}"
  assert_line "${pids[1]}"
  refute_line "${pids[2]}"
}
