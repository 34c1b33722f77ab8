#!/usr/bin/env bats
# templates/lib/checkpoints.sh, sourced directly: resuming a run from its own checkpoints.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/checkpoints.sh
  source "$LIB_DIR/checkpoints.sh"
}

@test "no checkpoint yet: no --load, nothing said" {
  mkdir -p "$WORK/ckpt dir"
  run -0 resume_args "$WORK/ckpt dir"
  assert_output ""
  resume_args "$WORK/ckpt dir"
  ((${#RESUME_ARGS[@]} == 0))
  resume_args "$WORK/does-not-exist"
  ((${#RESUME_ARGS[@]} == 0))
}

@test "a Megatron checkpoint: --load SAVE_DIR as one word, and the rollout is said" {
  mkdir -p "$WORK/ckpt dir"
  echo 41 >"$WORK/ckpt dir/latest_checkpointed_iteration.txt"
  run -0 resume_args "$WORK/ckpt dir"
  assert_output "train.sh: resuming from $WORK/ckpt dir (checkpoint of rollout 41)"
  resume_args "$WORK/ckpt dir" 2>/dev/null
  [[ ${#RESUME_ARGS[@]} == 2 && ${RESUME_ARGS[0]} == --load && ${RESUME_ARGS[1]} == "$WORK/ckpt dir" ]] ||
    flunk "RESUME_ARGS: ${RESUME_ARGS[*]}"
}

@test "a marker that is not an iteration number is a clear error, and nothing is removed" {
  mkdir -p "$WORK/ckpt"
  # shellcheck disable=SC2016 # a literal $(...) that must never run
  echo 'garbage $(touch PWNED)' >"$WORK/ckpt/latest_checkpointed_iteration.txt"
  run -2 resume_args "$WORK/ckpt"
  assert_output_contains "latest_checkpointed_iteration.txt holds 'garbage \$(touch PWNED)', not an iteration number"
  [[ -f $WORK/ckpt/latest_checkpointed_iteration.txt && ! -e PWNED ]]
}
