# shellcheck shell=bash
# model.sh: read MODEL_ARGS from one of slime's scripts/models/<MODEL_TYPE>.sh.

# source_model_args SCRIPT: source SCRIPT with bash, in a subshell, from its own directory
# (model scripts source their siblings), and copy its MODEL_ARGS array into the global
# MODEL_ARGS exactly: arguments with spaces or glob characters survive. A missing script,
# a script that fails, or one that defines no MODEL_ARGS array stops the run.
source_model_args() { # <model-script>
  local script=$1 tmp status errexit=0
  [[ -f $script ]] ||
    die "model script $script does not exist (check SLIME_DIR and MODEL_TYPE: MODEL_TYPE names a file in \$SLIME_DIR/scripts/models/)" 2
  tmp=$(mktemp)
  # The subshell must not run as part of a `||` list: bash would ignore `set -e` inside it,
  # and a command failing halfway through the model script would go unnoticed.
  [[ $- == *e* ]] && errexit=1
  set +e
  (
    set -e +u
    cd "$(dirname "$script")"
    # shellcheck source=/dev/null
    source "$script" >&2
    [[ $(declare -p MODEL_ARGS 2>/dev/null) == "declare -a"* ]] || exit 3
    printf '%s\0' "${MODEL_ARGS[@]}" >"$tmp"
  )
  status=$?
  ((errexit)) && set -e
  if ((status == 0)); then
    mapfile -d '' -t MODEL_ARGS <"$tmp"
  fi
  rm -f "$tmp"
  case $status in
    0) ((${#MODEL_ARGS[@]})) || die "model script $script defines an empty MODEL_ARGS (fix the script)" ;;
    3) die "model script $script does not define the bash array MODEL_ARGS (is it a slime scripts/models/ file?)" ;;
    *) die "model script $script failed with status $status (run 'bash -x $script' to see why)" ;;
  esac
}
