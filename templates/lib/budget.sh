# shellcheck shell=bash
# budget.sh: a run that BUDGET_USD stopped ends with its own exit status, and says what it spent
# and how to go on.
#
# The rollout (python/agentcore_slime/rollout/costs.py) decides before each training step; when
# the budget cannot pay for what comes next it writes runs/<EXP_ID>/budget-stop.json and raises
# BudgetExhausted, which ends slime's job right after the previous step's save. The job then
# fails like any other: the marker is what tells the two apart.

# the exit status of a run the budget stopped (docs/launcher.md; costs.BUDGET_EXIT_STATUS)
BUDGET_EXIT_STATUS=3
BUDGET_MARKER=budget-stop.json

# clear_budget_stop RUN_DIR: a new attempt forgets the previous stop (train.log keeps its lines).
clear_budget_stop() { # <run-dir>
  local marker=$1/$BUDGET_MARKER
  if [[ -e $marker || -L $marker ]]; then rm -f -- "$marker"; fi
}

# job_status STATUS RUN_DIR COMMAND: return the job's STATUS, or, when the job failed because
# the budget stopped it (the rollout's marker is there), print the stop and return
# BUDGET_EXIT_STATUS (the script's last command: its status is the script's). COMMAND is the
# bin/train command that rendered this script.
job_status() { # <status> <run-dir> <command>
  local status=$1 marker=$2/$BUDGET_MARKER
  if [[ $status != 0 && -f $marker && ! -L $marker ]]; then
    budget_stop_lines "$marker" "$3" >&2
    return "$BUDGET_EXIT_STATUS"
  fi
  return "$status"
}

# budget_stop_lines MARKER COMMAND: what was spent, of what budget, after how many steps, the
# checkpoint to resume from and the command that resumes with a budget for the remaining steps.
# Whatever the marker holds (unreadable, a figure that is not a finite number), the lines are
# printed: an unknown figure says so, and the resume command then names no budget (budget_helper.py).
budget_stop_lines() { # <marker> <command>
  python3 "$TOOLKIT_HELPER_DIR/budget_helper.py" "$1" "$2" "${TOOLKIT_PROG:-train.sh}"
}
