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
# printed: an unknown figure says so, and the resume command then names no budget.
budget_stop_lines() { # <marker> <command>
  python3 - "$1" "$2" "${TOOLKIT_PROG:-train.sh}" <<'PY'
import json, math, shlex, sys
marker, command, prog = sys.argv[1:4]
try:
    with open(marker, encoding="utf-8") as handle:
        stop = json.load(handle)
except (OSError, ValueError) as err:
    stop = {"why": f"{marker} is unreadable: {err}"}
stop = stop if isinstance(stop, dict) else {}

def number(key):
    value = stop.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None

def usd(value):
    return "$?" if value is None else f"${value:,.2f}"

def count(key):
    value = number(key)
    return int(value) if value is not None and value >= 0 and value == int(value) else None

spent, budget, per_step = number("spent_usd"), number("budget_usd"), number("per_step_usd")
done = count("steps_done")
total = count("num_rollout") or done
left = max(total - done, 0) if total is not None and done is not None else None
needed = None
if spent is not None and spent >= 0 and left is not None and math.isfinite(spent + (per_step or 0) * left):
    needed = math.ceil(spent + (per_step or 0) * left + 0.5)
saved = count("last_saved_step")  # slime saves rollout N as iter_<N, 7 digits>
where = "none: the run starts from MODEL_DIR"
if saved is not None:
    where = f"{stop.get('save_dir') or 'SAVE_DIR'}/iter_{saved:07d} (rollout {saved})"
try:
    given = shlex.split(command)
except ValueError:
    given = command.split()
words = []
while given:  # the same command, without --render-only / --dry-run and (a new one known) BUDGET_USD
    word = given.pop(0)
    if word == "--set" and given and given[0].startswith("BUDGET_USD=") and needed is not None:
        given.pop(0)
    elif word not in ("--render-only", "--dry-run"):
        words.append(word)
budget_flag = [] if needed is None else ["--set", f"BUDGET_USD={needed}"]
resume = shlex.join([*words[:1], *budget_flag, *words[1:]])
steps = "?" if done is None else done
of = "?" if total is None else total
print(f"{prog}: stopped by BUDGET_USD: {usd(spent)} spent of {usd(budget)} after {steps} of {of} steps")
print(f"{prog}: ({stop.get('why', '')})")
print(f"{prog}: checkpoint to resume from: {where}")
remaining = "the" if left is None else f"the {left}"
print(f"{prog}: to go on, with a budget for {remaining} remaining steps: {resume}")
PY
}
