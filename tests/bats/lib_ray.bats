#!/usr/bin/env bats
# templates/lib/ray.sh, sourced directly: token authentication, the run lock, ports, Ray head,
# job submission, the wait for worker GPUs, and the bounded stop on exit, Ctrl-C and TERM.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/processes.sh
  source "$LIB_DIR/processes.sh"
  # shellcheck source=templates/lib/ray.sh
  source "$LIB_DIR/ray.sh"
  stub_cluster
  ray_node_settings
}

# ray_node_settings: the variables the rendered script sets from the env file.
ray_node_settings() {
  RAY_TEMP_DIR="$WORK/ray" RAY_PORT=6390 RAY_DASHBOARD_PORT=8266 RAY_CLIENT_SERVER_PORT=10010
  RAY_DASHBOARD_AGENT_PORT=52370
}

# script_prelude: the start of a script that runs the library as train.sh does.
script_prelude() {
  cat <<SCRIPT
set -euo pipefail
echo \$\$ >"$WORK/pid"
source "$LIB_DIR/common.sh"
source "$LIB_DIR/processes.sh"
source "$LIB_DIR/ray.sh"
RAY_TEMP_DIR="$WORK/ray" RAY_PORT=6390 RAY_DASHBOARD_PORT=8266 RAY_CLIENT_SERVER_PORT=10010
RAY_DASHBOARD_AGENT_PORT=52370
install_cleanup_trap
SCRIPT
}

# run_with_signals SCRIPT: start SCRIPT in the background with default SIGINT handling, as a
# terminal would (bats starts background jobs with SIGINT ignored, and a shell cannot trap a
# signal that was ignored when it started); its stderr goes to $WORK/err.
run_with_signals() { # <script>
  python3 -c 'import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
sys.exit(subprocess.call(["bash", sys.argv[1]]))' "$1" 2>"$WORK/err" &
  SCRIPT_PID=$!
}

# wait_for_file FILE: up to 5 s.
wait_for_file() { # <file>
  local i
  for ((i = 0; i < 100; i++)); do [[ -e $1 ]] && return 0; /bin/sleep 0.05; done
  flunk "no $1"
}

@test "start_ray_head: GPUs declared, this run's temp dir and ports, no usage stats" {
  start_ray_head 4 2>/dev/null
  assert_calls <<<"ray start --head --num-gpus 4 --disable-usage-stats --temp-dir $WORK/ray --port 6390 --dashboard-port 8266 --ray-client-server-port 10010 --dashboard-agent-listen-port 52370"
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
  assert_output_contains "ray job submit --address=http://127.0.0.1:8266 --submission-id=exp-1 --runtime-env-json=\\{\\\"env_vars\\\":\\{\\}\\} -- python3"
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

@test "TERM while the job runs: every ray command authenticates; the job is stopped, no 'ray stop', exit 143" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
echo "$1 ${RAY_AUTH_MODE:-none} ${RAY_AUTH_TOKEN_PATH:-none} ${RAY_AUTH_TOKEN:-no-env-token}" >>"$ENV_LOG"
if [[ $1 == job && $2 == submit ]]; then echo started >"$BATS_TEST_TMPDIR/started"; exec sleep 30; fi
exit 0'
  {
    script_prelude
    echo "export RAY_AUTH_TOKEN=stale-token-zq8W"
    echo "setup_ray_auth '$HOME/.ray/auth_token' 1"
    echo "start_ray_head 2"
    echo "submit_job exp-9 '{}' python3 train.py"
  } >"$WORK/run.sh"
  run_with_signals "$WORK/run.sh"
  wait_for_file "$BATS_TEST_TMPDIR/started"
  kill -TERM "$(cat "$WORK/pid")"
  local rc=0
  wait "$SCRIPT_PID" || rc=$?
  ((rc == 143)) || flunk "exit status $rc: $(cat "$WORK/err")"
  run calls ray
  assert_output "ray get-auth-token --help
ray start --head --num-gpus 2 --disable-usage-stats --temp-dir $WORK/ray --port 6390 --dashboard-port 8266 --ray-client-server-port 10010 --dashboard-agent-listen-port 52370
ray job submit --address=http://127.0.0.1:8266 --submission-id=exp-9 --runtime-env-json=\\{\\} -- python3 train.py
ray job stop --address=http://127.0.0.1:8266 exp-9"
  run cat "$ENV_LOG"
  assert_output "get-auth-token none none no-env-token
start token $HOME/.ray/auth_token no-env-token
job token $HOME/.ray/auth_token no-env-token
job token $HOME/.ray/auth_token no-env-token"
  grep -q "caught SIGTERM: stopping the Ray job and Ray" "$WORK/err"
  grep -q "stopped Ray (exit status 143)" "$WORK/err"
}

@test "Ctrl-C (SIGINT) while the job runs: the job is stopped, then Ray, exit 130" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == job && $2 == submit ]]; then echo started >"$BATS_TEST_TMPDIR/started"; exec sleep 30; fi
exit 0'
  {
    script_prelude
    echo "start_ray_head 2"
    echo "submit_job exp-9 '{}' python3 train.py"
  } >"$WORK/run.sh"
  run_with_signals "$WORK/run.sh"
  wait_for_file "$BATS_TEST_TMPDIR/started"
  kill -INT "$(cat "$WORK/pid")"
  local rc=0
  wait "$SCRIPT_PID" || rc=$?
  ((rc == 130)) || flunk "exit status $rc"
  run calls ray
  assert_line "ray job stop --address=http://127.0.0.1:8266 exp-9"
  refute_output_contains "ray stop"
  # our Ray is found by this node's pattern, after the job stop
  run calls pgrep
  assert_output_contains "pgrep -u $(id -u) -f =$WORK/ray/session_"
  grep -q "caught SIGINT: stopping the Ray job and Ray" "$WORK/err"
}

@test "a second Ctrl-C while the job stop hangs exits at once with 130" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == job && $2 == submit ]]; then echo started >"$BATS_TEST_TMPDIR/started"; exec sleep 60; fi
if [[ $1 == job && $2 == stop ]]; then echo stopping >"$BATS_TEST_TMPDIR/stopping"; exec sleep 60; fi
exit 0'
  {
    script_prelude
    echo "start_ray_head 2"
    echo "submit_job exp-9 '{}' python3 train.py"
  } >"$WORK/run.sh"
  export TOOLKIT_JOB_STOP_TIMEOUT=60
  run_with_signals "$WORK/run.sh"
  wait_for_file "$BATS_TEST_TMPDIR/started"
  kill -INT "$(cat "$WORK/pid")"
  wait_for_file "$BATS_TEST_TMPDIR/stopping"
  SECONDS=0
  kill -INT "$(cat "$WORK/pid")"
  local rc=0
  wait "$SCRIPT_PID" || rc=$?
  ((rc == 130)) || flunk "exit status $rc"
  # "at once": well before the 60 s the hanging `ray job stop` would take
  ((SECONDS < 20)) || flunk "took ${SECONDS}s"
  grep -q "second SIGINT: killing this run's Ray processes now" "$WORK/err"
}

@test "a normal exit stops the Ray head we started (never 'ray stop') and keeps the exit status" {
  {
    script_prelude
    echo "start_ray_head 2"
    echo "exit 7"
  } >"$WORK/run.sh"
  run -7 bash "$WORK/run.sh"
  assert_output_contains "stopped Ray (exit status 7)"
  run calls ray
  assert_output "ray start --head --num-gpus 2 --disable-usage-stats --temp-dir $WORK/ray --port 6390 --dashboard-port 8266 --ray-client-server-port 10010 --dashboard-agent-listen-port 52370"
  run calls pgrep
  assert_output_contains "pgrep -u $(id -u) -f =$WORK/ray/session_"
}

@test "no Ray started, nothing stopped" {
  run -4 bash -c "source '$LIB_DIR/common.sh'; source '$LIB_DIR/processes.sh'; source '$LIB_DIR/ray.sh'; install_cleanup_trap; exit 4"
  refute_calls
}

@test "the head creates a token (0600, never printed) and reuses it; RAY_AUTH_* exported" {
  local file="$HOME/.ray/auth_token" token
  run -0 setup_ray_auth "$file" 1
  assert_output "train.sh: Ray token authentication: created $file (mode 0600)"
  token=$(cat "$file")
  [[ $token =~ ^[0-9a-f]{64}$ ]] || flunk "token: ${#token} chars"
  [[ $(stat -c %a "$file") == 600 ]] || flunk "mode $(stat -c %a "$file")"
  chmod 644 "$file"
  setup_ray_auth "$file" 1 2>"$WORK/err"
  grep -q "using $file" "$WORK/err"
  [[ $(cat "$file") == "$token" && $(stat -c %a "$file") == 600 ]] || flunk "not reused as 0600"
  [[ $RAY_AUTH_MODE == token && $RAY_AUTH_TOKEN_PATH == "$file" ]] || flunk "env: $RAY_AUTH_MODE $RAY_AUTH_TOKEN_PATH"
  run calls
  refute_output_contains "$token"
}

@test "a worker never creates a token: a missing one says how to copy the head's" {
  run -1 setup_ray_auth "$HOME/.ray/auth_token" 0
  assert_output_contains "no Ray token at $HOME/.ray/auth_token (copy the head's token file here, mode 0600"
  [[ ! -e $HOME/.ray/auth_token ]]
}

@test "the run lock: a live holder is refused with its PID and EXP_ID; a dead one is taken over" {
  local lock="$WORK/ray/agentcore-slime-run.lock"
  sleep 30 &
  local holder=$!
  mkdir -p "$WORK/ray"
  echo "$holder exp-a" >"$lock"
  run -1 acquire_run_lock "$lock" exp-b
  assert_output_contains "another run uses this node's Ray: PID $holder (EXP_ID exp-a), lock $lock"
  kill "$holder"
  wait "$holder" 2>/dev/null || true
  acquire_run_lock "$lock" exp-b 2>"$WORK/err"
  grep -q "taking over the lock of a run that is gone (PID $holder, EXP_ID exp-a)" "$WORK/err"
  [[ $(cat "$lock") == "$$ exp-b" ]] || flunk "lock: $(cat "$lock")"
  release_run_lock
  [[ ! -e $lock ]]
  acquire_run_lock "$lock" exp-c
  echo "1 someone-else" >"$lock"
  release_run_lock
  [[ -e $lock ]] || flunk "released a lock it no longer held"
}

@test "a port another process listens on is an error naming the port and its env-file key" {
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); open(sys.argv[2], "w").close(); time.sleep(30)' \
    "$port" "$WORK/listening" &
  local holder=$!
  wait_for_file "$WORK/listening"
  run -1 check_ports_free RAY_PORT=0 RAY_DASHBOARD_PORT="$port"
  kill "$holder"
  assert_output "train.sh: ports in use by another process (another user's Ray?): $port (RAY_DASHBOARD_PORT) (choose free ones with these keys in the env file)"
}

# nodes_stub JSON: `ray list nodes` answers JSON.
nodes_stub() { # <json>
  printf '%s' "$1" >"$WORK/nodes.json"
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '[[ $1 == list ]] && cat "$WORK/nodes.json"; exit 0'
}

@test "wait_for_gpus: done when NUM_NODES x NUM_GPUS GPUs are alive; a timeout names who joined" {
  nodes_stub '[{"node_id": "h1", "node_ip": "10.0.0.1", "is_head_node": true, "state": "ALIVE", "resources_total": {"GPU": 8.0}},
{"node_id": "w1", "node_ip": "10.0.0.2", "is_head_node": false, "state": "DEAD", "resources_total": {"GPU": 8.0}}]'
  run -1 wait_for_gpus 3 8 0
  assert_output_contains "JOIN_TIMEOUT: after 0 s, 1 of 3 nodes (8 of 24 GPUs) joined: 10.0.0.1 (head, 8 GPUs); missing: 2 node(s) with 8 GPUs each"
  run calls ray
  assert_output "ray list nodes --address=http://127.0.0.1:8266 --format=json --limit=10000"
  nodes_stub '[{"node_id": "h1", "node_ip": "10.0.0.1", "is_head_node": true, "state": "ALIVE", "resources_total": {"GPU": 8.0}},
{"node_id": "w1", "node_ip": "10.0.0.2", "is_head_node": false, "state": "ALIVE", "resources_total": {"GPU": 8.0}}]'
  run -0 wait_for_gpus 2 8 0
  assert_output "train.sh: 2 nodes with 16 GPUs joined: 10.0.0.1 (head, 8 GPUs), 10.0.0.2 (worker, 8 GPUs)"
}

@test "print_join_command: the one command for each worker, with the head's address" {
  nodes_stub '[{"node_id": "h1", "node_ip": "10.0.0.1", "is_head_node": true, "state": "ALIVE", "resources_total": {"GPU": 8.0}}]'
  JOIN_TIMEOUT=600
  run -0 print_join_command "/runs/my exp/join.sh" 3
  assert_output "train.sh: waiting up to 600s for 2 worker node(s); on each worker run:
train.sh:   bash /runs/my\\ exp/join.sh 10.0.0.1:6390"
}
