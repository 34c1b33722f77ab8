#!/usr/bin/env bats
# issue 39: error messages that said the wrong thing. Each test failed before the fix.

load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  write_env "$WORK/exp.env" "$WORK/install"
  stub_cluster
  TRAIN="$REPO_ROOT/bin/train"
}

@test "sh bin/<command>: says to use bash, exit 2, for every command" {
  local cmd
  for cmd in "$REPO_ROOT"/bin/*; do
    run -2 sh "$cmd" --help
    assert_output "bin/${cmd##*/}: run it with bash (./bin/${cmd##*/} or bash bin/${cmd##*/}), not sh"
  done
}

@test "--set KEY VALUE (two words): the advice joins them, and following it works" {
  run -2 --separate-stderr "$TRAIN" --dry-run --set NUM_ROLLOUT 10 "$WORK/exp.env"
  [[ $stderr == "bin/train: --set NUM_ROLLOUT 10: --set takes KEY=VALUE as one word (write --set NUM_ROLLOUT=10: bin/train --dry-run --set NUM_ROLLOUT=10 $WORK/exp.env)" ]] ||
    flunk "$stderr"
  run -0 "$TRAIN" --dry-run --set NUM_ROLLOUT=10 "$WORK/exp.env"
  assert_output_contains "--num-rollout 10 "
}

@test "DATA_PATH naming a directory: said in a dry run (warning, exit 1) and a real run (error)" {
  write_env "$WORK/exp.env" "$WORK/install" "DATA_PATH='$WORK/install/data'"
  run -1 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == *"bin/train: warning: DATA_PATH: $WORK/install/data is a directory, not a file (name the training JSONL itself (it holds gsm8k_test.jsonl, train.jsonl))"* ]] ||
    flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == *"DATA_PATH: $WORK/install/data is a directory, not a file"* ]] || flunk "$stderr"
  refute_calls
}

@test "\$HOME or \$VAR in a path: said to be unexpanded, not a missing <cwd>/\$HOME/..." {
  local value
  # shellcheck disable=SC2016 # the env-file lines hold a literal $HOME / $MODELS
  for value in 'DATA_PATH=$HOME/data/train.jsonl' "DATA_PATH='\${HOME}/data/train.jsonl'" 'MODEL_DIR=$MODELS/qwen'; do
    write_env "$WORK/exp.env" "$WORK/install" "$value"
    run -2 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
    [[ $stderr == *" is not expanded: env-file values are data, and \${NAME} refers only to a key set earlier in the same file"* ]] ||
      flunk "$value: $stderr"
    [[ $stderr != *"$WORK/\$"* ]] || flunk "$value: $stderr"
  done
}

@test "RAY_PORT inside Ray's worker port range 10002-19999 is refused before anything runs" {
  write_env "$WORK/exp.env" "$WORK/install" "RAY_PORT=16379"
  run -2 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == "bin/train: RAY_PORT=16379 is inside Ray's worker port range 10002-19999: \`ray start\` would fail (choose a port below 10002 or above 19999 (the defaults are 6379, 8265, 10001, 52365))" ]] ||
    flunk "$stderr"
  refute_calls
}

@test "MODEL_DIR at a Hugging Face cache folder: points to snapshots/<hash>" {
  local cache="$WORK/hub/models--Qwen--Qwen2.5-3B"
  mkdir -p "$cache/snapshots/0123abcd" "$cache/refs" "$cache/blobs"
  cp "$WORK/install/model/config.json" "$cache/snapshots/0123abcd/"
  write_env "$WORK/exp.env" "$WORK/install" "MODEL_DIR='$cache'"
  run -1 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env" # 1: the model check fails too
  [[ $stderr == *"bin/train: warning: MODEL_DIR: $cache/config.json does not exist (expected an HF model directory; this is a Hugging Face cache folder: use MODEL_DIR=$cache/snapshots/0123abcd)"* ]] ||
    flunk "$stderr"
}

@test "bin/doctor --help offers only the variants it accepts" {
  run -0 "$REPO_ROOT/bin/doctor" --help
  refute_output_contains "|eval"
  assert_output_contains "--variant sync|async"
}
