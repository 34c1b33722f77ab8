#!/usr/bin/env bats
# templates/lib/ray.sh, sourced directly: Ray head, job submission, runtime env, cleanup.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/ray.sh
  source "$LIB_DIR/ray.sh"
  stub_cluster
}

@test "start_ray_head starts a head with the GPU count and no usage stats" {
  start_ray_head 4 2>/dev/null
  assert_calls <<<"ray start --head --num-gpus 4 --disable-usage-stats"
  [[ $TOOLKIT_RAY_STARTED == 1 ]]
}

@test "submit_job passes the entrypoint argv exactly and returns the job's status" {
  RAY_JOB_STATUS=5 run -5 submit_job exp-1 '{"env_vars":{}}' python3 /s/train.py --a "b c" '' "\$(x)"
  run job_argv
  assert_output "python3
/s/train.py
--a
b c

\$(x)"
  run calls ray
  assert_output_contains "ray job submit --address=http://127.0.0.1:8265 --submission-id=exp-1 --runtime-env-json=\\{\\\"env_vars\\\":\\{\\}\\} -- python3"
}

@test "runtime_env_json: PYTHONPATH and CUDA_DEVICE_MAX_CONNECTIONS; CUDA vars only when pinned" {
  export CUDA_HOME=/c LD_LIBRARY_PATH='/l:/m "q"'
  run -0 runtime_env_json '/meg:/repo/py thon'
  assert_output '{"env_vars":{"PYTHONPATH":"/meg:/repo/py thon","CUDA_DEVICE_MAX_CONNECTIONS":"1"}}'
  TOOLKIT_CUDA_PINNED=1 run -0 runtime_env_json /p
  assert_output '{"env_vars":{"PYTHONPATH":"/p","CUDA_DEVICE_MAX_CONNECTIONS":"1","CUDA_HOME":"/c","LD_LIBRARY_PATH":"/l:/m \"q\""}}'
  run -0 train_env_vars_json
  assert_output '{"CUDA_HOME": "/c", "LD_LIBRARY_PATH": "/l:/m \"q\""}'
}

@test "export_worker_env exports credentials by name, never printing values" {
  export WANDB_API_KEY=k-zq8W7vK3 AWS_PROFILE=p-zq8W7vK3
  run -0 export_worker_env
  assert_output "train.sh: workers inherit: WANDB_API_KEY AWS_PROFILE"
  export_worker_env 2>/dev/null
  run -0 printenv CUDA_DEVICE_MAX_CONNECTIONS
  assert_output 1
}

@test "TERM while the job runs: the job is stopped, then Ray, exit 143" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == job && $2 == submit ]]; then echo started >"$BATS_TEST_TMPDIR/started"; exec sleep 30; fi
exit 0'
  cat >"$WORK/run.sh" <<SCRIPT
set -euo pipefail
source "$LIB_DIR/common.sh"
source "$LIB_DIR/ray.sh"
install_cleanup_trap
start_ray_head 2
submit_job exp-9 '{}' python3 train.py
SCRIPT
  bash "$WORK/run.sh" 2>"$WORK/err" &
  local pid=$! i
  for ((i = 0; i < 100; i++)); do [[ -e $BATS_TEST_TMPDIR/started ]] && break; /bin/sleep 0.05; done
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  ((rc == 143)) || flunk "exit status $rc"
  run calls ray
  assert_output "ray start --head --num-gpus 2 --disable-usage-stats
ray job submit --address=http://127.0.0.1:8265 --submission-id=exp-9 --runtime-env-json=\\{\\} -- python3 train.py
ray job stop --address=http://127.0.0.1:8265 exp-9
ray stop --force"
  grep -q "caught SIGTERM: stopping the Ray job and Ray" "$WORK/err"
}

@test "Ctrl-C (SIGINT) while the job runs: the job is stopped, then Ray, exit 130" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == job && $2 == submit ]]; then echo started >"$BATS_TEST_TMPDIR/started"; exec sleep 30; fi
exit 0'
  cat >"$WORK/run.sh" <<SCRIPT
set -euo pipefail
echo \$\$ >"$WORK/pid"
source "$LIB_DIR/common.sh"
source "$LIB_DIR/ray.sh"
install_cleanup_trap
start_ray_head 2
submit_job exp-9 '{}' python3 train.py
SCRIPT
  # bats starts background jobs with SIGINT ignored; give the script default handling, as a
  # terminal would (a shell cannot trap a signal that was ignored when it started)
  python3 -c 'import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
sys.exit(subprocess.call(["bash", sys.argv[1]]))' "$WORK/run.sh" 2>"$WORK/err" &
  local pid=$! i
  for ((i = 0; i < 100; i++)); do [[ -e $BATS_TEST_TMPDIR/started ]] && break; /bin/sleep 0.05; done
  kill -INT "$(cat "$WORK/pid")"
  local rc=0
  wait "$pid" || rc=$?
  ((rc == 130)) || flunk "exit status $rc"
  run calls ray
  assert_line "ray job stop --address=http://127.0.0.1:8265 exp-9"
  [[ ${lines[-1]} == "ray stop --force" ]] || flunk "$output"
  grep -q "caught SIGINT: stopping the Ray job and Ray" "$WORK/err"
}

@test "a normal exit stops the Ray head we started and keeps the exit status" {
  cat >"$WORK/run.sh" <<SCRIPT
set -euo pipefail
source "$LIB_DIR/common.sh"
source "$LIB_DIR/ray.sh"
install_cleanup_trap
start_ray_head 2
exit 7
SCRIPT
  run -7 bash "$WORK/run.sh"
  run calls ray
  assert_output "ray start --head --num-gpus 2 --disable-usage-stats
ray stop --force"
}

@test "no Ray started, nothing stopped" {
  run -4 bash -c "source '$LIB_DIR/common.sh'; source '$LIB_DIR/ray.sh'; install_cleanup_trap; exit 4"
  refute_calls
}
