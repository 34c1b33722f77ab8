#!/usr/bin/env bats
# templates/lib/model.sh, sourced directly: MODEL_ARGS read exactly from a model script.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/model.sh
  source "$LIB_DIR/model.sh"
  MODELS="$LAUNCHER_FIXTURES/models"
}

@test "a script with variables, arithmetic, a sourced sibling and arguments with spaces" {
  source_model_args "$MODELS/qwen-spaces.sh"
  local expected=(--swiglu --num-layers 36 --hidden-size 2048 --moe-layer-freq "[0]*1+[1]*35"
    --spec slime_plugins.models.demo "get spec with spaces" --rotary-base 1000000 --norm-epsilon 1e-6)
  [[ $(declare -p MODEL_ARGS) == "declare -a MODEL_ARGS="* ]]
  ((${#MODEL_ARGS[@]} == ${#expected[@]})) || flunk "got ${#MODEL_ARGS[@]} args: ${MODEL_ARGS[*]}"
  local i
  for i in "${!expected[@]}"; do
    [[ ${MODEL_ARGS[i]} == "${expected[i]}" ]] || flunk "[$i] '${MODEL_ARGS[i]}' != '${expected[i]}'"
  done
}

@test "the script's globals do not leak into the caller; an env default is honoured" {
  NLAYERS=keep
  MODEL_ARGS_NUM_LAYERS=4 source_model_args "$MODELS/qwen-spaces.sh"
  [[ $NLAYERS == keep ]]
  [[ -z ${COMMON_FLAGS:-} ]]
  [[ ${MODEL_ARGS[2]} == 4 && ${MODEL_ARGS[6]} == "[0]*1+[1]*3" ]] || flunk "${MODEL_ARGS[*]}"
}

@test "the script is sourced from its own directory: files in the caller's directory do not expand its globs" {
  cd "$WORK"
  touch '[0]*1+[1]*35' 01+135
  source_model_args "$MODELS/qwen-spaces.sh"
  [[ ${MODEL_ARGS[6]} == "[0]*1+[1]*35" ]] || flunk "${MODEL_ARGS[6]}"
}

@test "a missing script is a clear error" {
  run -2 source_model_args "$MODELS/nope.sh"
  assert_output_contains "model script $MODELS/nope.sh does not exist"
}

@test "a failing script is a clear error" {
  run -1 source_model_args "$MODELS/failing.sh"
  assert_output_contains "model script $MODELS/failing.sh failed with status 1"
}

@test "a script without a MODEL_ARGS array is a clear error" {
  run -1 source_model_args "$MODELS/no-array.sh"
  assert_output_contains "does not define the bash array MODEL_ARGS"
}

@test "the script's own output goes to stderr, not into MODEL_ARGS" {
  printf '%s\n' 'echo "loading model flags"' 'MODEL_ARGS=(--a "b c")' >"$WORK/chatty.sh"
  source_model_args "$WORK/chatty.sh" 2>/dev/null
  ((${#MODEL_ARGS[@]} == 2)) && [[ ${MODEL_ARGS[1]} == "b c" ]]
}

@test "a command failing halfway through the script is an error, as under slime's set -e" {
  run -1 source_model_args "$MODELS/fails-midway.sh"
  assert_output_contains "model script $MODELS/fails-midway.sh failed with status 1"
}

@test "the caller's errexit setting is restored" {
  set +e
  source_model_args "$MODELS/qwen-spaces.sh"
  [[ $- != *e* ]] || flunk "errexit turned on"
  set -e
  source_model_args "$MODELS/qwen-spaces.sh"
  [[ $- == *e* ]] || flunk "errexit turned off"
}

@test "loop-built flags, printf -v, an env default on a sourced sibling, an element overwritten by index" {
  source_model_args "$MODELS/loop-built.sh"
  [[ "${MODEL_ARGS[*]}" == "--num-layers 6 --moe-layer-freq [0,0,1,1,1,1]" ]] || flunk "${MODEL_ARGS[*]}"
  source_model_args "$MODELS/loop-built-small.sh"
  [[ "${MODEL_ARGS[*]}" == "--num-layers 4 --moe-layer-freq [0,0,1]" ]] || flunk "${MODEL_ARGS[*]}"
  [[ -z ${MODEL_ARGS_NUM_LAYERS:-} && -z ${FREQ:-} ]]
}
