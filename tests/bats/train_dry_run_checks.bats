#!/usr/bin/env bats
# bin/train --dry-run makes the checks a real run makes before it starts anything (bin/doctor's
# blocking ones: model, data, the gateway's address, disk, AWS credentials), says what it did not
# check and which command does, and puts the rendered script's own stop before the cost lines.

bats_require_minimum_version 1.5.0
load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  stub_cluster
  TRAIN="$REPO_ROOT/bin/train"
}

@test "--dry-run: what only a run found (a .json data file, a loopback gateway for an ACR agent) FAILs, exit 1" {
  cp "$WORK/install/data/train.jsonl" "$WORK/install/data/train.json"
  write_env "$WORK/exp.env" "$WORK/install" "DATA_PATH='$WORK/install/data/train.json'" "GATEWAY_HOST=127.0.0.1"
  run -1 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == *"bin/train: doctor: FAIL data.DATA_PATH: $WORK/install/data/train.json ends in .json: slime reads a data file by its name"* ]] ||
    flunk "$stderr"
  [[ $stderr == *"bin/train: doctor: FAIL rollout.gateway-address: GATEWAY_HOST=127.0.0.1 is a loopback address"* ]] ||
    flunk "$stderr"
  [[ $stderr == *"bin/train: dry run: a real run stops at the FAIL lines above, before it starts anything"* ]] ||
    flunk "$stderr"
  [[ ${stderr##*$'\n'} == "bin/train: dry run: not checked here: the GPUs, the job's python and its slime stack, slime's flags, ports and AWS access: bin/doctor $WORK/exp.env checks them" ]] ||
    flunk "$stderr"
  [[ $output == "python3 $WORK/install/slime/train.py "* ]] || flunk "$output" # the command is still printed
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "--dry-run of a good env file: the checks pass in one line, exit 0" {
  write_env "$WORK/exp.env" "$WORK/install"
  run -0 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == *"bin/train: doctor: "*" checks a real run makes first passed"* ]] || flunk "$stderr"
  [[ $stderr != *"doctor: FAIL"* ]] || flunk "$stderr"
}

@test "--dry-run with an empty checkpoints/iter_0000001/: the script's reason comes before the cost lines" {
  write_env "$WORK/exp.env" "$WORK/install"
  mkdir -p "$TOOLKIT_RUNS_DIR/bats-exp/checkpoints/iter_0000001"
  run -2 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  local reason cost
  reason=$(grep -n "holds Megatron checkpoints (newest: iter_0000001)" <<<"$stderr" | cut -d: -f1)
  cost=$(grep -n "bin/train: expected cost: " <<<"$stderr" | cut -d: -f1)
  [[ -n $reason && -n $cost ]] || flunk "$stderr"
  ((reason < cost)) || flunk "the reason (line $reason) after the cost (line $cost): $stderr"
}
