#!/usr/bin/env bats
# templates/lib/common.sh start_logging, sourced directly: the log keeps every attempt and
# survives the signals a scheduler sends.

load ../test_helper
load launcher

_setup() {
  stub_cluster
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == job && $2 == submit ]]; then echo started >"$BATS_TEST_TMPDIR/started"; exec sleep 30; fi
exit 0'
  cat >"$WORK/run.sh" <<SCRIPT
set -euo pipefail
TOOLKIT_PROG=train.sh
source "$LIB_DIR/common.sh"
source "$LIB_DIR/lock.sh"
source "$LIB_DIR/processes.sh"
source "$LIB_DIR/ray.sh"
RAY_TEMP_DIR="$WORK/ray" RAY_PORT=6390 RAY_DASHBOARD_PORT=8266 RAY_CLIENT_SERVER_PORT=10010
RAY_DASHBOARD_AGENT_PORT=52370
start_logging "$WORK/train.log"
install_cleanup_trap
start_ray_head 2
submit_job exp-9 '{}' python3 train.py
SCRIPT
}

# wait_for_job: until the stubbed `ray job submit` runs (120 s: a ceiling only a hang reaches)
wait_for_job() {
  local i
  for ((i = 0; i < 2400; i++)); do [[ -e $BATS_TEST_TMPDIR/started ]] && return; /bin/sleep 0.05; done
  flunk "the job never started"
}

@test "TERM to the whole process group (Slurm, systemd): the log keeps the signal line and the job is stopped" {
  setsid bash "$WORK/run.sh" >/dev/null 2>&1 &
  local pid=$! rc=0
  wait_for_job
  # setsid made the script a process-group leader: signal all of it, tee included
  kill -TERM -- "-$pid"
  wait "$pid" || rc=$?
  ((rc == 143)) || flunk "exit status $rc; log: $(cat "$WORK/train.log"); calls: $(calls)"
  run calls ray
  assert_line "ray job stop --address=http://127.0.0.1:8266 exp-9"
  refute_output_contains "ray stop" # our Ray is stopped by its own processes, never `ray stop`
  grep -q "caught SIGTERM: stopping the Ray job and Ray" "$WORK/train.log" || flunk "$(cat "$WORK/train.log")"
  grep -q "stopped Ray (exit status 143)" "$WORK/train.log" || flunk "$(cat "$WORK/train.log")"
}

@test "each attempt starts with a separator line and a UTC timestamp in the log, not on the terminal" {
  RAY_JOB_STATUS=0 stub_cluster
  run -0 --separate-stderr bash "$WORK/run.sh"
  [[ $stderr != *"====="* ]] || flunk "terminal: $stderr"
  run -0 bash "$WORK/run.sh"
  run grep -c "^===== train.sh: attempt started [0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\}T[0-9:]\{8\}Z (pid [0-9]*) =====$" "$WORK/train.log"
  assert_output 2
  run grep -c "submitting Ray job exp-9" "$WORK/train.log"
  assert_output 2
}
