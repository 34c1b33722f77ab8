#!/usr/bin/env bats
# bin/train and the rendered script against a hostile or surprising run directory and
# pass-through flags (issue 18, defects 11-15): no file of the user is written through a
# link, no secret is accepted in pass-through flags, runs/<EXP_ID>/env reproduces the run
# byte for byte, edited copies are never replaced, checkpoints without a usable tracker stop
# the run. ray, pkill and pgrep are stubs; python3, bash and coreutils are real.

load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  write_env "$WORK/exp.env" "$WORK/install"
  stub_cluster
  RUN_DIR="$TOOLKIT_RUNS_DIR/bats-exp"
  TRAIN="$REPO_ROOT/bin/train"
  echo "the user's own file" >"$WORK/precious.txt"
}

# assert_precious_untouched: the file the links point to still holds what the user wrote.
assert_precious_untouched() {
  [[ $(cat "$WORK/precious.txt") == "the user's own file" ]] || flunk "precious.txt changed: $(cat "$WORK/precious.txt")"
}

@test "#11 a symlink in runs/<EXP_ID>/ (script, env, toolkit.yaml, checksums, log) is refused; its target is untouched" {
  local name
  for name in train.sh env toolkit.yaml .rendered.json train.log; do
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR"
    ln -s "$WORK/precious.txt" "$RUN_DIR/$name"
    run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
    # the last line (bin/doctor's blocking checks may warn before it: the fixture model has no sizes)
    [[ ${stderr##*$'\n'} == "bin/train: $RUN_DIR/$name is a symbolic link (to $WORK/precious.txt); bin/train never writes through a link it did not create ("*")" ]] ||
      flunk "$name: $stderr"
    assert_precious_untouched
    [[ -L $RUN_DIR/$name ]] || flunk "$name: the link was removed"
    refute_calls
  done
}

@test "#11 rerunning train.sh with bash: a train.log that became a symlink stops it before anything runs" {
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
  ln -s "$WORK/precious.txt" "$RUN_DIR/train.log"
  run -2 bash "$RUN_DIR/train.sh"
  assert_output "train.sh: $RUN_DIR/train.log is a symbolic link (to $WORK/precious.txt); the toolkit never writes through a link it did not create (remove the link or move it out of the run directory; the file it points to is untouched)"
  assert_precious_untouched
  refute_calls
}

@test "#12 secrets in pass-through flags are refused, never echoed; nothing is rendered or run" {
  local secret=sk-Zq8W7vK3secret
  local -a cases=(
    "-- --wandb-key $secret"
    "-- --wandb-key=$secret"
    "-- --sglang-api-key $secret"
    "-- --aws-secret-access-key $secret"
    "-- --hf-token $secret"
    "--set EXTRA_FLAGS=--wandb-key\\ $secret"
  )
  local case_ words refusal=" in EXTRA_FLAGS or after -- would put a secret into train.sh, runs/<EXP_ID>/env and the job's command line"
  for case_ in "${cases[@]}"; do
    read -r -a words <<<"$case_"
    if [[ ${words[0]} == --set ]]; then
      run -2 --separate-stderr "$TRAIN" --set "EXTRA_FLAGS=--wandb-key $secret" "$WORK/exp.env"
    else
      run -2 --separate-stderr "$TRAIN" "$WORK/exp.env" "${words[@]}"
    fi
    [[ $stderr == "bin/train: --"*"$refusal ("*"export"*")" ]] || flunk "$case_: $stderr"
    [[ $stderr != *"$secret"* ]] || flunk "$case_: the secret was echoed: $stderr"
  done
  write_env "$WORK/exp.env" "$WORK/install" "EXTRA_FLAGS='--rollout-top-k 5 --wandb-key $secret'"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == "bin/train: --wandb-key in EXTRA_FLAGS or after -- would put a secret"*"(export WANDB_API_KEY=..."* ]] ||
    flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]] || flunk "something was rendered: $(find "$TOOLKIT_RUNS_DIR")"
}

@test "#12 slime's data-field and token-id flags are not mistaken for secrets" {
  run -0 "$TRAIN" "$WORK/exp.env" -- --input-key question --label-key answer --metadata-key meta \
    --rollout-stop-token-ids 151643 --log-probs-max-tokens-per-gpu 4096
  run -0 flag_value --label-key
  assert_output answer
}

@test "#13 runs/<EXP_ID>/env reproduces the run byte for byte: literal \${...}, CR, quotes, backslashes" {
  local model_id=$'m ${EXP_ID} ${HOME:-x} a\rb \'q\' "d" \\n \\\\ $(x) `y`'
  local extra=$'--title \'${EXP_ID}\' --crlf \'l1\r\nl2\' --bs \'a\\\\b\''
  # shellcheck disable=SC2016 # literal ${...} that must stay literal
  run -0 "$TRAIN" --set "MODEL_ID=$model_id" --set "EXTRA_FLAGS=$extra" --set WANDB_GROUP='${NUM_GPUS}' "$WORK/exp.env"
  cp "$JOB_ARGV" "$WORK/first.argv"
  cp "$JOB_ENV_JSON" "$WORK/first.env.json"
  cp "$RUN_DIR/env" "$WORK/first.env"
  cp "$RUN_DIR/toolkit.yaml" "$WORK/first.toolkit.yaml"
  cp "$RUN_DIR/train.sh" "$WORK/first.train.sh"
  [[ $(flag_value --crlf) == $'l1\r\nl2' && $(flag_value --title) == "\${EXP_ID}" ]] || flunk "first run: $(job_argv)"

  : >"$CALL_LOG"
  run -0 --separate-stderr "$TRAIN" "$RUN_DIR/env"
  [[ $stderr != *"was edited"* ]] || flunk "$stderr"
  cmp "$WORK/first.argv" "$JOB_ARGV" || flunk "train.py argv differs: $(job_argv)"
  cmp "$WORK/first.env.json" "$JOB_ENV_JSON"
  cmp "$WORK/first.env" "$RUN_DIR/env"
  cmp "$WORK/first.toolkit.yaml" "$RUN_DIR/toolkit.yaml"
  cmp "$WORK/first.train.sh" "$RUN_DIR/train.sh"
  run python3 -c 'import sys, yaml; print(repr(yaml.safe_load(open(sys.argv[1]))["model_id"]))' "$RUN_DIR/toolkit.yaml"
  assert_output "$(python3 -c 'import sys; print(repr(sys.argv[1]))' "$model_id")"
}

@test "#14 edit-and-re-render twice in a row: both edited copies are kept" {
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
  echo "# edit one" >>"$RUN_DIR/train.sh"
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
  echo "# edit two" >>"$RUN_DIR/train.sh"
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
  (($(find "$RUN_DIR" -name 'train.sh.edited-*' | wc -l) == 2)) || flunk "$(ls -a "$RUN_DIR")"
  grep -l "# edit one" "$RUN_DIR"/train.sh.edited-*
  grep -l "# edit two" "$RUN_DIR"/train.sh.edited-*
}

@test "#15 SAVE_DIR with checkpoints but no tracker stops the run before anything starts, keeping them" {
  mkdir -p "$RUN_DIR/checkpoints/iter_0000004" "$RUN_DIR/checkpoints/iter_0000008"
  run -2 "$TRAIN" "$WORK/exp.env"
  assert_output_contains "$RUN_DIR/checkpoints holds Megatron checkpoints (newest: iter_0000008) but no latest_checkpointed_iteration.txt"
  assert_output_contains "echo 8 > $RUN_DIR/checkpoints/latest_checkpointed_iteration.txt"
  refute_calls
  [[ -d $RUN_DIR/checkpoints/iter_0000004 && -d $RUN_DIR/checkpoints/iter_0000008 ]]
  echo 8 >"$RUN_DIR/checkpoints/latest_checkpointed_iteration.txt"
  run -0 bash "$RUN_DIR/train.sh"
  assert_output_contains "resuming from $RUN_DIR/checkpoints (checkpoint of rollout 8)"
  run -0 flag_value --load
  assert_output "$RUN_DIR/checkpoints"
}
