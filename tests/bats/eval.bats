#!/usr/bin/env bats
# bin/eval end to end: validation, rendering, and the rendered eval.sh running a real stand-in of
# `python3 -m sglang.launch_server` (tests/python/fakes/sglang_shim: the scripted SGLang protocol
# on --port, plus one child process like SGLang's scheduler) in its variants: healthy, never
# healthy, dying mid-run, ignoring TERM. The evaluation module itself is stubbed here (python3
# -m agentcore_slime.evaluate records its argv and exits as told); tests/python/e2e runs it for
# real. Beside it run real stand-ins of a stale server of an earlier evaluation, a training
# run's SGLang and an unmarked one: only the first may be stopped.

load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  write_env "$WORK/exp.env" "$WORK/install" "VAL_DATA_PATH='$WORK/install/data/gsm8k_test.jsonl'" \
    "NUM_GPUS=4" "EVAL_HEALTH_TIMEOUT=60" "SGLANG_DATA_PARALLEL_SIZE=1"
  RUN_DIR="$TOOLKIT_RUNS_DIR/bats-exp"
  EVAL="$REPO_ROOT/bin/eval"
  export PYTHONPATH="$REPO_ROOT/tests/python/fakes/sglang_shim:$REPO_ROOT/tests/python"
  export FAKE_SGLANG_PIDS="$BATS_TEST_TMPDIR/server.pids" FAKE_SGLANG_ARGV="$BATS_TEST_TMPDIR/server.argv"
  export TOOLKIT_SERVER_GRACE=2
  stub nvidia-smi # a GPU node (bin/eval looks it up, never calls it here)
  export TOOLKIT_RUNTIME_DIR="$BATS_TEST_TMPDIR/rt"
  start_stale_processes
  stub_evaluation
}

_teardown_pids() {
  local pid
  [[ -f $FAKE_SGLANG_PIDS ]] || return 0
  while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$FAKE_SGLANG_PIDS"
}

teardown() {
  _teardown_pids
  local pid
  for pid in "${STALE:-}" "${TRAINING:-}" "${UNMARKED:-}"; do
    [[ -z $pid ]] || { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null || true
  done
}

# start_stale_processes: real stand-ins of what may run beside an evaluation: this user's
# stale server of an earlier evaluation of these GPUs (its marker: stopped), a training run's
# SGLang scheduler (another marker: left alone) and an unmarked `python3 -m
# sglang.launch_server` of this user (left alone). Their PIDs: $STALE, $TRAINING, $UNMARKED.
start_stale_processes() {
  local eval_marker train_marker
  eval_marker="AGENTCORE_SLIME_RUN=$(bash -c "source '$LIB_DIR/lock.sh'; lock_slot eval '$TOOLKIT_RUNTIME_DIR all'")"
  train_marker="AGENTCORE_SLIME_RUN=$(bash -c "source '$LIB_DIR/lock.sh'; lock_slot ray /tmp/ray-t")"
  env "$eval_marker" bash -c 'exec -a "python3 -m sglang.launch_server --model-path /old" /bin/sleep 60' >/dev/null 2>&1 &
  STALE=$!
  env "$train_marker" bash -c 'exec -a sglang::scheduler_TP0 /bin/sleep 60' >/dev/null 2>&1 &
  TRAINING=$!
  bash -c 'exec -a "python3 -m sglang.launch_server --model-path /theirs" /bin/sleep 60' >/dev/null 2>&1 &
  UNMARKED=$!
  local pid i
  for pid in "$STALE" "$TRAINING" "$UNMARKED"; do
    for ((i = 0; i < 2400; i++)); do grep -q sglang "/proc/$pid/cmdline" 2>/dev/null && break; /bin/sleep 0.05; done
  done
}

# stub_evaluation: `python3 -m agentcore_slime.evaluate ...` records its argv as one
# "evaluate ..." line and its PYTHONPATH, sleeps FAKE_EVAL_SECONDS and exits FAKE_EVAL_STATUS;
# any other python3 call runs the real python3.
stub_evaluation() {
  cat >"$STUB_DIR/python3" <<STUB
#!/usr/bin/env bash
if [[ \${1:-} == -m && \${2:-} == agentcore_slime.evaluate ]]; then
  { printf 'evaluate'; printf ' %q' "\${@:3}"; printf '\n'; } >>"\$CALL_LOG"
  printf '%s\n' "\$PYTHONPATH" >"\$BATS_TEST_TMPDIR/eval.pythonpath"
  echo \$\$ >"\$BATS_TEST_TMPDIR/eval.pid"
  sleep "\${FAKE_EVAL_SECONDS:-0}"
  exit "\${FAKE_EVAL_STATUS:-0}"
fi
exec "$TEST_PYTHON_DIR/python3" "\$@"
STUB
  chmod +x "$STUB_DIR/python3"
}

# alive PID: the process exists and is not a zombie.
alive() { # <pid>
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $stat != Z* ]]
}

# assert_server_stopped: the server and its child process are gone.
assert_server_stopped() {
  local pid count=0
  [[ -s $FAKE_SGLANG_PIDS ]] || flunk "the server never started"
  while read -r pid; do
    count=$((count + 1))
    ! alive "$pid" || flunk "server process $pid is still running"
  done <"$FAKE_SGLANG_PIDS"
  ((count == 2)) || flunk "expected the server and its child, got $count PIDs"
}

# assert_only_own_signalled: the stale-process cleanup stopped the earlier evaluation's server
# only: never training's SGLang or an unmarked one.
assert_only_own_signalled() {
  ! alive "$STALE" || flunk "the earlier evaluation's server was not stopped"
  alive "$TRAINING" || flunk "a training run's SGLang was stopped"
  alive "$UNMARKED" || flunk "an unmarked SGLang was stopped"
}

@test "--help prints the header; no argument prints the usage line on stderr, exit 2" {
  run -0 "$EVAL" --help
  assert_line "Usage: bin/eval [--dry-run] [--checkpoint DIR] [--limit N] [--set KEY=VALUE]... ENV_FILE"
  run -2 --separate-stderr "$EVAL"
  [[ -z $output && $stderr == "Usage: bin/eval "* ]] || flunk "stderr: $stderr"
  [[ $stderr == *$'\n       bin/eval --rehearse '* ]] || flunk "no --rehearse in: $stderr"
  refute_calls
}

@test "a healthy server: evaluation with the server's URL, exit 0, server and its child stopped" {
  mkdir -p "$WORK/ckpt"
  echo '{}' >"$WORK/ckpt/config.json"
  sleep 60 &
  local bystander=$!
  run -0 "$EVAL" --checkpoint "$WORK/ckpt" --limit 2 --set EVAL_TP_SIZE=4 "$WORK/exp.env"
  assert_output_contains "the SGLang server is healthy"
  assert_output_contains "stopped the SGLang server (process group"
  alive "$bystander" || flunk "a process that is not the server's was stopped"
  kill "$bystander"
  assert_server_stopped
  assert_only_own_signalled
  # the server got the checkpoint and the TP size; the evaluation got the server's URL
  run cat "$FAKE_SGLANG_ARGV"
  [[ ${lines[0]} == --model-path && ${lines[1]} == "$WORK/ckpt" && ${lines[2]} == --tp-size && ${lines[3]} == 4 ]] ||
    flunk "$output"
  local port=${lines[-1]}
  run calls evaluate
  ((${#lines[@]} == 1)) || flunk "$output"
  assert_output_contains "--config $RUN_DIR/toolkit.yaml --model-dir $WORK/ckpt --checkpoint $WORK/ckpt"
  assert_output_contains "--data $WORK/install/data/gsm8k_test.jsonl --n-samples 1 --temperature 0.0"
  assert_output_contains "--limit 2 --engine-url http://127.0.0.1:$port --out-dir $RUN_DIR/eval/"
  [[ $(cat "$BATS_TEST_TMPDIR/eval.pythonpath") == "$REPO_ROOT/python:$PYTHONPATH" ]]
  grep -q "exit status 0" "$RUN_DIR/eval.log"
  [[ -f $RUN_DIR/toolkit.yaml && -x $RUN_DIR/eval.sh ]]
}

@test "the evaluation's exit status is the script's; the server is stopped" {
  FAKE_EVAL_STATUS=1 run -1 "$EVAL" "$WORK/exp.env"
  assert_output_contains "the SGLang server is healthy"
  assert_output_contains "exit status 1"
  run calls evaluate
  ((${#lines[@]} == 1)) || flunk "evaluation calls: $output"
  assert_server_stopped
}

@test "a server that never becomes healthy: timeout message with the log tail, exit 1, stopped" {
  # The 3 s deadline runs from the server's start, which on a loaded machine can pass before the
  # stand-in has logged a line. So each health poll (python3 sglang_helper.py ready, which eval.sh
  # runs before it looks at the deadline) first waits for that event: the stand-in touches
  # FAKE_SGLANG_LOGGED after its first loading line (120 s only catches a hang). The deadline
  # then passes after the line is in the log, however slow the machine.
  export FAKE_SGLANG_LOGGED="$BATS_TEST_TMPDIR/server.logged"
  mv "$STUB_DIR/python3" "$STUB_DIR/python3-evaluation"
  cat >"$STUB_DIR/python3" <<'STUB'
#!/usr/bin/env bash
if [[ ${1:-} == */sglang_helper.py && ${2:-} == ready ]]; then
  for ((i = 0; i < 1200; i++)); do [[ -e $FAKE_SGLANG_LOGGED ]] && break; /bin/sleep 0.1; done
fi
exec "${0%/*}/python3-evaluation" "$@"
STUB
  chmod +x "$STUB_DIR/python3"
  FAKE_SGLANG_MODE=never_healthy run -1 "$EVAL" --set EVAL_HEALTH_TIMEOUT=3 "$WORK/exp.env"
  assert_output_contains "the SGLang server was not healthy after 3s (raise EVAL_HEALTH_TIMEOUT"
  assert_output_contains "  | fake sglang: still loading weights ..."
  assert_server_stopped
  run calls evaluate
  [[ -z $output ]] || flunk "the evaluation ran: $output"
}

@test "a server that dies during the evaluation: the evaluation is stopped, log tail, exit 1" {
  # it dies once the evaluation has started (its stub writes eval.pid): an event, not a delay a
  # loaded machine could outlast before the server is even found healthy
  FAKE_SGLANG_MODE=dies FAKE_SGLANG_DIE_WHEN="$BATS_TEST_TMPDIR/eval.pid" FAKE_EVAL_SECONDS=60 \
    run -1 "$EVAL" "$WORK/exp.env"
  assert_output_contains "the SGLang server exited with status 3 during the evaluation"
  assert_output_contains "  | fake sglang: scheduler crashed (scripted): exiting with status 3"
  ! alive "$(cat "$BATS_TEST_TMPDIR/eval.pid")" || flunk "the evaluation still runs"
  assert_server_stopped
}

@test "a server that ignores TERM is killed after TOOLKIT_SERVER_GRACE, with its whole group" {
  FAKE_SGLANG_MODE=ignore_term run -0 "$EVAL" "$WORK/exp.env"
  assert_output_contains "the SGLang server ignored TERM for 2s: killing its process group"
  assert_server_stopped
}

@test "TERM or Ctrl-C during the evaluation: exit 143/130, evaluation and server stopped" {
  local signal status pid
  for signal in TERM INT; do
    rm -f "$FAKE_SGLANG_PIDS" "$BATS_TEST_TMPDIR/eval.pid"
    { kill -KILL "$TRAINING" "$UNMARKED" && wait "$TRAINING" "$UNMARKED"; } 2>/dev/null || true
    start_stale_processes
    # in a process group of its own, as a terminal's foreground job (job control on for the fork)
    set -m
    FAKE_EVAL_SECONDS=60 bash "$EVAL" "$WORK/exp.env" >"$BATS_TEST_TMPDIR/out" 2>&1 &
    pid=$!
    set +m
    for _ in $(seq 300); do [[ -s $BATS_TEST_TMPDIR/eval.pid ]] && break; command sleep 0.2; done
    [[ -s $BATS_TEST_TMPDIR/eval.pid ]] || flunk "the evaluation never started: $(cat "$BATS_TEST_TMPDIR/out")"
    # Ctrl-C signals the terminal's foreground process group (bin/eval execs into eval.sh, so
    # $pid is the script and its group; the server and the evaluation run in groups of their own
    # and are stopped by the script's trap); TERM goes to the script
    if [[ $signal == INT ]]; then kill -INT -- "-$pid"; else kill -TERM "$pid"; fi
    status=0
    wait "$pid" || status=$?
    [[ $signal == TERM && $status == 143 || $signal == INT && $status == 130 ]] ||
      flunk "SIG$signal: exit status $status" "$(cat "$BATS_TEST_TMPDIR/out")"
    grep -q "caught SIG$signal: stopping the evaluation and the SGLang server" "$BATS_TEST_TMPDIR/out"
    assert_server_stopped
    assert_only_own_signalled
  done
}

@test "--dry-run prints the server command and the evaluation command; runs nothing, writes nothing" {
  # a dry run used to leave a $TMPDIR/toolkit-<EXP_ID>-eval-* directory behind on every call
  local tmp="$BATS_TEST_TMPDIR/tmp"
  mkdir "$tmp"
  TMPDIR=$tmp run -0 --separate-stderr "$EVAL" --dry-run --limit 5 --set "EVAL_SGLANG_FLAGS=--attention-backend fa3" "$WORK/exp.env"
  ((${#lines[@]} == 2)) || flunk "$output"
  assert_line "python3 -m sglang.launch_server --model-path $WORK/install/model --tp-size 2 --host 127.0.0.1 --mem-fraction-static 0.7 --log-level warning --attention-backend fa3 --base-gpu-id 0 --port \$port"
  # the paths are the ones a real run uses (runs/<EXP_ID>), not a directory that is gone
  [[ ${lines[1]} == "python3 -m agentcore_slime.evaluate --config $RUN_DIR/toolkit.yaml --model-dir $WORK/install/model "*" --limit 5 --engine-url http://127.0.0.1:\$port --out-dir "* ]] ||
    flunk "${lines[1]}"
  # the hint repeats the whole invocation, without --dry-run
  [[ $stderr == *"bin/eval: dry run: nothing written; bin/eval --limit 5 --set 'EVAL_SGLANG_FLAGS=--attention-backend fa3' $WORK/exp.env writes $RUN_DIR/eval.sh and runs these 2 commands:"* ]] ||
    flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR && ! -e $FAKE_SGLANG_PIDS ]]
  [[ -z $(ls -A "$tmp") ]] || flunk "left behind: $(ls -A "$tmp")"
}

@test "--dry-run with SGLANG_DATA_PARALLEL_SIZE unset: engines x TP fill NUM_GPUS, no router" {
  write_env "$WORK/all.env" "$WORK/install" "VAL_DATA_PATH='$WORK/install/data/gsm8k_test.jsonl'" "NUM_GPUS=4"
  run -0 --separate-stderr "$EVAL" --dry-run --set EVAL_TP_SIZE=1 "$WORK/all.env"
  [[ $stderr == *"bin/eval: plan: 4 engines x TP 1 = 4 of NUM_GPUS=4 GPUs, no router: the gateway keeps a session on one engine"* ]] ||
    flunk "$stderr"
  ((${#lines[@]} == 2)) || flunk "$output" # no sglang_router line: nothing another user could join
  [[ ${lines[1]} == *" --engine-url http://127.0.0.1:\$port_0,http://127.0.0.1:\$port_1,http://127.0.0.1:\$port_2,http://127.0.0.1:\$port_3 --out-dir "* ]] ||
    flunk "${lines[1]}"
  run -2 --separate-stderr "$EVAL" --dry-run --set SGLANG_DATA_PARALLEL_SIZE=3 "$WORK/all.env"
  [[ $stderr == "bin/eval: SGLANG_DATA_PARALLEL_SIZE=3 engines x EVAL_TP_SIZE=2 GPUs is more than the node's NUM_GPUS=4"* ]] ||
    flunk "$stderr"
  refute_calls
}

@test "bad input is refused before anything runs (exit 2), same messages as bin/train" {
  write_env "$WORK/noval.env" "$WORK/install"
  run -2 --separate-stderr "$EVAL" "$WORK/noval.env"
  [[ $stderr == "bin/eval: VAL_DATA_PATH is not set: bin/eval evaluates on the validation JSONL"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$EVAL" --set EVAL_TP_SIZE=8 "$WORK/exp.env"
  [[ $stderr == "bin/eval: EVAL_TP_SIZE=8 is more than the node's NUM_GPUS=4"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$EVAL" --set NUM_GPU=2 "$WORK/exp.env"
  [[ $stderr == "bin/eval: --set: unknown key NUM_GPU (did you mean NUM_GPUS?)" ]] || flunk "$stderr"
  run -2 --separate-stderr "$EVAL" --checkpoint "$WORK/nowhere" "$WORK/exp.env"
  [[ $stderr == "bin/eval: $WORK/nowhere is not an HF model directory (no config.json)"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$EVAL" --limit 0 "$WORK/exp.env"
  [[ $stderr == "bin/eval: --limit 0 must be at least 1"* ]] || flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "bin/train --variant eval points to bin/eval" {
  run -2 --separate-stderr "$REPO_ROOT/bin/train" --variant eval "$WORK/exp.env"
  [[ $stderr == *"bin/eval ENV_FILE [--checkpoint DIR] [--limit N]"* ]] || flunk "$stderr"
}

@test "stop_group signals a process group only while its leader is the process we started" {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/sglang.sh
  source "$LIB_DIR/sglang.sh"
  set -m
  sleep 60 &
  local pid=$! start
  set +m
  start=$(process_start_time "$pid")
  [[ -n $start ]]
  # the same number, but another start time: a group that reused the number of ours
  stop_group "$pid" "$((start + 1))" "the test group"
  alive "$pid" || flunk "a group that is not ours was signalled"
  stop_group "$pid" "$start" "the test group"
  ! alive "$pid" || flunk "our group is still running"
}

# hold_training_lock: a training run's lock of this user held by a background script.
hold_training_lock() {
  cat >"$WORK/holder.sh" <<SCRIPT
set -euo pipefail
source "$LIB_DIR/common.sh"; source "$LIB_DIR/lock.sh"; source "$LIB_DIR/processes.sh"; source "$LIB_DIR/ray.sh"
RAY_TEMP_DIR="$WORK/ray"
resolve_ray_temp_dir
acquire_run_lock train-exp
touch "$WORK/held"
exec sleep 60
SCRIPT
  bash "$WORK/holder.sh" 2>"$WORK/holder.err" &
  HOLDER=$!
  local i
  for ((i = 0; i < 2400; i++)); do [[ -e $WORK/held ]] && break; /bin/sleep 0.05; done
  [[ -e $WORK/held ]] || flunk "no training lock: $(cat "$WORK/holder.err")"
}

@test "a training run of this user holds the GPUs: refused naming it, before anything is stopped or started" {
  hold_training_lock
  run -1 "$EVAL" "$WORK/exp.env"
  kill "$HOLDER"
  assert_output_contains "training run train-exp (PID $HOLDER) uses this node's GPUs (wait for it to end, or give this evaluation GPUs of its own: CUDA_VISIBLE_DEVICES="
  alive "$STALE" || flunk "something was stopped before the refusal"
  [[ ! -s $FAKE_SGLANG_PIDS ]] || flunk "a server was started"
}

@test "CUDA_VISIBLE_DEVICES names the GPUs: the evaluation runs beside training, with its own marker" {
  hold_training_lock
  CUDA_VISIBLE_DEVICES=6,7 run -0 "$EVAL" --limit 1 "$WORK/exp.env"
  assert_output_contains "evaluating on GPUs 6,7 (CUDA_VISIBLE_DEVICES): not checking for a training run here"
  alive "$HOLDER" || flunk "the training run was disturbed"
  kill "$HOLDER"
  # the stale server of an evaluation of all GPUs is another lock's: left alone too
  alive "$STALE" || flunk "another evaluation's server was stopped"
  alive "$TRAINING" || flunk "training's SGLang was stopped"
  assert_server_stopped
}

@test "CUDA_VISIBLE_DEVICES too few for the engines: refused (exit 2) before any server starts" {
  CUDA_VISIBLE_DEVICES=6 run -2 "$EVAL" --limit 1 "$WORK/exp.env"
  assert_output_contains "CUDA_VISIBLE_DEVICES=6 has 1 GPU(s), too few for 1 engine(s) x EVAL_TP_SIZE=2"
  [[ ! -e $FAKE_SGLANG_PIDS ]] || flunk "a server started"
  run calls evaluate
  [[ -z $output ]] || flunk "the evaluation ran: $output"
}

@test "a machine without GPUs: said before anything starts, with the rehearsal to run instead" {
  rm "$STUB_DIR/nvidia-smi"
  PATH="$STUB_DIR:$REPO_ROOT/bin:$TEST_PYTHON_DIR:/usr/bin:/bin" \
    run -2 --separate-stderr "$EVAL" --limit 8 "$WORK/exp.env"
  [[ $stderr == "bin/eval: no GPU on this machine (nvidia-smi is not on PATH)"* ]] || flunk "$stderr"
  [[ $stderr == *"to try the wiring here on CPU: bin/eval --rehearse $WORK/exp.env)" ]] || flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "--checkpoint at a Megatron iter_ directory points to the HF exports" {
  local ckpt="$WORK/runs-x/checkpoints"
  mkdir -p "$ckpt/iter_0000002" "$ckpt/hf/1"
  run -2 --separate-stderr "$EVAL" --checkpoint "$ckpt/iter_0000002" "$WORK/exp.env"
  [[ $stderr == *"$ckpt/iter_0000002 is a Megatron checkpoint, not an HF model directory: bin/eval serves HF weights, and its HF exports are in $ckpt/hf"* ]] ||
    flunk "$stderr"
  rm -r "$ckpt/hf"
  run -2 --separate-stderr "$EVAL" --checkpoint "$ckpt/iter_0000002" "$WORK/exp.env"
  [[ $stderr == *"none was written ($ckpt/hf does not exist): SAVE_HF=true writes one per save"* ]] || flunk "$stderr"
  refute_calls
}

@test "issue 43: an engine port another process holds stops eval.sh before anything is sent there" {
  # a listener of this user that eval.sh did not start, on the engine's fixed port: not the
  # engine (its socket is in no descriptor table of the engine's process group)
  local port holder
  port=$("$TEST_PYTHON_DIR/python3" "$LIB_DIR/sglang_helper.py" free-port) # outside the ephemeral range
  "$TEST_PYTHON_DIR/python3" -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); print("up", flush=True); time.sleep(120)' "$port" >"$BATS_TEST_TMPDIR/holder.out" &
  holder=$!
  for ((i = 0; i < 1200; i++)); do [[ -s $BATS_TEST_TMPDIR/holder.out ]] && break; /bin/sleep 0.1; done
  run -1 "$EVAL" --set "EVAL_SGLANG_PORT=$port" "$WORK/exp.env"
  kill "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true
  assert_output_contains "port $port of the SGLang server is held by another process, uid $(id -u)"
  assert_output_contains "(a process of yours that this script did not start), not by the server this script started: nothing was sent to it"
  refute_output_contains "is healthy"
  run calls evaluate
  [[ -z $output ]] || flunk "the evaluation ran: $output"
}
