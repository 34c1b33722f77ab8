#!/usr/bin/env bats
# libexec/python.bash: the one python finder of every bin/ command (bin/train's tests of it are
# in train.bats). python3 and TOOLKIT_PYTHON are stubs here: they record their argv and answer
# the probe as told, so no python is installed and no module runs.

load ../test_helper

# stub_bare_python3: a python3 that lacks every helper; its `-m venv DIR` makes DIR/bin/python a
# stub that fails the probe (-c) and records every other call.
stub_bare_python3() {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub python3 '
case "$1" in
  -c) exit 4 ;;
  -m)
    mkdir -p "$3/bin"
    printf "%s\n" "#!/usr/bin/env bash" "echo \"venv-python \$*\" >>\"$CALL_LOG\"" "[[ \$1 != -c ]]" >"$3/bin/python"
    chmod +x "$3/bin/python" ;;
esac'
  export TOOLKIT_VENV="$BATS_TEST_TMPDIR/venv"
}

@test "every bin/ command with a Python side finds it through libexec/python.bash, and no other way" {
  local cmd
  # shellcheck disable=SC2016 # the commands' literal text
  for cmd in train eval doctor report; do
    grep -q '^source "$TOOLKIT_REPO/libexec/python.bash"$' "$REPO_ROOT/bin/$cmd" || flunk "bin/$cmd does not source it"
    grep -q 'toolkit_exec_python "$python" agentcore_slime\.' "$REPO_ROOT/bin/$cmd" || flunk "bin/$cmd does not exec through it"
    ! grep -Eq 'find_spec|import sys|-m venv|pip install' "$REPO_ROOT/bin/$cmd" || flunk "bin/$cmd probes python itself"
  done
}

@test "bin/eval: python3 without the launcher's helpers: the venv once, said in one line, then bin/eval's module" {
  stub_bare_python3
  run -0 --separate-stderr "$REPO_ROOT/bin/eval" --dry-run x.env
  [[ $stderr == "bin/eval: python3 lacks jinja2/pyyaml/python-dotenv: installing them into $TOOLKIT_VENV (once)" ]] ||
    flunk "stderr: $stderr"
  run calls
  assert_line "python3 -m venv $TOOLKIT_VENV"
  assert_line "venv-python -m pip install --quiet --quiet --disable-pip-version-check jinja2>=3.1 pyyaml>=6 python-dotenv>=1.0"
  assert_line "venv-python -m agentcore_slime.evaluate.launch --dry-run x.env"
}

@test "bin/report: TOOLKIT_PYTHON without its helpers is an error in bin/train's words (127)" {
  stub fakepy 'exit 4'
  TOOLKIT_PYTHON=fakepy run -127 --separate-stderr "$REPO_ROOT/bin/report" "$WORK"
  [[ $stderr == "bin/report: TOOLKIT_PYTHON=fakepy cannot import jinja2 and matplotlib (pip install jinja2>=3.1 matplotlib>=3.8)" ]] ||
    flunk "stderr: $stderr"
}

@test "bin/report: a TOOLKIT_PYTHON that does not run, and one older than 3.11 (127)" {
  TOOLKIT_PYTHON=no-such-python run -127 --separate-stderr "$REPO_ROOT/bin/report" "$WORK"
  [[ $stderr == "bin/report: no-such-python not found (install python3 >= 3.11, or set TOOLKIT_PYTHON)" ]] ||
    flunk "stderr: $stderr"
  stub oldpy 'exit 3'
  TOOLKIT_PYTHON=oldpy run -127 --separate-stderr "$REPO_ROOT/bin/report" "$WORK"
  [[ $stderr == "bin/report: oldpy is older than Python 3.11 (install a newer python3, or set TOOLKIT_PYTHON)" ]] ||
    flunk "stderr: $stderr"
}

# python_reporting NAME MAJOR MINOR: NAME runs the real python3 with sys.version_info set to
# MAJOR.MINOR before the code it gets with -c: the finder's own probe runs, on a given version.
python_reporting() { # <name> <major> <minor>
  local real
  real=$(command -v python3)
  cat >"$STUB_DIR/$1" <<EOF
#!/usr/bin/env bash
[[ \$1 == -c ]] || exec "$real" "\$@"
code="import sys; sys.version_info = ($2, $3, 9, 'final', 0)
\$2"
shift 2
exec "$real" -c "\$code" "\$@"
EOF
  chmod +x "$STUB_DIR/$1"
}

@test "the python floor is 3.11, the package's: the finder's probe refuses a 3.10 and takes a 3.11" {
  python_reporting py310 3 10
  python_reporting py311 3 11
  TOOLKIT_PYTHON=py310 run -127 --separate-stderr "$REPO_ROOT/bin/report" "$WORK"
  [[ $stderr == "bin/report: py310 is older than Python 3.11 (install a newer python3, or set TOOLKIT_PYTHON)" ]] ||
    flunk "stderr: $stderr"
  # shellcheck source=libexec/python.bash
  source "$REPO_ROOT/libexec/python.bash"
  run -0 _toolkit_probe py311 json
  run -4 _toolkit_probe py311 no_such_module_here
  grep -q '^requires-python = ">=3.11"$' "$REPO_ROOT/python/pyproject.toml" || flunk "the package's floor moved"
  run -0 "$REPO_ROOT/bin/train" --help
  assert_output_contains "python (>= 3.11, with jinja2"
  run -0 "$REPO_ROOT/bin/report" --help
  assert_output_contains "python (>= 3.11, with jinja2"
}

@test "bin/report: the venv gets only what it lacks, without a new venv over an existing one" {
  stub_bare_python3
  python3 -m venv "$TOOLKIT_VENV" # the venv bin/train made earlier (its python lacks matplotlib here)
  : >"$CALL_LOG"
  run -0 --separate-stderr "$REPO_ROOT/bin/report" "$WORK"
  [[ $stderr == "bin/report: python3 lacks jinja2/matplotlib: installing them into $TOOLKIT_VENV (once)" ]] ||
    flunk "stderr: $stderr"
  run calls
  refute_line "python3 -m venv $TOOLKIT_VENV"
  assert_line "venv-python -m pip install --quiet --quiet --disable-pip-version-check jinja2>=3.1 matplotlib>=3.8"
  assert_line "venv-python -m agentcore_slime.report $WORK"
}

@test "bin/doctor never installs: without a python that has the helpers it says how to get one (127)" {
  stub_bare_python3
  run -127 --separate-stderr "$REPO_ROOT/bin/doctor" x.env
  [[ $stderr == "bin/doctor: no python >= 3.11 with jinja2, pyyaml and python-dotenv (run bin/train once to create its venv, or set TOOLKIT_PYTHON)" ]] ||
    flunk "stderr: $stderr"
  [[ ! -e $TOOLKIT_VENV ]] || flunk "a venv was created"
  run calls
  refute_output_contains "-m venv"
  refute_output_contains "pip install"
}

@test "the launchers export the caller's PYTHONPATH for the scripts they exec, and put python/ first" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub goodpy 'printf "%s\n" "PYTHONPATH=$PYTHONPATH" "SAVED=$TOOLKIT_SAVED_PYTHONPATH" "REPO=$TOOLKIT_REPO" >>"$CALL_LOG"'
  PYTHONPATH=/mine TOOLKIT_PYTHON=goodpy run -0 "$REPO_ROOT/bin/eval" --dry-run x.env
  run calls
  assert_line "goodpy -m agentcore_slime.evaluate.launch --dry-run x.env"
  assert_line "PYTHONPATH=$REPO_ROOT/python:/mine"
  assert_line "SAVED=set:/mine"
  assert_line "REPO=$REPO_ROOT"
  : >"$CALL_LOG"
  env -u PYTHONPATH TOOLKIT_PYTHON=goodpy "$REPO_ROOT/bin/train" --dry-run x.env
  run calls
  assert_line "PYTHONPATH=$REPO_ROOT/python"
  assert_line "SAVED=unset"
}
