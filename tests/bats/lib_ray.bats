#!/usr/bin/env bats
# templates/lib/ray.sh, sourced directly: token authentication, the run lock, ports, Ray head,
# job submission, the wait for worker GPUs, and the bounded stop on exit, Ctrl-C and TERM.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/lock.sh
  source "$LIB_DIR/lock.sh"
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
source "$LIB_DIR/lock.sh"
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

# wait_for_file FILE: up to 120 s (a ceiling only a hang reaches).
wait_for_file() { # <file>
  local i
  for ((i = 0; i < 2400; i++)); do [[ -e $1 ]] && return 0; /bin/sleep 0.05; done
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
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY # stub_cluster's stand-in credentials: only these two
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
  # "at once": before the 60 s the hanging `ray job stop` would take (a margin no load reaches)
  ((SECONDS < 50)) || flunk "took ${SECONDS}s"
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
  run -4 bash -c "source '$LIB_DIR/common.sh'; source '$LIB_DIR/lock.sh'; source '$LIB_DIR/processes.sh'; source '$LIB_DIR/ray.sh'; install_cleanup_trap; exit 4"
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

@test "the run lock: the kernel's, in the private dir; a live holder is named; released by death, never unlinked" {
  resolve_ray_temp_dir
  [[ $RAY_TEMP_DIR == "$WORK/ray" ]]
  {
    script_prelude
    echo "resolve_ray_temp_dir; acquire_run_lock exp-a; echo held >'$WORK/held'; sleep 30"
  } >"$WORK/holder.sh"
  bash "$WORK/holder.sh" 2>/dev/null &
  local holder=$!
  wait_for_file "$WORK/held"
  local lock
  lock="$TOOLKIT_RUNTIME_DIR/$(lock_slot ray "$WORK/ray").lock"
  [[ $(stat -c '%a %U' "$TOOLKIT_RUNTIME_DIR") == "700 $(id -un)" ]] || flunk "dir: $(stat -c '%a %U' "$TOOLKIT_RUNTIME_DIR")"
  [[ $(cat "$lock") == "$holder exp-a" ]] || flunk "lock: $(cat "$lock")"
  TOOLKIT_LOCK_WAIT=0 run -1 acquire_run_lock exp-b
  assert_output "train.sh: another run uses this node's Ray: PID $holder (EXP_ID exp-a), lock $lock (wait for it to end, stop it with 'kill $holder', or give this run its own RAY_TEMP_DIR and Ray ports)"
  # SIGKILL: no trap runs, the kernel lets go; the file stays (never unlinked)
  kill -KILL "$holder"
  wait "$holder" 2>/dev/null || true
  local inode
  inode=$(stat -c %i "$lock")
  TOOLKIT_LOCK_WAIT=0 acquire_run_lock exp-c
  [[ $(cat "$lock") == "$$ exp-c" && $(stat -c %i "$lock") == "$inode" ]] || flunk "lock: $(cat "$lock")"
  release_run_lock
  [[ -f $lock && $(stat -c %i "$lock") == "$inode" ]] || flunk "the lock file was removed or replaced"
  TOOLKIT_LOCK_WAIT=0 acquire_run_lock exp-d
  release_run_lock
}

@test "an evaluation of this user holds the GPUs: training refused naming it; CUDA_VISIBLE_DEVICES lets it run beside" {
  {
    script_prelude
    echo "CUDA_VISIBLE_DEVICES=6,7 acquire_eval_lock eval-of-exp-a; echo held >'$WORK/held'; sleep 30"
  } >"$WORK/holder.sh"
  bash "$WORK/holder.sh" 2>/dev/null &
  local holder=$!
  wait_for_file "$WORK/held"
  resolve_ray_temp_dir
  TOOLKIT_LOCK_WAIT=0 run -1 acquire_run_lock exp-b
  assert_output "train.sh: evaluation eval-of-exp-a (PID $holder) uses this node's GPUs 6,7 (wait for it to end, or give this run GPUs of its own: CUDA_VISIBLE_DEVICES=0,1,2,3 bin/train ...)"
  # the refused run let go of its own lock: the next one (on other GPUs) takes it
  CUDA_VISIBLE_DEVICES=0,1 TOOLKIT_LOCK_WAIT=0 run -0 acquire_run_lock exp-c
  assert_output "train.sh: training on GPUs 0,1 (CUDA_VISIBLE_DEVICES): not checking for an evaluation here"
  kill -KILL "$holder"
  wait "$holder" 2>/dev/null || true
  TOOLKIT_LOCK_WAIT=0 acquire_run_lock exp-d
  release_run_lock
}

@test "the race: an evaluation and a training run started together (50 trials), never both running" {
  local trial both=0 pids go contender pid
  resolve_ray_temp_dir
  for ((trial = 0; trial < 50; trial++)); do
    mkfifo "$WORK/go.$trial"
    exec {go}<>"$WORK/go.$trial"
    pids=()
    for contender in eval train; do
      (
        read -r _ <"$WORK/go.$trial" || true
        if [[ $contender == eval ]]; then
          acquire_eval_lock "eval-$trial" 2>/dev/null
        else
          TOOLKIT_LOCK_WAIT=0 acquire_run_lock "exp-$trial" 2>/dev/null
        fi
        : >"$WORK/got.$trial.$contender" # refused: the library exited before this line
        exec /bin/sleep 10                # still holding its lock while the other decides
      ) &
      pids+=($!)
    done
    printf 'go\ngo\n' >&"$go"
    exec {go}>&-
    for contender in 0 1; do # each one: running with its lock, or gone (refused)
      pid=${pids[contender]}
      until [[ -e $WORK/got.$trial.eval && $contender == 0 || -e $WORK/got.$trial.train && $contender == 1 ]] ||
        ! kill -0 "$pid" 2>/dev/null; do /bin/sleep 0.01; done
    done
    [[ -e $WORK/got.$trial.eval && -e $WORK/got.$trial.train ]] && both=$((both + 1))
    kill -KILL "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  done
  ((both == 0)) || flunk "$both of 50 trials had an evaluation and a training run on the same GPUs"
}

@test "watch_worker_nodes: the head's node watch ends with its script (SIGKILL runs no trap: no orphan polling Ray)" {
  {
    script_prelude
    echo "cluster_nodes() { echo poll >>'$WORK/polls'; }"
    echo "TOOLKIT_NODE_POLL=0.1 watch_worker_nodes"
    echo "echo \$TOOLKIT_WATCH_PID >'$WORK/watch'"
    echo "while :; do /bin/sleep 0.1; done"
  } >"$WORK/head.sh"
  bash "$WORK/head.sh" 2>/dev/null &
  local head=$! watch i
  wait_for_file "$WORK/watch"
  watch=$(cat "$WORK/watch")
  wait_for_file "$WORK/polls"
  kill -KILL "$head"
  wait "$head" 2>/dev/null || true
  for ((i = 0; i < 600; i++)); do is_live "$watch" || break; /bin/sleep 0.1; done
  if is_live "$watch"; then
    kill "$watch"
    flunk "the node watch ($watch) outlived its script by 60 s"
  fi
}

@test "the run lock is not inherited: a child that outlives the script (ray start --block, the watch) holds nothing" {
  {
    script_prelude
    echo "resolve_ray_temp_dir; acquire_run_lock exp-a"
    echo "(trap '' TERM; exec sleep 30) >/dev/null 2>&1 &"
    echo "echo \$! >'$WORK/child'"
    echo "exec 1>&- 2>&-; kill -KILL \$\$"
  } >"$WORK/holder.sh"
  run bash "$WORK/holder.sh"
  local child
  child=$(cat "$WORK/child")
  is_live "$child" || flunk "the child did not outlive the script"
  TOOLKIT_LOCK_WAIT=0 acquire_run_lock exp-b 2>"$WORK/err" || { kill "$child"; flunk "$(cat "$WORK/err")"; }
  kill "$child"
  release_run_lock
}

@test "the private dir: made 0700; one another user made is refused with the fix, nothing written into it" {
  with_other_user
  local shared rt
  shared=$(mktemp -d /tmp/acs-shared.XXXXXX)
  chmod 1777 "$shared"
  rt="$shared/agentcore-slime-$(id -u)"
  as_other_user mkdir -m 777 "$rt"
  RAY_TEMP_DIR=''
  TOOLKIT_RUNTIME_DIR=$rt run -2 resolve_ray_temp_dir
  assert_output_contains "train.sh: $rt belongs to $OTHER_USER, not to you: another user made it"
  run ls -A "$rt"
  assert_output ""
  # a link planted in its place
  as_other_user rmdir "$rt"
  as_other_user ln -s "$HOME" "$rt"
  TOOLKIT_RUNTIME_DIR=$rt run -2 resolve_ray_temp_dir
  assert_output_contains "$rt is a symbolic link, not a directory of yours"
  # a world-writable parent without the sticky bit is refused too
  chmod 777 "$shared"
  TOOLKIT_RUNTIME_DIR="$shared/other" run -2 resolve_ray_temp_dir
  assert_output_contains "$shared is writable by other users and not sticky (mode 777)"
  rm -rf "$shared"
}

@test "RAY_TEMP_DIR: default in the private dir; too long for Ray's sockets, a link or another user's: refused" {
  RAY_TEMP_DIR=''
  resolve_ray_temp_dir
  [[ $RAY_TEMP_DIR == "$TOOLKIT_RUNTIME_DIR/ray" ]] || flunk "$RAY_TEMP_DIR"
  RAY_TEMP_DIR=/tmp/$(printf 'x%.0s' {1..40})
  run -2 resolve_ray_temp_dir
  assert_output_contains "characters: Ray's unix sockets under it would pass the 107-byte limit"
  ln -s "$HOME" "$WORK/rlink"
  RAY_TEMP_DIR=$WORK/rlink run -2 resolve_ray_temp_dir
  assert_output_contains "RAY_TEMP_DIR $WORK/rlink is a symbolic link, not a directory"
}

@test "start_ray_head and join_ray_cluster give Ray (and all it starts) this run's marker" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray 'echo "${AGENTCORE_SLIME_RUN:-none}" >>"$WORK/markers"; exit 0'
  TOOLKIT_RUN_SLOT=$(lock_slot ray "$WORK/ray")
  start_ray_head 2 2>/dev/null
  [[ $(cat "$WORK/markers") == "$TOOLKIT_RUN_SLOT" ]] || flunk "marker: $(cat "$WORK/markers")"
  [[ ! -v AGENTCORE_SLIME_RUN ]] || flunk "the script itself carries the marker"
}

@test "join.sh: the head's word that its run ended: exit 0, one line, Ray stopped quietly" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '[[ $1 == start ]] && exec sleep 30; exit 0'
  cat >"$WORK/run_end.py" <<PY
import os, sys, time
assert sys.argv[1:3] == ["watch", "10.0.0.1:6390"] and os.getppid() == int(sys.argv[4]), sys.argv
while not os.path.exists("$WORK/ended"): time.sleep(0.1)
PY
  {
    script_prelude
    # the KV watch stands in for Ray's key-value store here (tests/python/ray_real uses the real one)
    echo "TOOLKIT_RUN_END_KV=$WORK/run_end.py"
    echo "TOOLKIT_RUN_SLOT=$(lock_slot ray "$WORK/ray")"
    echo "join_ray_cluster 10.0.0.1:6390 2"
  } >"$WORK/run.sh"
  bash "$WORK/run.sh" 2>"$WORK/err" &
  local pid=$!
  wait_for_file "$WORK/pid"
  touch "$WORK/ended"
  local rc=0
  wait "$pid" || rc=$?
  ((rc == 0)) || flunk "exit status $rc: $(cat "$WORK/err")"
  run cat "$WORK/err"
  assert_output "train.sh: joining the Ray head at 10.0.0.1:6390 with 2 GPUs (temp dir $WORK/ray); Ctrl-C leaves the cluster
train.sh: the head's run ended: this node leaves the cluster"
  run calls pgrep
  assert_output_contains "pgrep -u $(id -u) -f =$WORK/ray/session_"
}

@test "join.sh: this node's Ray stopping without the head's word (the head died) is still an error" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '[[ $1 == start ]] && { sleep 1; echo "raylet: GCS unreachable" >&2; exit 1; }; exit 0'
  echo 'import time; time.sleep(30)' >"$WORK/run_end.py"
  {
    script_prelude
    echo "TOOLKIT_RUN_END_KV=$WORK/run_end.py"
    echo "join_ray_cluster 10.0.0.1:6390 2"
  } >"$WORK/run.sh"
  run -1 bash "$WORK/run.sh"
  assert_output_contains "raylet: GCS unreachable"
  assert_output_contains "this node's Ray stopped without word from the head that its run ended: the head died or this node lost it"
  refute_output_contains "the head's run ended:"
}

@test "a port another process listens on is an error naming the port and its env-file key" {
  local port
  port=$(python3 "$LIB_DIR/sglang_helper.py" free-port) # outside the ephemeral range: nobody is handed it
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

teardown() {
  [[ -z ${OTHER_USER:-} ]] || remove_other_user
}

@test "the race: 100 trials of two simultaneous acquisitions of a dead run's lock, never two holders" {
  local lock trial doubles=0 pids go
  lock="$TOOLKIT_RUNTIME_DIR/$(lock_slot ray "$WORK/ray").lock"
  resolve_ray_temp_dir
  for ((trial = 0; trial < 100; trial++)); do
    echo "999999 dead-exp" >"$lock" # what a run that died left in it
    mkfifo "$WORK/go.$trial"
    exec {go}<>"$WORK/go.$trial" # open both ways: neither the contenders nor we block opening it
    pids=()
    for contender in a b; do
      (
        read -r _ <"$WORK/go.$trial" || true
        if TOOLKIT_LOCK_WAIT=0 take_lock "$lock" "$BASHPID $contender" 2>/dev/null; then
          echo got >>"$WORK/result.$trial"
        else
          echo held >>"$WORK/result.$trial"
        fi
        exec /bin/sleep 10
      ) &
      pids+=($!)
    done
    printf 'go\ngo\n' >&"$go" # one line each: both contenders start at once
    exec {go}>&-
    while (($(wc -l <"$WORK/result.$trial" 2>/dev/null || echo 0) < 2)); do /bin/sleep 0.01; done
    [[ $(grep -c got "$WORK/result.$trial") == 1 ]] || doubles=$((doubles + 1))
    kill -KILL "${pids[@]}"
    wait "${pids[@]}" 2>/dev/null || true
  done
  ((doubles == 0)) || flunk "$doubles of 100 trials had two holders (or none)"
}
