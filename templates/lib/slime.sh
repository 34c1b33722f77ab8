# shellcheck shell=bash
# slime.sh: the flags whose name, or whose presence, depends on the slime and SGLang this node
# has, decided when the script runs (as MODEL_ARGS is read from the model script then).
#
# Supported stacks (docs/install.md, "Which slime"): slime fa3c990 with SGLang 0.5.13 (the pin
# of install_slime.sh), slime v0.3.1 (a6272da0d) and 624b824a8 with SGLang 0.5.15.post1 (the
# official container). What differs for the flags the toolkit passes, read from each stack's
# parsers (tests/slime_stacks/*.flags):
#   --megatron-to-hf-mode   only fa3c990 has it (removed in slime #2251, before v0.3.1), where
#                           bridge mode is what loads the HF --ref-load; later slimes load it natively
#   --sglang-cuda-graph-max-bs[-decode]
#                           SGLang 0.5.15 renamed the flag (the old name warns as a deprecated
#                           alias); 0.5.13 knows only the old name
# Both are read from the packages' own argument definitions (slime_helper.py), never from the
# text of a file: what the parsers have is what slime will accept.

# slime_stack_args SLIME_DIR HF_MODE MAX_BS [PYTHON]: STACK_ARGS, those flags for the slime at
# SLIME_DIR and the SGLang of PYTHON (default python3, the job's), STACK_SGLANG, SGLang's
# version, and STACK_NOTE, one line saying what was found and chosen. PYTHON runs by the path
# given (a venv's python finds its packages only there). Fails (status 1, a message on stderr)
# when SLIME_DIR is no slime checkout or the stack's arguments cannot be built.
slime_stack_args() { # <slime-dir> <megatron-to-hf-mode> <sglang-cuda-graph-max-bs> [python]
  local slime_dir=$1 hf_mode=$2 max_bs=$3 python=${4:-python3} found hf_note graph_note graph_flag=""
  # shellcheck disable=SC2034 # STACK_ARGS, STACK_SGLANG and STACK_NOTE are read by the script that sources this file
  STACK_ARGS=() STACK_SGLANG="" STACK_NOTE=""
  [[ -f $slime_dir/slime/utils/arguments.py ]] ||
    { say "no $slime_dir/slime/utils/arguments.py (SLIME_DIR must be a slime checkout)"; return 1; }
  command -v "$python" >/dev/null || { say "no $python found (put the job's python on PATH)"; return 1; }
  found=$(stack_options "$python" "$slime_dir") || { say "${found:-$python cannot run slime_helper.py}"; return 1; }
  STACK_SGLANG=${found%%$'\n'*}
  if [[ $found == *$'\nslime --megatron-to-hf-mode'* ]]; then
    STACK_ARGS+=(--megatron-to-hf-mode "$hf_mode")
    hf_note="--megatron-to-hf-mode $hf_mode"
  else
    hf_note="no --megatron-to-hf-mode (this slime has none and loads an HF --ref-load itself)"
  fi
  if [[ $found == *$'\nsglang --cuda-graph-max-bs-decode'* ]]; then
    graph_flag=--sglang-cuda-graph-max-bs-decode
  elif [[ $found == *$'\nsglang --cuda-graph-max-bs'* ]]; then
    graph_flag=--sglang-cuda-graph-max-bs
  fi
  if [[ -n $graph_flag ]]; then
    STACK_ARGS+=("$graph_flag" "$max_bs")
    graph_note="$graph_flag $max_bs"
  else
    graph_note="no cuda-graph batch size flag (this SGLang has neither --cuda-graph-max-bs-decode nor --cuda-graph-max-bs; its default applies)"
  fi
  # shellcheck disable=SC2034 # (as above)
  STACK_NOTE="slime $(slime_identity "$slime_dir"), SGLang $STACK_SGLANG: $hf_note; $graph_note"
}

# stack_options PYTHON SLIME_DIR: slime_helper.py's answer (SGLang's version, then the options
# asked about that this stack has), or on failure its one line saying why. What SGLang's and
# slime's imports write to stderr (warnings) is dropped.
stack_options() { # <python> <slime-dir>
  "$1" "$TOOLKIT_HELPER_DIR/slime_helper.py" "$2" 2>/dev/null
}

# slime_identity SLIME_DIR: the checkout's commit (9 hex digits; +dirty with local changes), or
# "version V (not a git checkout)" from setup.py; what bin/doctor compares with the tested stacks.
slime_identity() { # <slime-dir>
  local dir=$1 head version
  if head=$(git -C "$dir" rev-parse --short=9 HEAD 2>/dev/null); then
    [[ -z $(git -C "$dir" status --porcelain --untracked-files=no 2>/dev/null) ]] || head+="+dirty"
    printf '%s\n' "$head"
    return 0
  fi
  version=$(sed -n 's/^ *version="\([^"]*\)".*/\1/p' "$dir/setup.py" 2>/dev/null | head -n 1)
  printf 'version %s (not a git checkout)\n' "${version:-unknown}"
}
