#!/usr/bin/env bats
# bin/train --dry-run and the rendered script's --print-command: the slime command a real run
# submits, with the model script's arguments and every other array expanded by the rendered
# script's own code. Each variant's printed line, read back by bash, must be the very argv the
# real run hands `ray job submit` (the ray stub records it; python3, bash and coreutils are real).

bats_require_minimum_version 1.5.0
load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  stub_cluster
  RUN_DIR="$TOOLKIT_RUNS_DIR/bats-exp"
  TRAIN="$REPO_ROOT/bin/train"
  mkdir -p "$WORK/tmp" "$WORK/cuda-13.0/bin" "$WORK/cuda-13.0/lib64"
  export TMPDIR="$WORK/tmp"
  # every array a run fills at run time has something in it: wandb flags (the key is
  # exported), --train-env-vars (CUDA_HOME pinned), --load (a checkpoint to resume from)
  export WANDB_API_KEY=sk-zq8W7vK3 LD_LIBRARY_PATH=/opt/x/lib
  write_env "$WORK/exp.env" "$WORK/install" "CUDA_HOME=$WORK/cuda-13.0" \
    "EXTRA_FLAGS='--log-tag \"two words\"'"
  mkdir -p "$RUN_DIR/checkpoints/iter_0000003"
  echo 3 >"$RUN_DIR/checkpoints/latest_checkpointed_iteration.txt"
}

# snapshot: every path under the runs dir with its size and time, and every path in TMPDIR
# (what a dry run must leave as it found it; a temporary file made and removed again is fine).
snapshot() {
  find "$TOOLKIT_RUNS_DIR" -printf '%p %s %T@\n' | sort
  find "$TMPDIR" -mindepth 1 | sort
}

# assert_printed_is_submitted: $printed (a dry run's stdout) read back by bash is the argv the
# last real run submitted, word for word.
assert_printed_is_submitted() {
  local -a words submitted
  eval "words=($printed)"
  mapfile -d '' -t submitted <"$JOB_ARGV"
  [[ ${words[*]@Q} == "${submitted[*]@Q}" ]] ||
    flunk "printed:   ${words[*]@Q}" "submitted: ${submitted[*]@Q}"
}

# dry_run_then_real ARG...: bin/train --dry-run ARG... (printed), then the real run of the same.
dry_run_then_real() { # <bin/train argument>...
  local before
  before=$(snapshot)
  run -0 --separate-stderr "$TRAIN" --dry-run "$@"
  printed=$output
  ((${#lines[@]} == 1)) || flunk "stdout: $output"
  [[ $(snapshot) == "$before" ]] || flunk "the dry run changed the runs dir or TMPDIR"
  refute_calls # no ray, pkill or pgrep
  run -0 "$TRAIN" "$@"
}

@test "--dry-run prints the sync command with the model script's arguments and every array expanded, as submitted" {
  dry_run_then_real "$WORK/exp.env" -- --rollout-top-k 20
  [[ $printed != *"\${"* ]] || flunk "unexpanded: $printed"
  [[ $printed == "python3 $WORK/install/slime/train.py --swiglu --num-layers 36 --hidden-size 2048 --moe-layer-freq '[0]*1+[1]*35' --spec slime_plugins.models.demo 'get spec with spaces' --rotary-base 1000000 --norm-epsilon 1e-6 "* ]] ||
    flunk "$printed"
  [[ $printed == *" --use-wandb --wandb-group bats-exp --load $RUN_DIR/checkpoints --train-env-vars "*" --log-tag 'two words' --rollout-top-k 20" ]] ||
    flunk "$printed"
  assert_printed_is_submitted
}

@test "--dry-run --variant async: train_async.py's command, expanded, as submitted" {
  dry_run_then_real --variant async --set ROLLOUT_NUM_GPUS=2 --set ROLLOUT_BATCH_SIZE=24 "$WORK/exp.env"
  [[ $printed == "python3 $WORK/install/slime/train_async.py --swiglu "* && $printed != *"\${"* ]] || flunk "$printed"
  assert_printed_is_submitted
}

@test "--dry-run of a two-node head: the multi-node command, expanded, as submitted" {
  stub_two_node_ray
  # the head's end-of-run word to the workers needs a live GCS: it fails at once here
  stub timeout 'exit 124'
  export TOOLKIT_NODE_POLL=60
  dry_run_then_real --set NUM_NODES=2 "$WORK/exp.env"
  [[ $printed == *" --actor-num-nodes 2 "* && $printed != *"\${"* ]] || flunk "$printed"
  assert_printed_is_submitted
}

@test "train.sh --print-command runs only the argument-building part: no Ray, no process, no file" {
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
  local before
  before=$(snapshot)
  run -0 --separate-stderr bash "$RUN_DIR/train.sh" --print-command
  [[ $output == "python3 $WORK/install/slime/train.py --swiglu "* ]] || flunk "$output"
  [[ $stderr == *"train.sh: resuming from $RUN_DIR/checkpoints (checkpoint of rollout 3)"* ]] || flunk "$stderr"
  [[ $(snapshot) == "$before" ]] || flunk "--print-command changed the runs dir or TMPDIR"
  [[ ! -e $RUN_DIR/train.log && ! -e $TOOLKIT_RUNTIME_DIR ]] || flunk "a log or a lock was made"
  refute_calls
  run -2 --separate-stderr bash "$RUN_DIR/train.sh" --print-comand
  [[ $stderr == "train.sh: unknown argument --print-comand (usage: bash $RUN_DIR/train.sh [--print-command])" ]] ||
    flunk "$stderr"
  refute_calls
}

@test "--dry-run without the model script: the rest expanded, \${MODEL_ARGS[@]} left as it is and why" {
  write_env "$WORK/exp.env" "$WORK/install" "MODEL_TYPE=not-here" "CUDA_HOME=/nonexistent/cuda-13.0"
  # 1: the model check a real run makes first fails (it says so); the command is printed all the same
  run -1 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == *"bin/train: doctor: FAIL model.script: model script $WORK/install/slime/scripts/models/not-here.sh does not exist"* ]] ||
    flunk "$stderr"
  [[ $output == "python3 $WORK/install/slime/train.py \${MODEL_ARGS[@]} --"* ]] || flunk "$output"
  [[ $output == *" --use-wandb --wandb-group bats-exp --load $RUN_DIR/checkpoints \${TRAIN_ENV_ARGS[@]}"* ]] ||
    flunk "$output"
  [[ $stderr == *"train.sh: model script $WORK/install/slime/scripts/models/not-here.sh does not exist here: \${MODEL_ARGS[@]} stays unexpanded (a run reads it from that script)"* ]] ||
    flunk "$stderr"
  [[ $stderr == *"train.sh: CUDA_HOME /nonexistent/cuda-13.0 is not a directory here: \${TRAIN_ENV_ARGS[@]} stays unexpanded (a run passes the pinned CUDA_HOME and LD_LIBRARY_PATH to slime there)"* ]] ||
    flunk "$stderr"
  refute_calls
  run -0 find "$TMPDIR" -mindepth 1
  assert_output ""
}

@test "--dry-run with a model script that fails: its reason, the unexpanded command, the run's status" {
  write_env "$WORK/exp.env" "$WORK/install" "MODEL_TYPE=failing"
  run -1 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == *"train.sh: model script $WORK/install/slime/scripts/models/failing.sh failed with status 1"* ]] ||
    flunk "$stderr"
  [[ $stderr == *"bin/train: train.sh --print-command stopped (status 1, the reason above): \${MODEL_ARGS[@]}, \${STACK_ARGS[@]}, \${WANDB_ARGS[@]}, \${RESUME_ARGS[@]} and \${TRAIN_ENV_ARGS[@]} stay unexpanded below"* ]] ||
    flunk "$stderr"
  [[ $output == "python3 $WORK/install/slime/train.py \${MODEL_ARGS[@]} "* ]] || flunk "$output"
  refute_calls
}

@test "command_line: what it prints reads back as the same words; placeholders print as they are" {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck disable=SC2016,SC2054 # literal words, one with commas
  local -a words=(plain "two words" "" "it's" $'l1\nl2' '$(touch PWNED)' '[0]*3' 'a\b' "tab	x" -x=1,2:3@%+./)
  local -a back
  run -0 command_line -- "${words[@]}"
  eval "back=($output)"
  [[ ${back[*]@Q} == "${words[*]@Q}" ]] || flunk "read back: ${back[*]@Q}"
  [[ ! -e PWNED ]]
  [[ $output == "plain 'two words' '' "* && $output == *" -x=1,2:3@%+./" ]] || flunk "$output"
  run -0 command_line "\${X[@]}" -- a "\${X[@]}" b
  assert_output "a \${X[@]} b"
}

@test "the slime stack's flags are chosen from the node: v0.3.1's slime and SGLang 0.5.15, dry run and real run alike" {
  # the node of make_install, moved to slime v0.3.1 (no --megatron-to-hf-mode) and SGLang
  # 0.5.15.post1 (--cuda-graph-max-bs-decode; the old name is a deprecated alias there)
  python3 "$REPO_ROOT/tests/python/fakes/stack_node.py" "$WORK/install" v0.3.1
  dry_run_then_real "$WORK/exp.env"
  [[ $printed == *" --custom-config-path $RUN_DIR/toolkit.yaml --sglang-cuda-graph-max-bs-decode 32 --use-wandb "* ]] ||
    flunk "$printed"
  [[ $printed != *"--megatron-to-hf-mode"* ]] || flunk "$printed"
  assert_printed_is_submitted
  grep -qF "train.sh: slime version unknown (not a git checkout), SGLang 0.5.15.post1: no --megatron-to-hf-mode (this slime has none and loads an HF --ref-load itself); --sglang-cuda-graph-max-bs-decode 32" \
    "$RUN_DIR/train.log" || flunk "$(cat "$RUN_DIR/train.log")"
}

@test "no sglang for python3: --dry-run leaves the stack's flags unexpanded and says why; a run stops before anything" {
  export PYTHONPATH="$WORK/empty"
  run -0 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $output == *" --custom-config-path $RUN_DIR/toolkit.yaml \${STACK_ARGS[@]} --use-wandb "* ]] || flunk "$output"
  [[ $stderr == *"train.sh: python3 ("*") has no sglang package (activate the environment that has the slime stack)"* ]] ||
    flunk "$stderr"
  [[ $stderr == *"train.sh: the slime stack cannot be read here: \${STACK_ARGS[@]} stays unexpanded"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
  grep -qF "train.sh: cannot tell which slime stack this node has (the reason above)" "$RUN_DIR/train.log" ||
    flunk "$(cat "$RUN_DIR/train.log")"
  refute_calls
}
