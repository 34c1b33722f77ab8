#!/usr/bin/env bats
# bin/doctor end to end: usage and env-file errors, a stubbed nvidia-smi, the model-script
# check through the real bash sourcing, and bin/train stopping before any process is touched.
# The job's python is the test venv's python3 with a stand-in slime parser on PYTHONPATH.

load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  # a model directory whose config.json disagrees with the fixture script's --norm-epsilon 1e-6
  echo '{"model_type": "qwen2", "num_hidden_layers": 36, "rms_norm_eps": 1e-5}' >"$WORK/install/model/config.json"
  write_env "$WORK/exp.env" "$WORK/install" "AGENT_RUNTIME_ARN=" "AGENT_URL=http://127.0.0.1:8080" "GATEWAY_PORT=0"
  export PYTHONPATH="$REPO_ROOT/tests/fixtures/doctor/job_site"
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub nvidia-smi 'for i in 0 1 2 3 4 5 6 7; do echo "$i, 81559, 81000"; done'
  DOCTOR="$REPO_ROOT/bin/doctor"
}

@test "no argument: the usage line on stderr, exit 2" {
  run -2 --separate-stderr "$DOCTOR"
  [[ -z $output ]] || flunk "stdout not empty: $output"
  [[ $stderr == "Usage: bin/doctor [--offline] [--json]"* ]] || flunk "stderr: $stderr"
}

@test "an invalid env file: bin/train's messages, exit 2, nothing checked" {
  printf 'EXP_ID=x\nNUM_GPUS=zero\n' >"$WORK/bad.env"
  run -2 --separate-stderr "$DOCTOR" "$WORK/bad.env"
  [[ -z $output ]] || flunk "stdout not empty: $output"
  [[ $stderr == *"bin/doctor: NUM_GPUS='zero' ($WORK/bad.env:2): not an integer"* ]] || flunk "$stderr"
  refute_calls
}

@test "one line per check; the model-script mismatch fails with its fix; nvidia-smi queried" {
  run -1 --separate-stderr "$DOCTOR" --offline "$WORK/exp.env"
  assert_line "PASS gpus.count: 8 GPUs (NUM_GPUS=8), memory free"
  assert_line "PASS model.num-layers: --num-layers 36 matches config.json"
  assert_line "FAIL model.norm-epsilon: the command line has --norm-epsilon 1e-6 (qwen-spaces.sh and EXTRA_FLAGS) but config.json has 1e-5 (fix: add --norm-epsilon 1e-5 to EXTRA_FLAGS (a later flag overrides the model script's))"
  local line
  for line in "${lines[@]}"; do
    [[ $line =~ ^(PASS|WARN|FAIL)\ [a-z]+\.[A-Za-z0-9_.-]+:\ . ]] || flunk "not a result line: $line"
    [[ $line != WARN* && $line != FAIL* ]] || [[ $line == *"(fix: "* ]] || flunk "no fix: $line"
  done
  [[ $stderr == "bin/doctor: "*" failed" ]] || flunk "$stderr"
  [[ $(calls nvidia-smi) == "nvidia-smi --query-gpu=index"*" --format=csv"* ]] || flunk "$(calls)"
}

@test "--json prints the same results as one document" {
  run -1 --separate-stderr "$DOCTOR" --offline --json "$WORK/exp.env"
  python3 - "$output" <<'PY'
import json, sys
doc = json.loads(sys.argv[1])
assert doc["failed"] == sum(c["status"] == "FAIL" for c in doc["checks"]) >= 1
assert any(c["check"] == "model.norm-epsilon" and c["status"] == "FAIL" for c in doc["checks"])
PY
}

@test "bin/train runs the blocking checks first: a failing one stops it before any stub is called" {
  stub_cluster
  run -1 --separate-stderr "$REPO_ROOT/bin/train" "$WORK/exp.env"
  [[ $stderr == *"bin/train: doctor: FAIL model.norm-epsilon: "* ]] || flunk "$stderr"
  [[ -z $(calls ray) && -z $(calls pkill) ]] || flunk "$(calls)"
  [[ ! -e $TOOLKIT_RUNS_DIR/bats-exp/train.sh ]]
  run -0 "$REPO_ROOT/bin/train" --set "EXTRA_FLAGS=--norm-epsilon 1e-5" "$WORK/exp.env"
  [[ -n $(calls ray) ]]
}
