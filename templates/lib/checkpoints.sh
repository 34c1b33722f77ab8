# shellcheck shell=bash
# checkpoints.sh: continue a run from its own checkpoints instead of starting over.

# resume_args SAVE_DIR: set RESUME_ARGS to `--load SAVE_DIR` when SAVE_DIR holds a Megatron
# checkpoint (latest_checkpointed_iteration.txt), and to nothing otherwise. Rerunning
# train.sh after a crash then continues from the last saved rollout, with the optimizer
# state and the data position, instead of restarting from MODEL_DIR and saving over the
# earlier checkpoints. slime keeps a --load without that file as it is (bridge mode), so
# --load is passed only when there is something to resume from.
resume_args() { # <save-dir>
  local save_dir=$1 marker iteration
  marker="$save_dir/latest_checkpointed_iteration.txt"
  # shellcheck disable=SC2034 # RESUME_ARGS is read by the script that sources this file
  RESUME_ARGS=()
  [[ -n $save_dir && -f $marker ]] || return 0
  iteration=$(<"$marker")
  [[ $iteration =~ ^[0-9]+$ ]] ||
    die "$marker holds '$iteration', not an iteration number (remove the file to start over, keeping the checkpoints)" 2
  # shellcheck disable=SC2034 # (as above)
  RESUME_ARGS=(--load "$save_dir")
  say "resuming from $save_dir (checkpoint of rollout $iteration)"
}
