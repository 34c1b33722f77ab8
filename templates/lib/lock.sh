# shellcheck shell=bash
# lock.sh: this user's private node-local directory, the kernel locks kept in it (one run per
# Ray, bin/eval against training), and the marker that the processes of a run carry.
#
# Shared nodes: nothing here lives in a place another user can write. The directory is
# /tmp/agentcore-slime-<uid> (node-local: a home on NFS is shared by head and workers), made
# mode 0700 and refused if anyone else made it. A lock is flock(2) on a file in it: the kernel
# releases it when its holder dies (no PID reuse, no takeover race); the file is never
# unlinked (unlink + re-create would let two runs lock different inodes). The lock is held by
# a small python3 child that opened the file without following links (O_NOFOLLOW) and
# close-on-exec, and that dies with this script (PR_SET_PDEATHSIG): no other child of the
# script (`ray start --block`, Ray's daemons, background loops) ever has the locked file open.

# toolkit_runtime_dir: this user's private node-local directory (TOOLKIT_RUNTIME_DIR overrides).
toolkit_runtime_dir() {
  printf '%s' "${TOOLKIT_RUNTIME_DIR:-/tmp/agentcore-slime-$(id -u)}"
}

# owner_name UID: the user name of UID (the number when it has none).
owner_name() { # <uid>
  getent passwd "$1" 2>/dev/null | cut -d: -f1 | grep . || printf 'uid %s' "$1"
}

# ensure_private_dir DIR: make DIR mode 0700, or accept an existing DIR only when it is a real
# directory (not a link) of this uid that no one else can write, in a parent where no one else
# can rename it away (not writable by others, or sticky like /tmp). Exit 2 naming the problem.
ensure_private_dir() { # <dir>
  local dir=${1%/} parent uid owner mode type
  uid=$(id -u)
  parent=$(dirname "$dir")
  read -r mode type < <(stat -c '%a %F' -- "$parent" 2>/dev/null) ||
    die "cannot create $dir: $parent does not exist (set TOOLKIT_RUNTIME_DIR to a directory of yours on this node)" 2
  if (((8#$mode & 8#022) != 0 && (8#$mode & 8#1000) == 0)); then
    die "$parent is writable by other users and not sticky (mode $mode): $dir would not be private (set TOOLKIT_RUNTIME_DIR to a directory under one only you can write)" 2
  fi
  mkdir -m 700 -- "$dir" 2>/dev/null || true
  read -r owner mode type < <(stat -c '%u %a %F' -- "$dir" 2>/dev/null) ||
    die "cannot create $dir (set TOOLKIT_RUNTIME_DIR to a directory of yours on this node)" 2
  [[ $type == directory ]] ||
    die "$dir is a $type, not a directory of yours: refusing to use it (remove it, or set TOOLKIT_RUNTIME_DIR)" 2
  [[ $owner == "$uid" ]] ||
    die "$dir belongs to $(owner_name "$owner"), not to you: another user made it, so the toolkit cannot keep its locks there (ask them or root to remove it, or set TOOLKIT_RUNTIME_DIR to a directory only you can write)" 2
  (((8#$mode & 8#022) == 0)) ||
    die "$dir is writable by other users (mode $mode): refusing it (chmod 700 $dir)" 2
}

# lock_slot KIND KEY: the name of a lock (and of the marker of the processes under it):
# KIND plus a hash of KEY (a Ray temp dir, a GPU list), e.g. ray-3f2a9c0d41b6e7f8.
lock_slot() { # <kind> <key>
  local sum
  sum=$(printf '%s' "$2" | sha256sum)
  printf '%s-%s' "$1" "${sum:0:16}"
}

# The lock helper: lock_helper.py (python3 -I -S, in TOOLKIT_HELPER_DIR) holds LOCK (`hold`:
# prints `locked` and stays until it is killed or this script dies) or probes it (`probe`:
# prints `free`); `held <first line of the file>` when another process holds it, `error
# <reason>` when LOCK is unsafe (a link, not a plain file of this uid). TOOLKIT_LOCK_HELPER
# overrides its path.

# take_lock LOCK INFO: hold the kernel lock LOCK for the rest of this script (INFO, e.g.
# "PID EXP_ID", is written into it for the message of a run that finds it held). Returns 0
# when held (TOOLKIT_LOCK_PID = the holder), 1 when another process holds it (TOOLKIT_LOCK_HOLDER
# = its INFO); exits 2 when LOCK is unsafe. Only one lock per script.
take_lock() { # <lock-file> <info>
  local reply="" me=$BASHPID fd
  TOOLKIT_LOCK_HOLDER=
  exec {fd}< <(exec python3 -I -S "${TOOLKIT_LOCK_HELPER:-$TOOLKIT_HELPER_DIR/lock_helper.py}" "$1" hold "$2" "$me" "${TOOLKIT_LOCK_WAIT:-1}" </dev/null)
  TOOLKIT_LOCK_PID=$!
  read -r reply <&"$fd" || true
  exec {fd}<&-
  case $reply in
    locked) return 0 ;;
    held*) TOOLKIT_LOCK_HOLDER=${reply#held} ;;
    "error "*) release_lock && die "${reply#error }" 2 ;;
    *) release_lock && die "could not take the lock $1 (python3 failed: see above)" ;;
  esac
  release_lock
  TOOLKIT_LOCK_HOLDER=${TOOLKIT_LOCK_HOLDER# }
  return 1
}

# hold_run_dir_lock RUN_DIR EXP_ID: hold RUN_DIR/.run.lock, the run directory's kernel lock, for
# the rest of this script, beside the node's lock (python/agentcore_slime/rundir.py: bin/train
# takes it before it writes a file of the run, and refuses a run directory whose run holds it).
# bin/train hands over the lock it holds as the descriptor TOOLKIT_RUN_LOCK_FD: the helper
# adopts it, this script closes its copy, and no moment passes without a holder; run with
# bash alone, the script takes the lock itself. Exits 1 naming the holder when it is held.
hold_run_dir_lock() { # <run-dir> <exp-id>
  local lock=$1/.run.lock reply="" me=$BASHPID fd given=${TOOLKIT_RUN_LOCK_FD:-} holder_pid
  unset TOOLKIT_RUN_LOCK_FD
  [[ $given =~ ^[0-9]+$ ]] || given=-1
  exec {fd}< <(exec python3 -I -S "${TOOLKIT_LOCK_HELPER:-$TOOLKIT_HELPER_DIR/lock_helper.py}" "$lock" hold "$$ $2 train.sh" "$me" "${TOOLKIT_LOCK_WAIT:-1}" "$given" </dev/null)
  read -r reply <&"$fd" || true
  exec {fd}<&-
  if ((given > 2)) && [[ -e /proc/$$/fd/$given ]]; then
    exec {given}>&- # the helper holds the lock now: no other child of this script gets it
  fi
  case $reply in
    locked) return 0 ;;
    held*) read -r holder_pid _ <<<"${reply#held}" ;;
    "error "*) die "${reply#error }" 2 ;;
    *) die "could not take the lock $lock (python3 failed: see above)" ;;
  esac
  die "another run of this experiment uses $1: PID ${holder_pid:-?} (wait for it to end, or stop it with 'kill ${holder_pid:-PID}')"
}

# probe_lock LOCK: true when no one holds LOCK (or it does not exist); otherwise false with
# TOOLKIT_LOCK_HOLDER = the holder's INFO. Takes nothing.
probe_lock() { # <lock-file>
  local reply
  TOOLKIT_LOCK_HOLDER=
  [[ -e $1 || -L $1 ]] || return 0
  reply=$(python3 -I -S "${TOOLKIT_LOCK_HELPER:-$TOOLKIT_HELPER_DIR/lock_helper.py}" "$1" probe "" "$BASHPID" 0 </dev/null) || true
  case $reply in
    free) return 0 ;;
    held*) TOOLKIT_LOCK_HOLDER=${reply#held} TOOLKIT_LOCK_HOLDER=${TOOLKIT_LOCK_HOLDER# } && return 1 ;;
    "error "*) die "${reply#error }" 2 ;;
    *) die "could not check the lock $1 (python3 failed: see above)" ;;
  esac
}

# release_lock: let go of the lock this script holds (the file stays: never unlinked).
release_lock() {
  local pid=${TOOLKIT_LOCK_PID:-}
  TOOLKIT_LOCK_PID=
  [[ -n $pid ]] || return 0
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# run_marker_env SLOT: the environment entry that marks every process a run starts under the
# lock SLOT (Ray's daemons and workers inherit it from `ray start`, SGLang engines and the
# router from the Ray workers that start them; bin/eval's SGLang from eval.sh).
run_marker_env() { # <slot>
  printf 'AGENTCORE_SLIME_RUN=%s' "$1"
}

# acquire_eval_lock NAME: bin/eval's lock, one evaluation per GPU set (CUDA_VISIBLE_DEVICES, or
# all): a held eval lock is refused naming that evaluation. With CUDA_VISIBLE_DEVICES unset the
# evaluation would use this node's GPUs from 0 up, as training does: refused, naming the run,
# while one of this user's training runs holds its lock here. The own lock is taken before the
# others are looked at, as training does (refuse_beside_evaluations): of an evaluation and a
# training run starting together, at least one sees the other. Sets TOOLKIT_RUN_SLOT.
acquire_eval_lock() { # <name>
  local dir gpus=${CUDA_VISIBLE_DEVICES:-all} holder_pid holder_name
  dir=$(toolkit_runtime_dir)
  ensure_private_dir "$dir"
  # the runtime dir in the key too: one user's evaluations under two runtime dirs (two test
  # runs side by side) never stop each other's servers (the slot is also their marker)
  TOOLKIT_RUN_SLOT=$(lock_slot eval "$dir $gpus")
  if ! take_lock "$dir/$TOOLKIT_RUN_SLOT.lock" "$$ $1 $gpus"; then
    read -r holder_pid holder_name _ <<<"$TOOLKIT_LOCK_HOLDER"
    die "another evaluation uses these GPUs ($gpus): ${holder_name:-?} (PID ${holder_pid:-?}) (wait for it to end, or set CUDA_VISIBLE_DEVICES to other GPUs)"
  fi
  if [[ $gpus != all ]]; then
    say "evaluating on GPUs $gpus (CUDA_VISIBLE_DEVICES): not checking for a training run here"
    return 0
  fi
  held_lock_among "$dir" ray || return 0
  release_lock
  read -r holder_pid holder_name <<<"$TOOLKIT_LOCK_HOLDER"
  die "training run ${holder_name:-?} (PID ${holder_pid:-?}) uses this node's GPUs (wait for it to end, or give this evaluation GPUs of its own: CUDA_VISIBLE_DEVICES=6,7 bin/eval ...)"
}

# refuse_beside_evaluations: a training run uses this node's GPUs from 0 up unless
# CUDA_VISIBLE_DEVICES says which: refused, naming it, while one of this user's evaluations
# holds its lock here (any GPU set: it may be one of training's). Called with the run lock held.
refuse_beside_evaluations() {
  local holder_pid holder_name holder_gpus
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    say "training on GPUs $CUDA_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES): not checking for an evaluation here"
    return 0
  fi
  held_lock_among "$(toolkit_runtime_dir)" eval || return 0
  release_lock
  read -r holder_pid holder_name holder_gpus <<<"$TOOLKIT_LOCK_HOLDER"
  die "evaluation ${holder_name:-?} (PID ${holder_pid:-?}) uses this node's GPUs ${holder_gpus:-} (wait for it to end, or give this run GPUs of its own: CUDA_VISIBLE_DEVICES=0,1,2,3 bin/train ...)"
}

# held_lock_among DIR KIND: true when one of the KIND-*.lock locks in DIR is held (then
# TOOLKIT_LOCK_HOLDER = its holder's INFO); false when none is. Takes nothing.
held_lock_among() { # <dir> <kind>
  local lock
  for lock in "$1/$2"-*.lock; do
    [[ -f $lock ]] || continue
    probe_lock "$lock" || return 0
  done
  return 1
}
