# Loaded by every .bats file: a sealed environment, command stubs that record
# their argv, and a few rbenv-style assertions.
# shellcheck shell=bash
# status, output and lines are set by bats' run:
# shellcheck disable=SC2154

bats_require_minimum_version 1.5.0

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export REPO_ROOT

# python3 with the test requirements (the venv tests/run put first on PATH)
TEST_PYTHON_DIR=$(dirname "$(command -v python3)")

setup() {
  export HOME="$BATS_TEST_TMPDIR/home"
  export WORK="$BATS_TEST_TMPDIR/work"
  export STUB_DIR="$BATS_TEST_TMPDIR/bin"
  export CALL_LOG="$BATS_TEST_TMPDIR/calls.log"
  mkdir -p "$HOME" "$WORK" "$STUB_DIR"
  : >"$CALL_LOG"
  # stubs first, then the repo's commands, then python, then the system
  export PATH="$STUB_DIR:$REPO_ROOT/bin:$TEST_PYTHON_DIR:/usr/local/bin:/usr/bin:/bin"
  local var
  for var in $(compgen -e); do
    case "$var" in
      TOOLKIT_* | RAY_* | XDG_* | CUDA_VISIBLE_DEVICES | CUDA_HOME | LD_LIBRARY_PATH | WANDB_* | AWS_* | VIRTUAL_ENV | CONDA_*)
        unset "$var"
        ;;
    esac
  done
  # this test's own private runtime dir (the run locks): never the user's, where a real run of
  # theirs on this node holds its locks (templates/lib/lock.sh; a test may set another)
  export TOOLKIT_RUNTIME_DIR="$BATS_TEST_TMPDIR/rt"
  cd "$WORK" || return 1
  if declare -F _setup >/dev/null; then _setup; fi
}

# stub NAME [BODY]: put an executable NAME first on PATH. It appends one line,
# `NAME <argv, shell-quoted>`, to $CALL_LOG, then runs BODY (default: exit 0).
stub() {
  local name=$1 body=${2:-exit 0}
  cat >"$STUB_DIR/$name" <<STUB
#!/usr/bin/env bash
{ printf '%s' $(printf '%q' "$name"); printf ' %q' "\$@"; printf '\n'; } >>"\$CALL_LOG"
$body
STUB
  chmod +x "$STUB_DIR/$name"
}

# calls [NAME]: the recorded calls, all of them or only NAME's.
calls() {
  if (($#)); then
    grep -E "^$1( |\$)" "$CALL_LOG" || true
  else
    cat "$CALL_LOG"
  fi
}

flunk() {
  { if (($#)); then printf '%s\n' "$@"; else cat -; fi; } |
    sed "s:${BATS_TEST_TMPDIR}:\$TMP:g" >&2
  return 1
}

assert_success() {
  if [[ $status -ne 0 ]]; then
    flunk "command failed with exit status $status" "output: $output"
  elif (($#)); then
    assert_output "$1"
  fi
}

assert_failure() {
  if [[ $status -eq 0 ]]; then
    flunk "expected failed exit status" "output: $output"
  elif (($#)); then
    assert_output "$1"
  fi
}

# assert_output [EXPECTED]: $output equals EXPECTED (or stdin when no argument)
assert_output() {
  local expected
  if (($#)); then expected=$1; else expected=$(cat -); fi
  [[ $output == "$expected" ]] || flunk "expected: $expected" "actual:   $output"
}

assert_output_contains() {
  [[ $output == *"$1"* ]] || flunk "expected output to contain: $1" "actual: $output"
}

refute_output_contains() {
  [[ $output != *"$1"* ]] || flunk "expected output not to contain: $1" "actual: $output"
}

assert_line() {
  local line
  for line in "${lines[@]}"; do
    [[ $line == "$1" ]] && return 0
  done
  flunk "expected line: $1" "actual: $output"
}

refute_line() {
  local line
  for line in "${lines[@]}"; do
    [[ $line == "$1" ]] && flunk "unexpected line: $1" "actual: $output"
  done
  return 0
}

# assert_calls: the whole call log equals stdin (a heredoc)
assert_calls() {
  local expected actual
  expected=$(cat -)
  actual=$(cat "$CALL_LOG")
  [[ $actual == "$expected" ]] || flunk "expected calls:" "$expected" "actual calls:" "$actual"
}

refute_calls() {
  [[ ! -s $CALL_LOG ]] || flunk "expected no calls, got:" "$(cat "$CALL_LOG")"
}

# with_other_user: create a throwaway second local user (a real uid; needs root, as CI has)
# in OTHER_USER, removed by remove_other_user (call it from teardown). Fails under CI=true when
# the user cannot be made; skips otherwise.
with_other_user() {
  # useradd and userdel live in /usr/sbin, which the sealed PATH above leaves out
  if ((EUID != 0)) || ! PATH=$PATH:/usr/sbin:/sbin command -v useradd >/dev/null; then
    [[ -z ${CI:-} ]] || flunk "cannot create a second local user (CI runs as root)"
    skip "needs root to create a second local user"
  fi
  OTHER_USER=acs$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  PATH=$PATH:/usr/sbin:/sbin useradd --create-home --shell /bin/bash "$OTHER_USER" || flunk "useradd $OTHER_USER failed"
  export OTHER_USER
}

# as_other_user COMMAND...: run COMMAND as OTHER_USER (setpriv: no PAM, groups cleared).
as_other_user() {
  setpriv --reuid="$OTHER_USER" --regid="$(id -g "$OTHER_USER")" --clear-groups -- \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$(getent passwd "$OTHER_USER" | cut -d: -f6)" "$@"
}

remove_other_user() {
  [[ -n ${OTHER_USER:-} ]] || return 0
  pkill -KILL -u "$OTHER_USER" 2>/dev/null || true
  PATH=$PATH:/usr/sbin:/sbin userdel --remove "$OTHER_USER" 2>/dev/null || true
}
