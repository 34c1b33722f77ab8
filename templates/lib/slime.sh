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

# slime_stack_args SLIME_DIR HF_MODE MAX_BS: STACK_ARGS, those flags for the slime at SLIME_DIR
# and the SGLang the job's python3 imports, and STACK_NOTE, one line saying what was found and
# chosen. Reads two source files; imports nothing. Fails (status 1, a message on stderr) when
# SLIME_DIR is no slime checkout or python3 has no sglang.
slime_stack_args() { # <slime-dir> <megatron-to-hf-mode> <sglang-cuda-graph-max-bs>
  local slime_dir=$1 hf_mode=$2 max_bs=$3 arguments="$1/slime/utils/arguments.py" found hf_note
  local server_args sglang_version graph_flag
  # shellcheck disable=SC2034 # STACK_ARGS and STACK_NOTE are read by the script that sources this file
  STACK_ARGS=() STACK_NOTE=""
  [[ -f $arguments ]] || { say "no $arguments (SLIME_DIR must be a slime checkout)"; return 1; }
  found=$(sglang_source) || { say "python3 ($(command -v python3)) has no sglang package (activate the environment that has the slime stack)"; return 1; }
  sglang_version=${found%%$'\n'*} server_args=${found#*$'\n'}
  [[ -f $server_args ]] || { say "no $server_args (is the sglang package of python3 complete?)"; return 1; }
  if grep -qF -- '"--megatron-to-hf-mode"' "$arguments"; then
    STACK_ARGS+=(--megatron-to-hf-mode "$hf_mode")
    hf_note="--megatron-to-hf-mode $hf_mode"
  else
    hf_note="no --megatron-to-hf-mode (this slime has none and loads an HF --ref-load itself)"
  fi
  graph_flag=--sglang-cuda-graph-max-bs
  grep -qF -- '"--cuda-graph-max-bs-decode"' "$server_args" && graph_flag=--sglang-cuda-graph-max-bs-decode
  STACK_ARGS+=("$graph_flag" "$max_bs")
  # shellcheck disable=SC2034 # (as above)
  STACK_NOTE="slime $(slime_identity "$slime_dir"), SGLang $sglang_version: $hf_note; $graph_flag $max_bs"
}

# sglang_source: two lines, the version of python3's sglang and the path of its
# srt/server_args.py, found without importing sglang (find_spec runs no package code;
# slime_helper.py).
sglang_source() {
  python3 "$TOOLKIT_HELPER_DIR/slime_helper.py" 2>/dev/null
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
