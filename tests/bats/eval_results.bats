#!/usr/bin/env bats
# Where bin/eval puts its results (issue 23, item 7): every evaluation gets a directory of its
# own, even two started in the same second (a `date` stub freezes the clock: the real eval.sh and
# its new_results_dir run; the SGLang server is tests/python/fakes/sglang_shim and the evaluation
# module a recording stub, as in eval.bats); a link planted at the results paths is passed over
# or refused, never written through; the results directories are 0700 whatever the umask.

load ../test_helper
load launcher

FROZEN=20300101-000000

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  write_env "$WORK/exp.env" "$WORK/install" "VAL_DATA_PATH='$WORK/install/data/gsm8k_test.jsonl'" \
    "NUM_GPUS=4" "EVAL_HEALTH_TIMEOUT=60" "SGLANG_DATA_PARALLEL_SIZE=1"
  RUN_DIR="$TOOLKIT_RUNS_DIR/bats-exp"
  export PYTHONPATH="$REPO_ROOT/tests/python/fakes/sglang_shim:$REPO_ROOT/tests/python"
  export FAKE_SGLANG_PIDS="$BATS_TEST_TMPDIR/server.pids" FAKE_SGLANG_ARGV="$BATS_TEST_TMPDIR/server.argv"
  export TOOLKIT_SERVER_GRACE=2
  stub nvidia-smi # a GPU node (bin/eval looks it up, never calls it here)
  stub pkill "exit 1"
  stub pgrep "exit 1"
  # the results directory's clock is frozen; every other use of date is the real one
  stub date "if [[ \$* == '-u +%Y%m%d-%H%M%S' ]]; then echo $FROZEN; else exec /bin/date \"\$@\"; fi"
  # python3 -m agentcore_slime.evaluate records its argv; any other python3 is the real one
  cat >"$STUB_DIR/python3" <<STUB
#!/usr/bin/env bash
if [[ \${1:-} == -m && \${2:-} == agentcore_slime.evaluate ]]; then
  { printf 'evaluate'; printf ' %q' "\${@:3}"; printf '\n'; } >>"\$CALL_LOG"
  exit 0
fi
exec "$TEST_PYTHON_DIR/python3" "\$@"
STUB
  chmod +x "$STUB_DIR/python3"
}

teardown() {
  local pid
  [[ -f $FAKE_SGLANG_PIDS ]] || return 0
  while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$FAKE_SGLANG_PIDS"
}

# out_dirs: the --out-dir of every recorded evaluation, one per line.
out_dirs() {
  calls evaluate | sed -n 's/.* --out-dir \([^ ]*\).*/\1/p'
}

# mode PATH: its permission bits, in octal.
mode() { stat -c %a -- "$1"; }

@test "two evaluations started in the same second get a directory each, 0700 under umask 000" {
  umask 000
  run -0 "$REPO_ROOT/bin/eval" "$WORK/exp.env"
  run -0 "$REPO_ROOT/bin/eval" "$WORK/exp.env"
  run out_dirs
  assert_output <<OUT
$RUN_DIR/eval/$FROZEN
$RUN_DIR/eval/$FROZEN-2
OUT
  local dir
  for dir in "$RUN_DIR" "$RUN_DIR/eval" "$RUN_DIR/eval/$FROZEN" "$RUN_DIR/eval/$FROZEN-2"; do
    [[ $(mode "$dir") == 700 ]] || flunk "$dir is mode $(mode "$dir")"
  done
  for file in "$RUN_DIR/eval.log" "$RUN_DIR/eval/$FROZEN/sglang.log" "$RUN_DIR/eval/$FROZEN-2/sglang.log" \
    "$RUN_DIR/toolkit.yaml" "$RUN_DIR/env"; do
    [[ $(mode "$file") == 600 ]] || flunk "$file is mode $(mode "$file")"
  done
}

@test "new_results_dir: 16 calls at once in the same second make 16 directories" {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  local n
  for n in $(seq 16); do new_results_dir "$WORK/eval" >"$WORK/made.$n" & done
  wait
  run -0 bash -c "cat '$WORK'/made.* | sort -u | wc -l"
  assert_output 16
  run -0 bash -c "ls '$WORK/eval' | wc -l"
  assert_output 16
}

@test "a link planted at the next results directory is passed over; the directory it points to is untouched" {
  mkdir -p "$RUN_DIR/eval" "$WORK/victim"
  ln -s "$WORK/victim" "$RUN_DIR/eval/$FROZEN"
  mkdir "$RUN_DIR/eval/$FROZEN-2"
  ln -s "$WORK/victim/sglang.log" "$RUN_DIR/eval/$FROZEN-2/sglang.log"
  run -0 "$REPO_ROOT/bin/eval" "$WORK/exp.env"
  run out_dirs
  assert_output "$RUN_DIR/eval/$FROZEN-3"
  run ls -A "$WORK/victim"
  assert_output ""
  [[ -L $RUN_DIR/eval/$FROZEN && -L $RUN_DIR/eval/$FROZEN-2/sglang.log ]]
}

@test "eval/ itself a link: refused before the server starts (exit 2); what it points to is untouched" {
  mkdir -p "$RUN_DIR" "$WORK/victim"
  ln -s "$WORK/victim" "$RUN_DIR/eval"
  run -2 --separate-stderr "$REPO_ROOT/bin/eval" "$WORK/exp.env"
  [[ $stderr == *"eval.sh: $RUN_DIR/eval is a symbolic link (to $WORK/victim); the toolkit never writes through a link it did not create"* ]] ||
    flunk "$stderr"
  run ls -A "$WORK/victim"
  assert_output ""
  [[ ! -e $FAKE_SGLANG_PIDS ]] || flunk "the server was started"
  run calls evaluate
  assert_output ""
}
