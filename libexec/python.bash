# shellcheck shell=bash
# Which python runs a bin/ command's Python side. Sourced by bin/ commands; not run on its own.
#
# toolkit_python PROG MODULE:DEP... prints a python >= 3.10 that imports every MODULE:
# TOOLKIT_PYTHON when set (an error when it lacks one), else python3 when it has them all,
# else the private venv TOOLKIT_VENV (default <repo>/.toolkit/venv), into which the missing
# DEPs (pip requirement strings) are installed once, saying so in one line.

# _probe_python PYTHON MODULE...: 0 when PYTHON >= 3.10 imports every MODULE, 3 when it is
# older, 4 when a module is missing, 127 when PYTHON does not run.
_probe_python() { # <python> <module>...
  command -v "$1" >/dev/null 2>&1 || return 127
  "$1" - "${@:2}" <<'PY'
import sys, importlib.util as u
sys.exit(3 if sys.version_info < (3, 10) else 4 if None in map(u.find_spec, sys.argv[1:]) else 0)
PY
}

toolkit_python() { # <prog> <module:dep>...
  local prog=$1 venv=${TOOLKIT_VENV:-${TOOLKIT_REPO:?}/.toolkit/venv} status=0 pair
  local -a modules=() deps=()
  for pair in "${@:2}"; do
    modules+=("${pair%%:*}")
    deps+=("${pair#*:}")
  done
  if [[ -n ${TOOLKIT_PYTHON:-} ]]; then
    _probe_python "$TOOLKIT_PYTHON" "${modules[@]}" || status=$?
    case $status in
      0) printf '%s\n' "$TOOLKIT_PYTHON"; return ;;
      127) printf '%s: TOOLKIT_PYTHON=%s not found (unset it, or point it at python3 >= 3.10)\n' "$prog" "$TOOLKIT_PYTHON" >&2 ;;
      3) printf '%s: TOOLKIT_PYTHON=%s is older than Python 3.10\n' "$prog" "$TOOLKIT_PYTHON" >&2 ;;
      *) printf '%s: TOOLKIT_PYTHON=%s cannot import %s (pip install %s)\n' "$prog" "$TOOLKIT_PYTHON" "${modules[*]}" "${deps[*]}" >&2 ;;
    esac
    return 127
  fi
  _probe_python python3 "${modules[@]}" || status=$?
  case $status in
    0) printf '%s\n' python3; return ;;
    127) printf '%s: python3 not found (install python3 >= 3.10, or set TOOLKIT_PYTHON)\n' "$prog" >&2; return 127 ;;
    3) printf '%s: python3 is older than Python 3.10 (install a newer one, or set TOOLKIT_PYTHON)\n' "$prog" >&2; return 127 ;;
  esac
  if ! _probe_python "$venv/bin/python" "${modules[@]}"; then
    printf '%s: python3 lacks %s: installing them into %s (once)\n' "$prog" "${deps[*]}" "$venv" >&2
    if [[ ! -x $venv/bin/python ]]; then
      python3 -m venv "$venv" >&2 || {
        printf '%s: could not create %s (install python3-venv, or set TOOLKIT_PYTHON)\n' "$prog" "$venv" >&2
        return 1
      }
    fi
    "$venv/bin/python" -m pip install --quiet --quiet --disable-pip-version-check "${deps[@]}" >&2 || {
      printf '%s: could not install %s into %s (check access to PyPI, or set TOOLKIT_PYTHON)\n' "$prog" "${deps[*]}" "$venv" >&2
      return 1
    }
  fi
  printf '%s\n' "$venv/bin/python"
}
