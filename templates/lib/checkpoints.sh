# shellcheck shell=bash
# checkpoints.sh: continue a run from its own checkpoints instead of starting over, and never
# start a run that would save over checkpoints it cannot resume from.

# resume_args SAVE_DIR: set RESUME_ARGS to `--load SAVE_DIR` when SAVE_DIR holds a Megatron
# checkpoint to continue from (latest_checkpointed_iteration.txt), and to nothing when SAVE_DIR
# holds no checkpoint. Rerunning train.sh after a crash then continues from the last saved
# rollout, with the optimizer state and the data position, instead of restarting from
# MODEL_DIR and saving over the earlier checkpoints. slime keeps a --load without that file as
# it is (bridge mode), so --load is passed only when there is something to resume from.
# A tracker Megatron would refuse, a tracker naming a checkpoint that is not there, and
# checkpoints without a tracker stop the run (status 2) before anything is started; the
# message says how to write the tracker, and nothing is removed.
resume_args() { # <save-dir>
  local save_dir=$1 tracker iteration
  tracker="$save_dir/latest_checkpointed_iteration.txt"
  # shellcheck disable=SC2034 # RESUME_ARGS is read by the script that sources this file
  RESUME_ARGS=()
  [[ -n $save_dir ]] || return 0
  if [[ ! -e $tracker && ! -L $tracker ]]; then
    refuse_untracked_checkpoints "$save_dir"
    return 0
  fi
  read_tracker "$tracker"
  iteration=$TRACKER_ITERATION
  if [[ ! -d $save_dir/$TRACKER_CHECKPOINT ]]; then
    die "$tracker names $TRACKER_CHECKPOINT, but $save_dir/$TRACKER_CHECKPOINT does not exist ($(tracker_fix "$save_dir"))" 2
  fi
  # shellcheck disable=SC2034 # (as above)
  RESUME_ARGS=(--load "$save_dir")
  if [[ $iteration == release ]]; then
    say "loading the release checkpoint $save_dir/release (weights only: Megatron starts the optimizer and the iteration count afresh)"
  else
    say "resuming from $save_dir (checkpoint of rollout $iteration)"
  fi
}

# read_tracker TRACKER: parse latest_checkpointed_iteration.txt the way Megatron's read_metadata
# does (megatron/training/checkpointing.py): surrounding whitespace stripped, then a positive
# integer (`int()` syntax: digits, an optional +, _ between digits), whose checkpoint is
# iter_<7-digit iteration>, or `release`, whose checkpoint is release/. Sets TRACKER_ITERATION
# (the number, or `release`) and TRACKER_CHECKPOINT (the directory name); exits 2 otherwise.
read_tracker() { # <tracker-file>
  local tracker=$1 content='' save_dir iteration=''
  save_dir=$(dirname -- "$tracker")
  [[ -f $tracker && ! -L $tracker ]] ||
    die "$tracker is not a regular file ($(tracker_fix "$save_dir"))" 2
  IFS= read -r -d '' -n 200 content <"$tracker" || true
  content=${content#"${content%%[![:space:]]*}"} # Python's str.strip()
  content=${content%"${content##*[![:space:]]}"}
  if [[ $content == release ]]; then
    TRACKER_ITERATION=release TRACKER_CHECKPOINT=release
    return 0
  fi
  if [[ $content =~ ^\+?([0-9]+(_[0-9]+)*)$ && ${BASH_REMATCH[1]//_/} =~ ^0*([0-9]{1,18})$ ]]; then
    iteration=$((10#${BASH_REMATCH[1]}))
  fi
  if [[ -z $iteration || $iteration == 0 ]]; then
    die "$tracker holds '$content', not a positive iteration number or 'release' ($(tracker_fix "$save_dir"))" 2
  fi
  TRACKER_ITERATION=$iteration
  printf -v TRACKER_CHECKPOINT 'iter_%07d' "$iteration"
}

# refuse_untracked_checkpoints SAVE_DIR: exit 2 when SAVE_DIR holds Megatron checkpoints
# (iter_<digits>/ or release/) but no tracker: Megatron would start from MODEL_DIR and save
# its new checkpoints (and a new tracker) in among the old ones.
refuse_untracked_checkpoints() { # <save-dir>
  local save_dir=$1
  newest_checkpoint "$save_dir"
  [[ -n $NEWEST_CHECKPOINT ]] || return 0
  die "$save_dir holds Megatron checkpoints (newest: $NEWEST_CHECKPOINT) but no latest_checkpointed_iteration.txt, so the run would start over and save in among them ($(tracker_fix "$save_dir"))" 2
}

# newest_checkpoint SAVE_DIR: set NEWEST_CHECKPOINT to the iter_<digits> directory of SAVE_DIR
# with the highest iteration, else to `release` when SAVE_DIR/release exists, else to nothing.
newest_checkpoint() { # <save-dir>
  local path best=-1 number
  NEWEST_CHECKPOINT=
  for path in "$1"/iter_*; do
    [[ -d $path && ${path##*/} =~ ^iter_([0-9]{1,18})$ ]] || continue
    number=$((10#${BASH_REMATCH[1]}))
    if ((number > best)); then
      best=$number
      NEWEST_CHECKPOINT=${path##*/}
    fi
  done
  if [[ -z $NEWEST_CHECKPOINT && -d $1/release ]]; then NEWEST_CHECKPOINT=release; fi
}

# tracker_fix SAVE_DIR: print how to repair the tracker (naming the newest checkpoint) or
# start over, keeping every checkpoint.
tracker_fix() { # <save-dir>
  local save_dir=$1 tracker="$1/latest_checkpointed_iteration.txt" what
  newest_checkpoint "$save_dir"
  if [[ $NEWEST_CHECKPOINT =~ ^iter_0*([0-9]+)$ ]]; then
    what=${BASH_REMATCH[1]}
  else
    what=$NEWEST_CHECKPOINT
  fi
  if [[ -n $what ]]; then
    printf 'to continue from the newest checkpoint write its iteration into the tracker: echo %s > %s; ' \
      "$what" "$(printf '%q' "$tracker")"
  else
    printf 'SAVE_DIR holds no Megatron checkpoint (iter_<N>/ or release/) to name in the tracker; '
  fi
  printf 'to start over, set SAVE_DIR (or EXP_ID) to a new directory; nothing in %s was removed' "$save_dir"
}
