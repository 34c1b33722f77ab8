# shellcheck shell=bash
# ray.sh: start the Ray head, submit the slime job, and stop both on exit or Ctrl-C.

TOOLKIT_RAY_DASHBOARD=http://127.0.0.1:8265

# Credentials that workers inherit from the environment of `ray start` (never on argv).
TOOLKIT_SECRET_VARS=(WANDB_API_KEY WANDB_ENTITY WANDB_BASE_URL AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  AWS_SESSION_TOKEN AWS_PROFILE AWS_REGION AWS_DEFAULT_REGION)

# export_worker_env: export what Ray workers need by inheritance, before `ray start`:
# the credentials above when set (named, never printed) and CUDA_DEVICE_MAX_CONNECTIONS.
export_worker_env() {
  local name
  local -a inherited=()
  for name in "${TOOLKIT_SECRET_VARS[@]}"; do
    if env_is_set "$name"; then
      export "${name?}"
      inherited+=("$name")
    fi
  done
  export CUDA_DEVICE_MAX_CONNECTIONS=1
  export PYTHONUNBUFFERED=1
  say "workers inherit: ${inherited[*]:-no credentials}"
}

# start_ray_head NUM_GPUS: start a single-node Ray head (stopped again by the cleanup trap).
start_ray_head() { # <num-gpus>
  say "starting the Ray head with $1 GPUs"
  ray start --head --num-gpus "$1" --disable-usage-stats >&2 || die "ray start failed (see the output above)"
  TOOLKIT_RAY_STARTED=1
}

# runtime_env_json PYTHONPATH: the job's Ray runtime env as JSON (built by python3's json):
# PYTHONPATH, CUDA_DEVICE_MAX_CONNECTIONS=1 and, when CUDA is pinned, CUDA_HOME and LD_LIBRARY_PATH.
runtime_env_json() { # <pythonpath>
  TOOLKIT_JOB_PYTHONPATH=$1 python3 - <<'PY'
import json, os
env = {"PYTHONPATH": os.environ["TOOLKIT_JOB_PYTHONPATH"], "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
if os.environ.get("TOOLKIT_CUDA_PINNED"):
    env.update(CUDA_HOME=os.environ["CUDA_HOME"], LD_LIBRARY_PATH=os.environ.get("LD_LIBRARY_PATH", ""))
print(json.dumps({"env_vars": env}, separators=(",", ":")))
PY
}

# train_env_vars_json: the --train-env-vars value for slime's Megatron actors: the pinned
# CUDA_HOME and LD_LIBRARY_PATH as a JSON object (built by python3's json).
train_env_vars_json() {
  python3 -c 'import json, os; print(json.dumps({k: os.environ[k] for k in ("CUDA_HOME", "LD_LIBRARY_PATH")}))'
}

# submit_job SUBMISSION_ID RUNTIME_ENV_JSON ENTRYPOINT...: submit the slime job, follow its
# logs, and return its status.
submit_job() { # <submission-id> <runtime-env-json> <entrypoint>...
  TOOLKIT_JOB_ID=$1
  say "submitting Ray job $1"
  # In the background so that `wait` returns as soon as a trapped signal arrives.
  ray job submit --address="$TOOLKIT_RAY_DASHBOARD" --submission-id="$1" \
    --runtime-env-json="$2" -- "${@:3}" &
  TOOLKIT_SUBMIT_PID=$!
  wait "$TOOLKIT_SUBMIT_PID"
}

# cleanup_on_signal SIGNAL: stop the submitted job (if any), then exit 128+N; the EXIT
# trap stops Ray.
cleanup_on_signal() { # <signal-name>
  trap - INT TERM
  say "caught SIG$1: stopping the Ray job and Ray"
  if [[ -n ${TOOLKIT_JOB_ID:-} ]]; then
    ray job stop --address="$TOOLKIT_RAY_DASHBOARD" "$TOOLKIT_JOB_ID" >&2 || true
  fi
  if [[ -n ${TOOLKIT_SUBMIT_PID:-} ]]; then
    kill "$TOOLKIT_SUBMIT_PID" 2>/dev/null || true
  fi
  case $1 in
    INT) exit 130 ;;
    *) exit 143 ;;
  esac
}

# cleanup_on_exit: stop the Ray head we started, keep the exit status.
cleanup_on_exit() {
  local status=$?
  trap - EXIT
  if [[ -n ${TOOLKIT_RAY_STARTED:-} ]]; then
    ray stop --force >/dev/null 2>&1 || true
    say "stopped Ray (exit status $status)"
  fi
  stop_logging
  exit "$status"
}

# install_cleanup_trap: on Ctrl-C or TERM stop the job and Ray; on any exit stop Ray.
install_cleanup_trap() {
  trap 'cleanup_on_signal INT' INT
  trap 'cleanup_on_signal TERM' TERM
  trap cleanup_on_exit EXIT
}
