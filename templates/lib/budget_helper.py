"""The lines a run that BUDGET_USD stopped ends with (templates/lib/budget.sh, budget_stop_lines).

Run as ``python3 budget_helper.py MARKER COMMAND PROG`` (standard library only): what was
spent, of what budget, after how many steps, the checkpoint to resume from and the command that
resumes with a budget for the remaining steps. Whatever MARKER (runs/<EXP_ID>/budget-stop.json)
holds (unreadable, a figure that is not a finite number), the lines are printed: an unknown
figure says so, and the resume command then names no budget.
"""

from __future__ import annotations

import json
import math
import shlex
import sys


def read_stop(marker: str) -> dict[str, object]:
    """The marker's object (an unreadable one: its ``why`` says so)."""
    try:
        with open(marker, encoding="utf-8") as handle:
            stop = json.load(handle)
    except (OSError, ValueError) as err:
        stop = {"why": f"{marker} is unreadable: {err}"}
    return stop if isinstance(stop, dict) else {}


def number(stop: dict[str, object], key: str) -> float | None:
    """``stop[key]`` as a finite float, else None."""
    value = stop.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None


def count(stop: dict[str, object], key: str) -> int | None:
    """``stop[key]`` as a count (a whole number >= 0), else None."""
    value = number(stop, key)
    return int(value) if value is not None and value >= 0 and value == int(value) else None


def usd(value: float | None) -> str:
    return "$?" if value is None else f"${value:,.2f}"


def resume_command(command: str, needed: int | None) -> str:
    """``command`` without --render-only / --dry-run and, a new budget known, with it."""
    try:
        given = shlex.split(command)
    except ValueError:
        given = command.split()
    words = []
    while given:
        word = given.pop(0)
        if word == "--set" and given and given[0].startswith("BUDGET_USD=") and needed is not None:
            given.pop(0)
        elif word not in ("--render-only", "--dry-run"):
            words.append(word)
    budget_flag = [] if needed is None else ["--set", f"BUDGET_USD={needed}"]
    return shlex.join([*words[:1], *budget_flag, *words[1:]])


def stop_lines(stop: dict[str, object], command: str, prog: str) -> list[str]:
    """The four lines (see the module's docstring)."""
    spent, budget = number(stop, "spent_usd"), number(stop, "budget_usd")
    per_step = number(stop, "per_step_usd")
    done = count(stop, "steps_done")
    total = count(stop, "num_rollout") or done
    left = max(total - done, 0) if total is not None and done is not None else None
    needed = None
    if spent is not None and spent >= 0 and left is not None:
        total_usd = spent + (per_step or 0) * left
        if math.isfinite(total_usd):
            needed = math.ceil(total_usd + 0.5)
    saved = count(stop, "last_saved_step")  # slime saves rollout N as iter_<N, 7 digits>
    where = "none: the run starts from MODEL_DIR"
    if saved is not None:
        where = f"{stop.get('save_dir') or 'SAVE_DIR'}/iter_{saved:07d} (rollout {saved})"
    steps = "?" if done is None else done
    of = "?" if total is None else total
    remaining = "the" if left is None else f"the {left}"
    return [
        f"{prog}: stopped by BUDGET_USD: {usd(spent)} spent of {usd(budget)} after {steps} of {of} steps",
        f"{prog}: ({stop.get('why', '')})",
        f"{prog}: checkpoint to resume from: {where}",
        f"{prog}: to go on, with a budget for {remaining} remaining steps: {resume_command(command, needed)}",
    ]


def main(argv: list[str]) -> None:
    marker, command, prog = argv[:3]
    for line in stop_lines(read_stop(marker), command, prog):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
