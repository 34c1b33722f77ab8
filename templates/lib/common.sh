# shellcheck shell=bash
# common.sh: messages, errors and small checks shared by every rendered script.
# Sourced by the bats tests; bin/train copies the functions a script calls into runs/<EXP_ID>/*.sh.

# The library's Python is in templates/lib/*.py (checked by ruff and mypy), never inline.
# TOOLKIT_HELPER_DIR is where they are: the directory of the file that defines this library,
# that is templates/lib/ for the bats tests and bin/doctor (which source these files), and
# runs/<EXP_ID>/ for a rendered script (bin/train or bin/eval writes those it runs beside it).
TOOLKIT_HELPER_DIR=${TOOLKIT_HELPER_DIR:-$(CDPATH='' cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)}

# say MESSAGE...: one progress line on stderr with the script's fixed prefix.
say() {
  printf '%s: %s\n' "${TOOLKIT_PROG:-train.sh}" "$*" >&2
}

# die MESSAGE [STATUS]: print `<prog>: MESSAGE` to stderr and exit (default 1).
die() {
  printf '%s: %s\n' "${TOOLKIT_PROG:-train.sh}" "$1" >&2
  exit "${2:-1}"
}

# check_helpers NAME=DIGEST...: the Python helpers the script was rendered with are beside it.
# A missing one stops the script before it does anything (copy the whole run directory); one
# whose sha256 (first 12 digits) differs is named and used (your edit, or a later bin/train or
# bin/eval of the experiment from another checkout rewrote it: re-render to match). The script,
# its directory and every helper must be yours and writable by no one else (refuse_foreign_file):
# the helpers are run by path later, so whoever can change them decides what this script runs.
check_helpers() { # <name>=<digest>...
  local item name digest
  refuse_foreign_file "$TOOLKIT_HELPER_DIR"
  refuse_foreign_file "$(readlink -f -- "${BASH_SOURCE[-1]}")"
  for item in "$@"; do
    name=${item%%=*}
    [[ -r $TOOLKIT_HELPER_DIR/$name ]] ||
      die "$name is missing beside $TOOLKIT_PROG in $TOOLKIT_HELPER_DIR (copy the whole run directory: the script runs the Python helpers rendered beside it)"
    refuse_foreign_file "$TOOLKIT_HELPER_DIR/$name"
    command -v sha256sum >/dev/null 2>&1 || continue
    digest=$(sha256sum <"$TOOLKIT_HELPER_DIR/$name")
    [[ ${digest:0:12} == "${item#*=}" ]] ||
      say "warning: $TOOLKIT_HELPER_DIR/$name is not the one $TOOLKIT_PROG was rendered with (edited, or rewritten by a later render from another checkout); re-render to match"
  done
}

# refuse_foreign_file PATH: exit 2 before anything runs when PATH (the script, its directory,
# a helper) belongs to another user or others can write it (group or world writable).
refuse_foreign_file() { # <path>
  local owner mode
  read -r owner mode < <(stat -L -c '%u %a' -- "$1" 2>/dev/null) ||
    die "cannot read the owner and mode of $1 (copy the whole run directory to a directory of yours)" 2
  ((owner == EUID)) ||
    die "$1 belongs to $(id -nu "$owner" 2>/dev/null || printf 'uid %s' "$owner"), not to you: refusing to run what another user can change (re-render the run with bin/train, or copy the run directory to a directory of yours)" 2
  (((8#$mode & 8#022) == 0)) ||
    die "$1 is writable by other users (mode $mode): refusing to run what another user can change (chmod go-w $1)" 2
}

# require_tools TOOL...: exit 127 naming the first tool that is not on PATH.
require_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 ||
      die "$tool not found on PATH (install it, or activate the environment that has slime and Ray)" 127
  done
}

# env_is_set NAME: true when the environment variable NAME is set and non-empty.
# Only its length is expanded, so `set -x` never prints a secret's value.
env_is_set() { # <name>
  local -n _env_ref=$1
  [[ -v _env_ref ]] && ((${#_env_ref} > 0))
}

# refuse_link PATH: exit 2 when PATH is a symbolic link. The run directory is written only
# through files the toolkit created, never through a link to somebody else's file.
refuse_link() { # <path>
  [[ -L $1 ]] || return 0
  die "$1 is a symbolic link (to $(readlink -- "$1")); the toolkit never writes through a link it did not create (remove the link or move it out of the run directory; the file it points to is untouched)" 2
}

# start_logging LOG: copy everything the script prints (stdout and stderr) to LOG, after a
# line that marks this attempt (LOG keeps every earlier one). tee ignores INT and TERM: Ctrl-C
# and a TERM to the whole process group (Slurm, systemd) reach it too, and it must outlive
# the cleanup trap to log its messages; it exits when the script closes the pipe.
# LOG holds live session ids: it is created 0600 whatever the umask, and an earlier run's LOG
# loses its group and other bits (kept, never replaced). Its directory (the run directory,
# 0700) lets no one else plant a link between the check and the append.
start_logging() { # <log-file>
  local log=$1
  (umask 077 && mkdir -p "$(dirname "$log")") # a run directory made here is 0700, as bin/train makes it
  refuse_link "$log"
  (umask 077 && : >>"$log")
  chmod go= -- "$log"
  printf '===== %s: attempt started %s (pid %s) =====\n' \
    "$TOOLKIT_PROG" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" >>"$log"
  exec > >(trap '' INT TERM && exec tee -a "$log") 2>&1
  TOOLKIT_TEE_PID=$!
}

# new_results_dir BASE: create BASE/<UTC time> (0700; BASE too) and print its path. mkdir
# without -p fails when the name exists, so two evaluations started in the same second, or a
# name someone made there first, never share a directory: the next free <UTC time>-N is taken.
new_results_dir() { # <base>
  local base=$1 stamp dir number=1
  refuse_link "$base"
  (umask 077 && mkdir -p -- "$base") || die "cannot create $base (check the run directory's permissions)"
  chmod go= -- "$base"
  stamp=$(date -u +%Y%m%d-%H%M%S)
  dir=$base/$stamp
  until (umask 077 && mkdir -- "$dir" 2>/dev/null); do
    [[ -e $dir || -L $dir ]] || die "cannot create $dir (check the run directory's permissions)"
    number=$((number + 1))
    dir=$base/$stamp-$number
  done
  printf '%s\n' "$dir"
}

# stop_logging: close our ends of the log pipe and wait for tee to flush it.
stop_logging() {
  [[ -n ${TOOLKIT_TEE_PID:-} ]] || return 0
  exec >&- 2>&-
  wait "$TOOLKIT_TEE_PID" 2>/dev/null || true
}

# command_line PLACEHOLDER... -- WORD...: the WORDs on one line that bash reads back as the same
# words: each as it is when no character in it is special to the shell, else quoted (${WORD@Q}:
# '...', or $'...' for control characters). A WORD equal to a PLACEHOLDER (such as
# ${MODEL_ARGS[@]}, for what could not be built) is printed as it is.
command_line() { # <placeholder>... -- <word>...
  local -a placeholders=()
  local word line="" quoted placeholder
  while [[ $1 != -- ]]; do
    placeholders+=("$1")
    shift
  done
  shift
  for word; do
    quoted=${word@Q}
    [[ $word =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]] && quoted=$word
    for placeholder in "${placeholders[@]}"; do
      [[ $word == "$placeholder" ]] && quoted=$word
    done
    line+=${line:+ }$quoted
  done
  printf '%s\n' "$line"
}
