# Shared setup for the launcher's bats files: a fake slime installation, an env file
# pointing at it, and stubs for the external commands train.sh runs.
# shellcheck shell=bash

# shellcheck disable=SC2034 # used by the .bats files that load this one
LIB_DIR="$REPO_ROOT/templates/lib"
LAUNCHER_FIXTURES="$REPO_ROOT/tests/fixtures/launcher"

# make_install DIR: a fake slime checkout, Megatron dir, HF model dir and data files in DIR,
# with the fixture model script installed as scripts/models/qwen-spaces.sh. The node is one of
# the pinned stack (fa3c990 with SGLang 0.5.13), as templates/lib/slime_helper.py asks it: slime's
# arguments module and an sglang package (DIR/site, exported on PYTHONPATH) whose argument
# definitions are that stack's (tests/python/fakes/stack_node.py writes both).
make_install() { # <dir>
  local dir=$1
  mkdir -p "$dir/slime/scripts/models" "$dir/Megatron-LM" "$dir/model" "$dir/data"
  python3 "$REPO_ROOT/tests/python/fakes/stack_node.py" "$dir" fa3c990
  export PYTHONPATH="$dir/site"
  cp "$LAUNCHER_FIXTURES"/models/*.sh "$dir/slime/scripts/models/"
  echo '{"model_type": "qwen2"}' >"$dir/model/config.json"
  echo '{"version": "1.0"}' >"$dir/model/tokenizer.json"
  echo '{"prompt": "1+1?", "metadata": {"answer": "2"}}' >"$dir/data/train.jsonl"
  cp "$dir/data/train.jsonl" "$dir/data/gsm8k_test.jsonl"
}

# write_env FILE DIR [LINE...]: a valid env file for the install in DIR, plus LINEs.
write_env() { # <file> <install-dir> [line]...
  local file=$1 dir=$2 line extra
  shift 2
  local base=(
    "EXP_ID=bats-exp"
    "S3_BUCKET=my-bucket"
    "AGENT_RUNTIME_ARN=arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-AbC123"
    "MODEL_DIR='$dir/model'"
    "DATA_PATH='$dir/data/train.jsonl'"
    "MODEL_TYPE=qwen-spaces"
    "SLIME_DIR='$dir/slime'"
    "MEGATRON_DIR='$dir/Megatron-LM'"
    "RAY_TEMP_DIR='$WORK/ray'" # short: Ray's unix sockets live under it
  )
  # free ports, so that the run's port check passes whatever else runs on this machine: from
  # 20000-32767, below the kernel's ephemeral range (a real Ray beside the tests, tests/run's
  # ray_real, opens connections from ephemeral ports all the time) and above Ray's worker ports
  local port_lines
  port_lines=$(python3 -c 'import random, socket
names = ("RAY_PORT", "RAY_DASHBOARD_PORT", "RAY_CLIENT_SERVER_PORT", "RAY_DASHBOARD_AGENT_PORT")
socks = []
while len(socks) < len(names):
    s = socket.socket()
    try:
        s.bind(("", random.randrange(20000, 32768)))
        socks.append(s)
    except OSError:
        s.close()
print("\n".join(f"{n}={s.getsockname()[1]}" for n, s in zip(names, socks)))')
  mapfile -t -O "${#base[@]}" base <<<"$port_lines"
  {
    for line in "${base[@]}"; do
      for extra; do [[ ${extra%%=*} == "${line%%=*}" ]] && continue 2; done
      printf '%s\n' "$line"
    done
    printf '%s\n' "$@"
  } >"$file"
}

# stub_cluster: TOOLKIT_RUNTIME_DIR under the test's temp dir; stubs for pkill, pgrep (nothing left) and ray. `ray job submit` writes the
# entrypoint's argv (NUL-separated) to $JOB_ARGV and the runtime env JSON to $JOB_ENV_JSON,
# notes in $ENV_LOG whether WANDB_API_KEY was in its environment (never the value), and
# exits with $RAY_JOB_STATUS (default 0).
stub_cluster() {
  # this test's own private node-local dir (locks, the default Ray temp dir), not /tmp's
  export TOOLKIT_RUNTIME_DIR="$BATS_TEST_TMPDIR/rt"
  # credentials the run's workers would inherit (bin/train's gate looks for them; nothing
  # calls AWS here), and no instance-metadata lookup from boto3's credential chain
  export AWS_ACCESS_KEY_ID=AKIDBATSEXAMPLE AWS_SECRET_ACCESS_KEY=bats-not-a-real-secret AWS_EC2_METADATA_DISABLED=true
  export JOB_ARGV="$BATS_TEST_TMPDIR/job.argv" JOB_ENV_JSON="$BATS_TEST_TMPDIR/job.env.json"
  export ENV_LOG="$BATS_TEST_TMPDIR/env.log"
  stub pkill 'exit 1'
  stub pgrep 'exit 1'
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
[[ -n ${WANDB_API_KEY:-} ]] && echo "ray $1: WANDB_API_KEY in environment" >>"$ENV_LOG"
if [[ $1 == job && $2 == submit ]]; then
  for arg; do [[ $arg == --runtime-env-json=* ]] && printf "%s" "${arg#*=}" >"$JOB_ENV_JSON"; done
  while [[ $1 != -- ]]; do shift; done
  shift
  printf "%s\0" "$@" >"$JOB_ARGV"
  exit "${RAY_JOB_STATUS:-0}"
fi
exit 0'
}

# stub_two_node_ray: a ray whose cluster has the head (10.1.1.1) and one worker (10.1.1.2), 8
# GPUs each, and whose `ray job submit` records the entrypoint's argv in $JOB_ARGV.
stub_two_node_ray() {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == list ]]; then
  echo "[{\"node_id\": \"h\", \"node_ip\": \"10.1.1.1\", \"is_head_node\": true, \"state\": \"ALIVE\", \"resources_total\": {\"GPU\": 8.0}},
{\"node_id\": \"w\", \"node_ip\": \"10.1.1.2\", \"is_head_node\": false, \"state\": \"ALIVE\", \"resources_total\": {\"GPU\": 8.0}}]"
fi
if [[ $1 == job && $2 == submit ]]; then
  while [[ $1 != -- ]]; do shift; done
  shift
  printf "%s\0" "$@" >"$JOB_ARGV"
fi
exit 0'
}

# job_argv: the recorded train.py argv, one argument per line (newlines shown as \n).
job_argv() {
  local arg
  while IFS= read -r -d '' arg; do
    printf '%s\n' "${arg//$'\n'/\\n}"
  done <"$JOB_ARGV"
}

# flag_value FLAG: the word after FLAG in the recorded train.py argv.
flag_value() { # <flag>
  local -a argv
  local i
  mapfile -d '' -t argv <"$JOB_ARGV"
  for ((i = 0; i < ${#argv[@]} - 1; i++)); do
    [[ ${argv[i]} == "$1" ]] && { printf '%s\n' "${argv[i + 1]}"; return 0; }
  done
  return 1
}

# env_value KEY: the value write_env gave KEY in $WORK/exp.env.
env_value() { # <key>
  sed -n "s/^$1=//p" "$WORK/exp.env" | tr -d "'"
}

# start_holding_run: bin/train in the background whose job runs until $WORK/release exists;
# returns once the job is submitted (the run holds the node's lock). HOLDER_PID: train.sh's PID.
start_holding_run() {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '
if [[ $1 == job && $2 == submit ]]; then
  touch "$WORK/submitted"
  while [[ ! -e $WORK/release ]]; do /bin/sleep 0.1; done
fi
exit 0'
  "$TRAIN" "$WORK/exp.env" >"$WORK/first.out" 2>&1 &
  FIRST=$!
  local i
  for ((i = 0; i < 600; i++)); do [[ -e $WORK/submitted ]] && break; /bin/sleep 0.1; done
  [[ -e $WORK/submitted ]] || flunk "the first run did not start: $(cat "$WORK/first.out")"
  HOLDER_PID=$(sed -n 's/.*attempt started .* (pid \([0-9]*\)).*/\1/p' "$RUN_DIR/train.log" | tail -1)
}
