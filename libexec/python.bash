# shellcheck shell=bash
# The one python finder of the bin/ commands. Sourced by bin/train, bin/eval, bin/doctor and
# bin/report; not run on its own.
#
# toolkit_python [--no-install] PROG DEP... prints a python >= 3.11 that imports every DEP
# (a pip requirement string: jinja2>=3.1, pyyaml>=6, python-dotenv>=1.0, matplotlib>=3.8...):
# TOOLKIT_PYTHON when set (an error when it lacks one), else python3 when it has them all,
# else the private venv TOOLKIT_VENV (default <repo>/.toolkit/venv), into which the DEPs are
# installed once, saying so in one line (--no-install: an error instead). Every message starts
# with PROG; its status is 127 when no python fits, 1 when the venv cannot be made.
#
# toolkit_exec_python PYTHON MODULE ARG...: exec PYTHON -m MODULE with <repo>/python first on
# PYTHONPATH, the caller's PYTHONPATH saved for the scripts the launchers exec
# (TOOLKIT_SAVED_PYTHONPATH) and TOOLKIT_REPO exported.

# The python floor of every bin/ command: the package's requires-python (python/pyproject.toml).
# tests/python/test_python_floor.py keeps every mention of a floor in the repository the same.
TOOLKIT_PYTHON_FLOOR=3.11

# _toolkit_module DEP: the module a requirement string is imported as (pyyaml>=6 -> yaml).
_toolkit_module() { # <dep>
  local name=${1%%[<>=!~ ;[]*}
  case $name in
    pyyaml) printf 'yaml\n' ;;
    python-dotenv) printf 'dotenv\n' ;;
    *) printf '%s\n' "${name//-/_}" ;;
  esac
}

# _toolkit_probe PYTHON MODULE...: 0 when PYTHON >= TOOLKIT_PYTHON_FLOOR imports every MODULE,
# 3 when it is older, 4 when a module is missing, 127 when PYTHON does not run.
_toolkit_probe() { # <python> <module>...
  command -v "$1" >/dev/null 2>&1 || return 127
  "$1" -c 'import sys, importlib.util as u
floor = tuple(map(int, sys.argv[1].split(".")))
sys.exit(3 if sys.version_info < floor else 4 if None in map(u.find_spec, sys.argv[2:]) else 0)' "$TOOLKIT_PYTHON_FLOOR" "${@:2}"
}

# _toolkit_fail PROG MESSAGE [STATUS]: print PROG: MESSAGE on stderr, return STATUS (127).
_toolkit_fail() { # <prog> <message> [status]
  printf '%s: %s\n' "$1" "$2" >&2
  return "${3:-127}"
}

# _toolkit_check PROG PYTHON STATUS: fail with the reason for a probe STATUS of 127 or 3.
_toolkit_check() { # <prog> <python> <status>
  case $3 in
    127) _toolkit_fail "$1" "$2 not found (install python3 >= $TOOLKIT_PYTHON_FLOOR, or set TOOLKIT_PYTHON)" ;;
    3) _toolkit_fail "$1" "$2 is older than Python $TOOLKIT_PYTHON_FLOOR (install a newer python3, or set TOOLKIT_PYTHON)" ;;
  esac
}

# _toolkit_and WORD...: the words joined as "a, b and c".
_toolkit_and() { # <word>...
  local text=$1 word
  (($# > 1)) || { printf '%s\n' "$text"; return; }
  for word in "${@:2:$#-2}"; do text+=", $word"; done
  printf '%s and %s\n' "$text" "${!#}"
}

# _toolkit_bootstrap PROG VENV DEP...: create VENV with python3 and install the DEPs into it.
_toolkit_bootstrap() { # <prog> <venv> <dep>...
  local prog=$1 venv=$2 names="" dep
  for dep in "${@:3}"; do names+=${names:+/}${dep%%[<>=!~ ;[]*}; done
  printf '%s: python3 lacks %s: installing them into %s (once)\n' "$prog" "$names" "$venv" >&2
  if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv" >&2 ||
      _toolkit_fail "$prog" "could not create $venv (install python3-venv, or set TOOLKIT_PYTHON)" 1 || return
  fi
  "$venv/bin/python" -m pip install --quiet --quiet --disable-pip-version-check "${@:3}" >&2 ||
    _toolkit_fail "$prog" "could not install ${*:3} into $venv (check network access to PyPI, or set TOOLKIT_PYTHON)" 1
}

toolkit_python() { # [--no-install] <prog> <dep>...
  local install=1
  if [[ $1 == --no-install ]]; then install=0; shift; fi
  local prog=$1 venv=${TOOLKIT_VENV:-${TOOLKIT_REPO:?}/.toolkit/venv} status=0 dep
  local -a deps=("${@:2}") modules=() names=()
  for dep in "${deps[@]}"; do
    modules+=("$(_toolkit_module "$dep")")
    names+=("${dep%%[<>=!~ ;[]*}")
  done
  if [[ -n ${TOOLKIT_PYTHON:-} ]]; then
    _toolkit_probe "$TOOLKIT_PYTHON" "${modules[@]}" || status=$?
    _toolkit_check "$prog" "$TOOLKIT_PYTHON" "$status" || return
    ((status == 0)) ||
      _toolkit_fail "$prog" "TOOLKIT_PYTHON=$TOOLKIT_PYTHON cannot import $(_toolkit_and "${modules[@]}") (pip install ${deps[*]})" ||
      return
    printf '%s\n' "$TOOLKIT_PYTHON"
    return
  fi
  _toolkit_probe python3 "${modules[@]}" || status=$?
  _toolkit_check "$prog" python3 "$status" || return
  if ((status == 0)); then
    printf '%s\n' python3
    return
  fi
  if ! _toolkit_probe "$venv/bin/python" "${modules[@]}"; then
    ((install)) ||
      _toolkit_fail "$prog" "no python >= $TOOLKIT_PYTHON_FLOOR with $(_toolkit_and "${names[@]}") (run bin/train once to create its venv, or set TOOLKIT_PYTHON)" ||
      return
    _toolkit_bootstrap "$prog" "$venv" "${deps[@]}" || return
  fi
  printf '%s\n' "$venv/bin/python"
}

toolkit_exec_python() { # <python> <module> <arg>...
  # the launchers restore the caller's PYTHONPATH before they exec a rendered script
  if [[ -v PYTHONPATH ]]; then
    export TOOLKIT_SAVED_PYTHONPATH="set:$PYTHONPATH"
  else
    export TOOLKIT_SAVED_PYTHONPATH=unset
  fi
  export TOOLKIT_REPO
  PYTHONPATH="$TOOLKIT_REPO/python${PYTHONPATH:+:$PYTHONPATH}" exec "$1" -m "$2" "${@:3}"
}
