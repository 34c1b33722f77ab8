#!/usr/bin/env bash
# Summary: shellcheck every shell file the project ships
#
# Complete renders are checked by tests/python/scripts/test_golden.py (the goldens leave the
# library block out, so they are not whole scripts).
#
# Usage: tests/shellcheck.sh
set -euo pipefail
[[ -n ${TOOLKIT_DEBUG:-} ]] && set -x
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

shell_files() {
  local f
  for f in bin/* install_slime.sh tests/run tests/shellcheck.sh .ci/run \
    templates/lib/*.sh libexec/*.bash tests/*.bash tests/bats/*.bash tests/bats/*.bats tests/slime_stacks/*.sh; do
    [[ -f $f ]] || continue
    case "$f" in
      *.py) continue ;;
    esac
    # only files that are bash (bin/ may one day hold a python entry point)
    if [[ $f == *.sh || $f == *.bash || $f == *.bats ]] || head -n 1 "$f" | grep -q 'bash'; then
      printf '%s\n' "$f"
    fi
  done
}

mapfile -t files < <(shell_files)
echo "tests/shellcheck.sh: checking ${#files[@]} files" >&2
LC_ALL=C.UTF-8 shellcheck -x "${files[@]}"
