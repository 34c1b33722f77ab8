#!/usr/bin/env bats
# tests/run itself: it checks its python before anything else.

load ../test_helper

_setup() {
  RUNNER="$REPO_ROOT/tests/run"
}

@test "tests/run with python3 3.10 says it needs >= 3.11, before creating or installing anything" {
  stub python3 'case "$*" in *print*) echo 3.10 ;; *exit*) exit 1 ;; esac'
  TOOLKIT_TEST_VENV=$WORK/venv run -127 --separate-stderr "$RUNNER" lint
  [[ $stderr == "tests/run: python3 is Python 3.10; the tests need >= 3.11"* ]] || flunk "$stderr"
  [[ ! -e $WORK/venv ]]
  [[ $(calls python3 | grep -c -- '-m') == 0 ]] || flunk "$(calls)"
}

@test "tests/run with a python3 that does not run says which python it needs" {
  stub python3 'exit 127'
  TOOLKIT_TEST_VENV=$WORK/venv run -127 --separate-stderr "$RUNNER" lint
  [[ $stderr == "tests/run: python3 not found (install python3 >= 3.11"* ]] || flunk "$stderr"
  [[ ! -e $WORK/venv ]]
}

@test "tests/run checks an existing TOOLKIT_TEST_VENV's python too" {
  mkdir -p "$WORK/venv/bin"
  printf '#!/usr/bin/env bash\ncase "$*" in *print*) echo 3.9 ;; *exit*) exit 1 ;; esac\n' >"$WORK/venv/bin/python"
  chmod +x "$WORK/venv/bin/python"
  TOOLKIT_TEST_VENV=$WORK/venv run -127 --separate-stderr "$RUNNER" --no-install lint
  [[ $stderr == "tests/run: $WORK/venv/bin/python is Python 3.9; the tests need >= 3.11"* ]] || flunk "$stderr"
}

@test "tests/run names every failed test just before its closing line, which stays the last" {
  mkdir -p "$WORK/venv/bin"
  # a venv whose python passes the version check and whose bats reports one failure
  printf '#!/usr/bin/env bash\ncase "$*" in *print*) echo 3.11 ;; esac\nexit 0\n' >"$WORK/venv/bin/python"
  printf '#!/usr/bin/env bash\nprintf "1..3\\nok 1 first\\nnot ok 2 the second one fails\\n# detail\\nok 3 third\\n"\nexit 1\n' \
    >"$WORK/venv/bin/bats"
  chmod +x "$WORK/venv/bin/python" "$WORK/venv/bin/bats"
  TOOLKIT_TEST_VENV=$WORK/venv run -1 "$RUNNER" --no-install bats
  [[ ${lines[-1]} == "2 passed, 1 failed" ]] || flunk "$output"
  [[ ${lines[-2]} == "tests/run: FAILED bats: the second one fails" ]] || flunk "$output"
}

@test "tests/run --help prints its whole header: every suite, how long they take, the knobs" {
  run -0 "$RUNNER" --help
  local suite
  for suite in lint bats pytest install; do
    [[ $output == *$'\n'"  $suite "* ]] || flunk "no line for $suite in: $output"
  done
  [[ $output == *"816 s on two cores"* && $output == *"about 14 minutes"* ]] || flunk "no time in: $output"
  assert_output_contains "TOOLKIT_TEST_WORKERS"
}
