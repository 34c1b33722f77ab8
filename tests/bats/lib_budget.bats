#!/usr/bin/env bats
# templates/lib/budget.sh, sourced directly: a run BUDGET_USD stopped exits 3 and says how to go on;
# any other end keeps the job's status. (tests/python/rollout/test_costs.py feeds it the marker the
# real rollout writes.)

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/budget.sh
  source "$LIB_DIR/budget.sh"
  TOOLKIT_PROG=train.sh
  mkdir -p "$WORK/run"
}

write_marker() {
  cat >"$WORK/run/budget-stop.json" <<'JSON'
{"spent_usd": 80.5, "budget_usd": 100.0, "steps_done": 4, "num_rollout": 10,
 "last_saved_step": 3, "per_step_usd": 20.0, "save_dir": "/ckpt dir", "why": "the next save is 2 step(s) away"}
JSON
}

@test "the budget's marker: exit 3 with what was spent, the checkpoint and the resume command" {
  write_marker
  run -3 job_status 1 "$WORK/run" "bin/train --render-only --set BUDGET_USD=100 --set NUM_ROLLOUT=10 'my exp.env'"
  assert_output <<OUT
train.sh: stopped by BUDGET_USD: \$80.50 spent of \$100.00 after 4 of 10 steps
train.sh: (the next save is 2 step(s) away)
train.sh: checkpoint to resume from: /ckpt dir/iter_0000003 (rollout 3)
train.sh: to go on, with a budget for the 6 remaining steps: bin/train --set BUDGET_USD=201 --set NUM_ROLLOUT=10 'my exp.env'
OUT
}

@test "without the marker, or when the job succeeded, the job's status stands" {
  run -1 job_status 1 "$WORK/run" "bin/train x.env"
  assert_output ""
  write_marker
  run -0 job_status 0 "$WORK/run" "bin/train x.env"
  assert_output ""
  mkdir "$WORK/linked" && ln -s "$WORK/run/budget-stop.json" "$WORK/linked/budget-stop.json"
  run -1 job_status 1 "$WORK/linked" "bin/train x.env" # a link is not the rollout's marker
}

@test "clear_budget_stop removes the previous stop's marker, and nothing else" {
  write_marker
  touch "$WORK/run/metrics.jsonl"
  clear_budget_stop "$WORK/run"
  [[ ! -e $WORK/run/budget-stop.json && -e $WORK/run/metrics.jsonl ]]
  clear_budget_stop "$WORK/run" # nothing to remove: fine
}
