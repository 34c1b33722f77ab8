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

# a run started by start_holding_run ends with its test, whatever the test found
teardown() {
  if [[ -n ${FIRST:-} ]]; then
    touch "$WORK/release"
    wait "$FIRST" || true
  fi
}

# run_dir_sums: the checksum of every file in the run directory, but its log (the live run writes it).
run_dir_sums() {
  (cd "$RUN_DIR" && find . -type f ! -name 'train.log' -print0 | sort -z | xargs -0 sha256sum)
}

@test "issue 39: a refused bin/train of a live experiment leaves its files byte for byte (real run, --render-only, its own env)" {
  start_holding_run
  local before attempt
  before=$(run_dir_sums)
  : >"$CALL_LOG"
  local -a attempts=(
    "--set NUM_ROLLOUT=7 --set ROLLOUT_TEMPERATURE=0.5 $WORK/exp.env"
    "--render-only --set NUM_ROLLOUT=7 $WORK/exp.env"
    "--set NUM_ROLLOUT=7 $RUN_DIR/env"
  )
  for attempt in "${attempts[@]}"; do
    # shellcheck disable=SC2086 # the words of one attempt
    TOOLKIT_LOCK_WAIT=0 run --separate-stderr "$TRAIN" $attempt
    [[ $(run_dir_sums) == "$before" ]] ||
      flunk "bin/train $attempt changed the live run's files: $(diff <(echo "$before") <(run_dir_sums))"
    ((status == 1)) || flunk "bin/train $attempt: status $status: $stderr"
    [[ $stderr == *"bin/train: $RUN_DIR is in use by a run of this experiment: PID $HOLDER_PID (train.sh); nothing was written"* ]] ||
      flunk "bin/train $attempt: $stderr"
  done
  run ! grep -q "^NUM_ROLLOUT='7'$" "$RUN_DIR/env"
  calls >"$WORK/second.calls"
  run cat "$WORK/second.calls"
  refute_output_contains "ray start"
  refute_output_contains "pgrep"
}

@test "issue 39: bash train.sh beside a live run of the same experiment is refused before it writes its log" {
  start_holding_run
  local before
  before=$(sha256sum "$RUN_DIR/train.log")
  TOOLKIT_LOCK_WAIT=0 run -1 bash "$RUN_DIR/train.sh"
  local after
  after=$(sha256sum "$RUN_DIR/train.log")
  touch "$WORK/release"
  wait "$FIRST"
  assert_output "train.sh: another run of this experiment uses $RUN_DIR: PID $HOLDER_PID (wait for it to end, or stop it with 'kill $HOLDER_PID')"
  [[ $before == "$after" ]] || flunk "train.log changed"
}

@test "issue 39: the run directory's lock is released when the run ends; no child of the run holds it" {
  start_holding_run
  local holders
  holders=$(find /proc/[0-9]*/fd -lname "$RUN_DIR/.run.lock" 2>/dev/null | cut -d/ -f3 | sort -u)
  touch "$WORK/release"
  wait "$FIRST"
  # one holder: the lock helper (a python3 child of train.sh), not Ray, not train.sh itself
  (($(wc -w <<<"$holders") == 1)) || flunk "holders: $holders"
  [[ $holders != "$HOLDER_PID" ]] || flunk "train.sh itself keeps the lock open: its children would inherit it"
  run -0 "$TRAIN" --render-only --set NUM_ROLLOUT=7 "$WORK/exp.env"
  grep -q "^NUM_ROLLOUT='7'$" "$RUN_DIR/env"
}

@test "issue 39: parallel --render-only of one experiment: no false edited copy, the script agrees with its env" {
  local trial
  for trial in 1 2 3 4 5 6; do
    rm -rf "$RUN_DIR"
    "$TRAIN" --render-only --set NUM_ROLLOUT=1 "$WORK/exp.env" >/dev/null 2>"$WORK/a.err" &
    local a=$!
    "$TRAIN" --render-only --set NUM_ROLLOUT=5 "$WORK/exp.env" >/dev/null 2>"$WORK/b.err" &
    local b=$!
    wait "$a" || flunk "trial $trial: A failed: $(cat "$WORK/a.err")"
    wait "$b" || flunk "trial $trial: B failed: $(cat "$WORK/b.err")"
    ! compgen -G "$RUN_DIR/*.edited-*" >/dev/null || flunk "trial $trial: false edited copies: $(ls -a "$RUN_DIR")"
    local rollout
    rollout=$(sed -n "s/^NUM_ROLLOUT='\(.*\)'$/\1/p" "$RUN_DIR/env")
    grep -q -- "--num-rollout $rollout\$" "$RUN_DIR/train.sh" || grep -q -- "--num-rollout $rollout " "$RUN_DIR/train.sh" ||
      flunk "trial $trial: train.sh disagrees with env (NUM_ROLLOUT=$rollout): $(grep -- --num-rollout "$RUN_DIR/train.sh")"
  done
}
