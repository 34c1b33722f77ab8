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
  mkdir -p "$WORK/ckpt dir/iter_0000041"
  echo 41 >"$WORK/ckpt dir/latest_checkpointed_iteration.txt"
  run -0 resume_args "$WORK/ckpt dir"
  assert_output "train.sh: resuming from $WORK/ckpt dir (checkpoint of rollout 41)"
  resume_args "$WORK/ckpt dir" 2>/dev/null
  [[ ${#RESUME_ARGS[@]} == 2 && ${RESUME_ARGS[0]} == --load && ${RESUME_ARGS[1]} == "$WORK/ckpt dir" ]] ||
    flunk "RESUME_ARGS: ${RESUME_ARGS[*]}"
}

@test "a marker that is not an iteration number is a clear error that keeps the checkpoints" {
  mkdir -p "$WORK/ckpt/iter_0000003" "$WORK/ckpt/iter_0000012"
  # shellcheck disable=SC2016 # a literal $(...) that must never run
  echo 'garbage $(touch PWNED)' >"$WORK/ckpt/latest_checkpointed_iteration.txt"
  run -2 resume_args "$WORK/ckpt"
  assert_output_contains "latest_checkpointed_iteration.txt holds 'garbage \$(touch PWNED)', not a positive iteration number or 'release'"
  assert_output_contains "echo 12 > $WORK/ckpt/latest_checkpointed_iteration.txt"
  assert_output_contains "to start over, set SAVE_DIR (or EXP_ID) to a new directory; nothing in $WORK/ckpt was removed"
  refute_output_contains "remove the"
  refute_output_contains "delete"
  [[ -f $WORK/ckpt/latest_checkpointed_iteration.txt && -d $WORK/ckpt/iter_0000003 && ! -e PWNED ]]
}

@test "the tracker is read as Megatron reads it: whitespace, +, _ and leading zeros; 0 and -1 are refused" {
  mkdir -p "$WORK/ckpt/iter_0001200"
  local text
  for text in $'1200\n' $'  1200 \t\n\n' '+1200' '1_200' '001200'; do
    printf '%s' "$text" >"$WORK/ckpt/latest_checkpointed_iteration.txt"
    resume_args "$WORK/ckpt" 2>/dev/null
    [[ ${RESUME_ARGS[*]} == "--load $WORK/ckpt" ]] || flunk "tracker '$text': ${RESUME_ARGS[*]}"
  done
  for text in 0 -1 '' 12ab '1__2' 'release now' 99999999999999999999; do
    printf '%s\n' "$text" >"$WORK/ckpt/latest_checkpointed_iteration.txt"
    run -2 resume_args "$WORK/ckpt"
    assert_output_contains "not a positive iteration number or 'release'"
  done
}

@test "a tracker holding release loads SAVE_DIR/release, as Megatron does" {
  mkdir -p "$WORK/ckpt/release"
  echo release >"$WORK/ckpt/latest_checkpointed_iteration.txt"
  run -0 resume_args "$WORK/ckpt"
  assert_output "train.sh: loading the release checkpoint $WORK/ckpt/release (weights only: Megatron starts the optimizer and the iteration count afresh)"
  resume_args "$WORK/ckpt" 2>/dev/null
  [[ ${RESUME_ARGS[*]} == "--load $WORK/ckpt" ]] || flunk "RESUME_ARGS: ${RESUME_ARGS[*]}"
}

@test "a tracker naming a checkpoint that is not there stops the run and names the newest one" {
  mkdir -p "$WORK/ckpt/iter_0000004" "$WORK/ckpt/iter_0000010" "$WORK/ckpt/iter_0000009"
  echo 20 >"$WORK/ckpt/latest_checkpointed_iteration.txt"
  run -2 resume_args "$WORK/ckpt"
  assert_output_contains "latest_checkpointed_iteration.txt names iter_0000020, but $WORK/ckpt/iter_0000020 does not exist"
  assert_output_contains "echo 10 > $WORK/ckpt/latest_checkpointed_iteration.txt"
  echo release >"$WORK/ckpt/latest_checkpointed_iteration.txt"
  run -2 resume_args "$WORK/ckpt"
  assert_output_contains "names release, but $WORK/ckpt/release does not exist"
}

@test "checkpoints without a tracker stop the run: nothing would be resumed and they would be saved over" {
  mkdir -p "$WORK/ckpt dir/iter_0000002" "$WORK/ckpt dir/iter_0000006"
  run -2 resume_args "$WORK/ckpt dir"
  assert_output_contains "$WORK/ckpt dir holds Megatron checkpoints (newest: iter_0000006) but no latest_checkpointed_iteration.txt"
  assert_output_contains "echo 6 > $WORK/ckpt\\ dir/latest_checkpointed_iteration.txt"
  [[ -d "$WORK/ckpt dir/iter_0000002" && ! -e "$WORK/ckpt dir/latest_checkpointed_iteration.txt" ]]
  # the advice works: written as said, the run resumes from the newest checkpoint
  echo 6 >"$WORK/ckpt dir/latest_checkpointed_iteration.txt"
  run -0 resume_args "$WORK/ckpt dir"
  assert_output "train.sh: resuming from $WORK/ckpt dir (checkpoint of rollout 6)"
  # a release checkpoint alone counts too; other files (hf/, logs) do not
  mkdir -p "$WORK/rel/release" "$WORK/other/hf/3" "$WORK/other/iter_notes"
  run -2 resume_args "$WORK/rel"
  assert_output_contains "(newest: release)"
  assert_output_contains "echo release > $WORK/rel/latest_checkpointed_iteration.txt"
  run -0 resume_args "$WORK/other"
  assert_output ""
}

@test "a tracker that is a symlink or a directory is refused, not followed" {
  mkdir -p "$WORK/ckpt/iter_0000001" "$WORK/dir-tracker/latest_checkpointed_iteration.txt"
  echo 1 >"$WORK/elsewhere.txt"
  ln -s "$WORK/elsewhere.txt" "$WORK/ckpt/latest_checkpointed_iteration.txt"
  run -2 resume_args "$WORK/ckpt"
  assert_output_contains "latest_checkpointed_iteration.txt is not a regular file"
  run -2 resume_args "$WORK/dir-tracker"
  assert_output_contains "latest_checkpointed_iteration.txt is not a regular file"
}
