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
budget_stop_lines() { # <marker> <command>
  python3 - "$1" "$2" "${TOOLKIT_PROG:-train.sh}" <<'PY'
import json, math, shlex, sys
marker, command, prog = sys.argv[1:4]
with open(marker, encoding="utf-8") as handle:
    stop = json.load(handle)
spent, budget, done = stop["spent_usd"], stop["budget_usd"], stop["steps_done"]
total = stop.get("num_rollout") or done
left = max(total - done, 0)
needed = math.ceil(spent + (stop.get("per_step_usd") or 0) * left + 0.5)
saved = stop.get("last_saved_step")  # slime saves rollout N as iter_<N, 7 digits>
where = "none: the run starts from MODEL_DIR"
if saved is not None:
    where = f"{stop.get('save_dir') or 'SAVE_DIR'}/iter_{saved:07d} (rollout {saved})"
words, given = [], shlex.split(command)
while given:  # the same command, without --render-only / --dry-run and any earlier BUDGET_USD
    word = given.pop(0)
    if word == "--set" and given and given[0].startswith("BUDGET_USD="):
        given.pop(0)
    elif word not in ("--render-only", "--dry-run"):
        words.append(word)
resume = shlex.join([words[0], "--set", f"BUDGET_USD={needed}", *words[1:]])
print(f"{prog}: stopped by BUDGET_USD: ${spent:,.2f} spent of ${budget:,.2f} after {done} of {total} steps")
print(f"{prog}: ({stop.get('why', '')})")
print(f"{prog}: checkpoint to resume from: {where}")
print(f"{prog}: to go on, with a budget for the {left} remaining steps: {resume}")
PY
}
