#!/usr/bin/env bats
# bin/train end to end: validation, rendering, and the rendered train.sh running against
# stubs of ray, pkill and pgrep (python3, bash and coreutils are real).

load ../test_helper
load launcher

_setup() {
  export TOOLKIT_RUNS_DIR="$BATS_TEST_TMPDIR/runs"
  make_install "$WORK/install"
  write_env "$WORK/exp.env" "$WORK/install"
  stub_cluster
  RUN_DIR="$TOOLKIT_RUNS_DIR/bats-exp"
  TRAIN="$REPO_ROOT/bin/train"
}

@test "no argument: the usage line on stderr, exit 2" {
  run -2 --separate-stderr "$TRAIN"
  [[ -z $output ]] || flunk "stdout not empty: $output"
  [[ $stderr == "Usage: bin/train [--dry-run | --render-only]"* ]] || flunk "stderr: $stderr"
  [[ $stderr == *$'\n       bin/train --rehearse '* ]] || flunk "no --rehearse in: $stderr"
}

@test "--help prints the header and nothing runs" {
  run -0 "$TRAIN" --dry-run --help "$WORK/exp.env"
  assert_line "Usage: bin/train [--dry-run | --render-only] [--variant sync|async] [--set KEY=VALUE]... ENV_FILE [-- SLIME_FLAG...]"
  assert_output_contains "TOOLKIT_RUNS_DIR"
  refute_calls
}

@test "a real run: steps in order, exit status 0, log teed, Ray stopped at exit" {
  run -0 "$TRAIN" "$WORK/exp.env"
  local uid port dash
  uid=$(id -u)
  port=$(env_value RAY_PORT)
  dash=$(env_value RAY_DASHBOARD_PORT)
  run calls
  [[ ${lines[0]} == "ray get-auth-token --help" ]] || flunk "first call: ${lines[0]}"
  [[ ${lines[1]} == "pgrep -u $uid -f =$WORK/ray/session_"*":$port"* ]] || flunk "second call: ${lines[1]}"
  [[ ${lines[2]} == "ray start --head --num-gpus 8 --disable-usage-stats --temp-dir $WORK/ray --port $port --dashboard-port $dash "* ]] ||
    flunk "third: ${lines[2]}"
  [[ ${lines[3]} == "ray job submit --address=http://127.0.0.1:$dash --submission-id=bats-exp-"* ]] ||
    flunk "fourth: ${lines[3]}"
  [[ ${lines[4]} == "pgrep -u $uid -f =$WORK/ray/session_"* ]] || flunk "fifth: ${lines[4]}"
  ((${#lines[@]} == 5)) || flunk "calls: $output"
  refute_output_contains "ray stop"
  refute_output_contains "pkill"
  grep -q "submitting Ray job bats-exp-" "$RUN_DIR/train.log"
  grep -q "stopped Ray (exit status 0)" "$RUN_DIR/train.log"
  # the lock file stays (never unlinked), in the private dir, and is free again
  local lock
  lock=$(ls "$TOOLKIT_RUNTIME_DIR"/ray-*.lock)
  [[ $(stat -c '%a' "$TOOLKIT_RUNTIME_DIR") == 700 ]]
  bash -c "source '$LIB_DIR/common.sh'; source '$LIB_DIR/lock.sh'; probe_lock '$lock'" || flunk "lock still held"
  [[ $(stat -c %a "$HOME/.ray/auth_token") == 600 ]]
  ! grep -rqF "$(cat "$HOME/.ray/auth_token")" "$RUN_DIR" || flunk "the token is in $RUN_DIR"
}

@test "a second run while one holds the node's lock is refused before anything is touched" {
  start_holding_run
  write_env "$WORK/other.env" "$WORK/install" "EXP_ID=other-exp" "RAY_TEMP_DIR='$WORK/ray'"
  : >"$CALL_LOG"
  TOOLKIT_LOCK_WAIT=0 run -1 "$TRAIN" "$WORK/other.env"
  calls >"$WORK/second.calls"
  touch "$WORK/release"
  wait "$FIRST"
  assert_output_contains "another run uses this node's Ray: PID $HOLDER_PID (EXP_ID bats-exp), lock $TOOLKIT_RUNTIME_DIR/ray-"
  run cat "$WORK/second.calls"
  refute_output_contains "ray start"
  refute_output_contains "pgrep"
}

@test "finding 1: another user's link at the old lock path to the victim's token: nothing leaks, the token is unchanged" {
  with_other_user
  # a Ray temp dir as Ray leaves it: world-writable, no sticky bit (the old default /tmp/ray)
  local shared
  shared=$(mktemp -d /tmp/acs-ray.XXXXXX)
  chmod 777 "$shared"
  mkdir -p "$HOME/.ray"
  printf 'victim-token-%s' "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" >"$HOME/.ray/auth_token"
  chmod 600 "$HOME/.ray/auth_token"
  local token
  token=$(cat "$HOME/.ray/auth_token")
  as_other_user ln -s "$HOME/.ray/auth_token" "$shared/agentcore-slime-run.lock"
  write_env "$WORK/exp.env" "$WORK/install" "RAY_TEMP_DIR='$shared'"
  "$TRAIN" "$WORK/exp.env" >"$WORK/out" 2>&1 || true
  [[ $(cat "$HOME/.ray/auth_token") == "$token" ]] || flunk "the token file was changed: $(cat "$WORK/out")"
  ! grep -rqF "$token" "$RUN_DIR" "$WORK/out" || flunk "the token leaked: $(cat "$WORK/out")"
  [[ -L $shared/agentcore-slime-run.lock ]] || flunk "the planted link was replaced"
  rm -rf "$shared"
}

@test "planted links at every lock, temp and log path change nothing and leak nothing" {
  with_other_user
  local shared target
  shared=$(mktemp -d /tmp/acs-shared.XXXXXX)
  chmod 1777 "$shared"
  target="$HOME/precious"
  echo "precious $RANDOM" >"$target"
  cp "$target" "$WORK/precious.orig"
  # 1. the private dir, made by another user as a link (default RAY_TEMP_DIR inside it)
  local rt
  rt="$shared/agentcore-slime-$(id -u)"
  as_other_user ln -s "$HOME" "$rt"
  write_env "$WORK/exp.env" "$WORK/install" "RAY_TEMP_DIR="
  TOOLKIT_RUNTIME_DIR=$rt run -2 "$TRAIN" "$WORK/exp.env"
  assert_output_contains "$rt is a symbolic link, not a directory of yours"
  # 2. an explicit RAY_TEMP_DIR in a shared dir, planted as a link
  as_other_user ln -s "$HOME" "$shared/ray"
  write_env "$WORK/exp.env" "$WORK/install" "RAY_TEMP_DIR='$shared/ray'"
  run -2 "$TRAIN" "$WORK/exp.env"
  assert_output_contains "RAY_TEMP_DIR $shared/ray is a symbolic link, not a directory"
  # 3. the lock file itself a link (only this user could put one there): refused, not followed
  write_env "$WORK/exp.env" "$WORK/install"
  [[ -d $TOOLKIT_RUNTIME_DIR ]] || mkdir -m 700 "$TOOLKIT_RUNTIME_DIR"
  ln -s "$target" "$TOOLKIT_RUNTIME_DIR/$(bash -c "source '$LIB_DIR/lock.sh'; lock_slot ray '$WORK/ray'").lock"
  run -2 "$TRAIN" "$WORK/exp.env"
  assert_output_contains "cannot open $TOOLKIT_RUNTIME_DIR/ray-"
  assert_output_contains "without following links"
  # 4. train.log a link
  rm "$TOOLKIT_RUNTIME_DIR"/ray-*.lock
  mkdir -p "$RUN_DIR"
  rm -f "$RUN_DIR/train.log"
  ln -s "$target" "$RUN_DIR/train.log"
  run -2 "$TRAIN" "$WORK/exp.env"
  assert_output_contains "train.log is a symbolic link"
  run calls ray
  refute_output_contains "ray start"
  cmp "$target" "$WORK/precious.orig" || flunk "the link target changed"
  ! grep -rqF "precious" "$RUN_DIR"/ 2>/dev/null || flunk "its content leaked under runs/"
  rm -rf "$shared"
}

@test "the other user can neither take this user's lock nor reach the private dir" {
  with_other_user
  start_holding_run
  local lock
  lock=$(ls "$TOOLKIT_RUNTIME_DIR"/ray-*.lock)
  chmod 755 "$BATS_TEST_TMPDIR" "$(dirname "$BATS_TEST_TMPDIR")" "$(dirname "$(dirname "$BATS_TEST_TMPDIR")")"
  run as_other_user python3 -c 'import fcntl, sys; fcntl.flock(open(sys.argv[1]), fcntl.LOCK_EX | fcntl.LOCK_NB)' "$lock"
  touch "$WORK/release"
  wait "$FIRST"
  ((status != 0)) || flunk "the other user took the lock"
  assert_output_contains "Permission denied"
}

@test "two nodes: join.sh rendered, the head prints the worker command, waits, multi-node flags" {
  stub_two_node_ray
  export TOOLKIT_NODE_POLL=60
  run -0 "$TRAIN" --set NUM_NODES=2 "$WORK/exp.env"
  [[ -x $RUN_DIR/join.sh ]] || flunk "no join.sh"
  assert_output_contains "on each worker run:"
  assert_output_contains "bash $RUN_DIR/join.sh 10.1.1.1:$(env_value RAY_PORT)"
  assert_output_contains "2 nodes with 16 GPUs joined: 10.1.1.1 (head, 8 GPUs), 10.1.1.2 (worker, 8 GPUs)"
  # at the end the head tries to tell the workers (no GCS behind this stub: it says so)
  assert_output_contains "could not tell the workers that the run ended: their join.sh will report a lost head"
  [[ $(flag_value --actor-num-nodes) == 2 && $(flag_value --rollout-num-gpus) == 16 ]] || flunk "$(job_argv)"
  [[ $(flag_value --actor-num-gpus-per-node) == 8 && $(flag_value --num-gpus-per-node) == 8 ]]
  run bash -n "$RUN_DIR/join.sh"
}

@test "join.sh: no head address is a usage error; a missing token says how to copy it" {
  run -0 "$TRAIN" --render-only --set NUM_NODES=2 "$WORK/exp.env"
  run -2 bash "$RUN_DIR/join.sh"
  assert_output "join.sh: usage: bash join.sh HEAD_IP:PORT (the head prints the exact command)"
  export TOOLKIT_RAY_TEMP_DIR="$WORK/wray"
  run -1 bash "$RUN_DIR/join.sh" 10.1.1.1:6379
  assert_output_contains "no Ray token at $HOME/.ray/auth_token (copy the head's token file here"
  run calls ray
  refute_output_contains "ray start"
}

@test "the script's exit status is the job's" {
  RAY_JOB_STATUS=3 run -3 "$TRAIN" "$WORK/exp.env"
  grep -q "stopped Ray (exit status 3)" "$RUN_DIR/train.log"
}

@test "train.py gets MODEL_ARGS exactly, the toolkit's dotted paths and the env-file values" {
  run -0 "$TRAIN" --set NUM_ROLLOUT=7 --set LR=3e-6 --set TP_SIZE=4 --set ROLLOUT_BATCH_SIZE=16 "$WORK/exp.env"
  run job_argv
  [[ ${lines[0]} == python3 && ${lines[1]} == "$WORK/install/slime/train.py" ]] || flunk "$output"
  # the fixture model script's MODEL_ARGS, word for word, right after train.py
  local expected=(--swiglu --num-layers 36 --hidden-size 2048 --moe-layer-freq "[0]*1+[1]*35"
    --spec slime_plugins.models.demo "get spec with spaces" --rotary-base 1000000 --norm-epsilon 1e-6)
  local i
  for i in "${!expected[@]}"; do
    # shellcheck disable=SC2016 # a literal, single-quoted on purpose
    [[ ${lines[i + 2]} == "${expected[i]}" ]] || flunk "MODEL_ARGS[$i]: '${lines[i + 2]}' != '${expected[i]}'"
  done
  [[ $(flag_value --num-rollout) == 7 ]]
  [[ $(flag_value --lr) == 3e-06 ]]
  [[ $(flag_value --tensor-model-parallel-size) == 4 ]]
  [[ $(flag_value --rollout-batch-size) == 16 ]]
  [[ $(flag_value --rollout-function-path) == agentcore_slime.rollout.generate_rollout ]]
  [[ $(flag_value --custom-reward-post-process-path) == agentcore_slime.rewards.normalize_episode_rewards ]]
  [[ $(flag_value --custom-config-path) == "$RUN_DIR/toolkit.yaml" ]]
  [[ $(flag_value --hf-checkpoint) == "$WORK/install/model" ]]
  [[ $(flag_value --save) == "$RUN_DIR/checkpoints" ]]
  assert_line --use-dynamic-batch-size
  assert_line --colocate
  refute_line --use-dynamic-global-batch-size
  refute_line --use-wandb
  refute_line --eval-prompt-data
}

@test "the runtime env carries PYTHONPATH (Megatron + python/) and CUDA_DEVICE_MAX_CONNECTIONS only" {
  run -0 "$TRAIN" "$WORK/exp.env"
  # shellcheck disable=SC2016 # a literal, single-quoted on purpose
  run python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])), sort_keys=True))' "$JOB_ENV_JSON"
  assert_output "{\"env_vars\": {\"CUDA_DEVICE_MAX_CONNECTIONS\": \"1\", \"PYTHONPATH\": \"$WORK/install/Megatron-LM:$REPO_ROOT/python\"}}"
}

@test "EXTRA_FLAGS then the flags after --, verbatim and last, with spaces and quotes" {
  write_env "$WORK/exp.env" "$WORK/install" \
    "$(cat <<'LINE'
EXTRA_FLAGS='--sglang-router-policy "consistent hashing" --note "it\'s"'
LINE
)"
  run -0 "$TRAIN" "$WORK/exp.env" -- --rollout-top-k 5 "--title=a \"quoted\" word" ''
  run job_argv
  local n=${#lines[@]}
  [[ ${lines[n - 7]} == --sglang-router-policy ]] || flunk "$output"
  [[ ${lines[n - 6]} == "consistent hashing" ]] || flunk "$output"
  # shellcheck disable=SC2016 # a literal, single-quoted on purpose
  [[ ${lines[n - 5]} == --note && ${lines[n - 4]} == "it's" ]] || flunk "$output"
  [[ ${lines[n - 3]} == --rollout-top-k && ${lines[n - 2]} == 5 ]] || flunk "$output"
  # shellcheck disable=SC2016 # a literal, single-quoted on purpose
  [[ ${lines[n - 1]} == '--title=a "quoted" word' ]] || flunk "$output"
  # the empty argument survives too (mapfile of NUL-separated words keeps it)
  local -a argv
  mapfile -d '' -t argv <"$JOB_ARGV"
  [[ ${argv[-1]} == "" && ${argv[-2]} == '--title=a "quoted" word' ]]
}

@test "values with \$(...), backticks, ; && and newlines are never executed and reach slime literally" {
  local evil_dir="$WORK/in \$(touch PWNED1) \`touch PWNED2\`; touch PWNED3 && touch PWNED4"
  mkdir -p "$evil_dir"
  make_install "$evil_dir"
  cat >"$WORK/evil.env" <<ENV
EXP_ID=bats-exp
S3_BUCKET=my-bucket
AGENT_URL="http://127.0.0.1:8080/\$(touch PWNED5)"
MODEL_DIR='$evil_dir/model'
DATA_PATH='$evil_dir/data/train.jsonl'
MODEL_TYPE=qwen-spaces
SLIME_DIR='$evil_dir/slime'
MEGATRON_DIR='$evil_dir/Megatron-LM'
MODEL_ID="m\`touch PWNED6\`; rm -rf x && echo"
ENV
  cat >>"$WORK/evil.env" <<'ENV'
EXTRA_FLAGS="--a '$(touch PWNED7)' --b '`touch PWNED8`' --c 'x; touch PWNED9 && y' --e 'l1\nl2; touch PWNED11'"
ENV
  run -0 "$TRAIN" "$WORK/evil.env" -- --d $'line1\nline2 $(touch PWNED10)'
  run find "$BATS_TEST_TMPDIR" "$REPO_ROOT" -maxdepth 6 -type f -name 'PWNED*'
  [[ -z $output ]] || flunk "something was executed: $output"
  run job_argv
  assert_line "$evil_dir/data/train.jsonl"
  # shellcheck disable=SC2016 # literals that must not expand
  assert_line '$(touch PWNED7)'
  # shellcheck disable=SC2016 # literals that must not expand
  assert_line '`touch PWNED8`'
  assert_line 'x; touch PWNED9 && y'
  assert_line 'l1\nl2; touch PWNED11' # job_argv shows a newline as \n; is it a real one?
  [[ $(flag_value --e) == $'l1\nl2; touch PWNED11' ]] || flunk "--e: $(flag_value --e)"
  # shellcheck disable=SC2016 # a literal, single-quoted on purpose
  assert_line 'line1\nline2 $(touch PWNED10)'
  run python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(d["model_id"]); print(d["agent_url"])' \
    "$RUN_DIR/toolkit.yaml"
  assert_output "m\`touch PWNED6\`; rm -rf x && echo
http://127.0.0.1:8080/\$(touch PWNED5)"
}

@test "wandb flags only with WANDB_API_KEY; the key is inherited, never on argv or under runs/" {
  write_env "$WORK/exp.env" "$WORK/install" "WANDB_PROJECT=proj"
  run -0 "$TRAIN" "$WORK/exp.env"
  refute_line_in_job --use-wandb
  [[ ! -s $ENV_LOG ]]

  : >"$CALL_LOG"
  # shellcheck disable=SC2030 # each @test has its own environment
  export WANDB_API_KEY=sk-zq8W7vK3 WANDB_ENTITY=ent-Xy9Qp4
  run -0 "$TRAIN" "$WORK/exp.env"
  [[ $(flag_value --wandb-project) == proj ]]
  [[ $(flag_value --wandb-group) == bats-exp ]] # defaults to EXP_ID
  run job_argv
  assert_line --use-wandb
  refute_line --wandb-key
  refute_line --wandb-team
  # workers inherit the key: it was in the environment of `ray start`
  grep -q "ray start: WANDB_API_KEY in environment" "$ENV_LOG"
  if grep -rqE "zq8W7vK3|Xy9Qp4" "$TOOLKIT_RUNS_DIR"; then flunk "a secret was written under runs/"; fi
  if grep -qE "zq8W7vK3|Xy9Qp4" "$CALL_LOG" "$JOB_ARGV" "$JOB_ENV_JSON"; then flunk "a secret reached argv"; fi
}

refute_line_in_job() {
  run job_argv
  refute_line "$1"
}

@test "a secret in the env file is an error, nothing runs" {
  write_env "$WORK/exp.env" "$WORK/install" "WANDB_API_KEY=sk-123"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == *"WANDB_API_KEY is a secret and must not be in the env file"* ]] || flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "toolkit.yaml carries the ACR pointers and typed values; env records every resolved value" {
  run -0 --separate-stderr "$TRAIN" --render-only --set MAX_CONCURRENT=12 --set CUMULATIVE_TOKEN_MODE=false "$WORK/exp.env"
  assert_output "bash $RUN_DIR/train.sh"
  run python3 -c 'import sys, yaml, json; print(json.dumps(yaml.safe_load(open(sys.argv[1])), sort_keys=True))' \
    "$RUN_DIR/toolkit.yaml"
  assert_output_contains '"agent_runtime_arn": "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/agent-AbC123"'
  assert_output_contains '"agent_url": null'
  assert_output_contains '"s3_bucket": "my-bucket"'
  assert_output_contains '"exp_id": "bats-exp"'
  assert_output_contains '"max_concurrent": 12'
  assert_output_contains '"max_pool_connections": 12'
  assert_output_contains '"cumulative_token_mode": false'
  grep -qx "NUM_GPUS='8'" "$RUN_DIR/env"
  grep -qx "MAX_CONCURRENT='12'" "$RUN_DIR/env"
  refute_calls # --render-only runs nothing
}

@test "--dry-run prints the command a real run executes, writes nothing, runs nothing" {
  mkdir "$WORK/tmp"
  TMPDIR=$WORK/tmp run -0 --separate-stderr "$TRAIN" --dry-run --set NUM_ROLLOUT=3 "$WORK/exp.env"
  ((${#lines[@]} == 1)) || flunk "$output"
  [[ ${lines[0]} == "python3 $WORK/install/slime/train.py --swiglu --num-layers 36 "*"--num-rollout 3"* ]] || flunk "$output"
  # the node of make_install is one of the pinned stack: slime fa3c990's flag, SGLang 0.5.13's name
  [[ ${lines[0]} == *" --custom-config-path $RUN_DIR/toolkit.yaml --megatron-to-hf-mode bridge --sglang-cuda-graph-max-bs 32" ]] ||
    flunk "$output"
  [[ $stderr == *"train.sh: slime version unknown (not a git checkout), SGLang 0.5.13: --megatron-to-hf-mode bridge; --sglang-cuda-graph-max-bs 32"* ]] ||
    flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
  run -0 find "$WORK/tmp" -mindepth 1
  assert_output ""
}

@test "missing paths are warnings and a data FAIL in --dry-run (exit 1), errors in a real run" {
  write_env "$WORK/exp.env" "$WORK/install" "VAL_DATA_PATH=$WORK/nope.jsonl"
  run -1 --separate-stderr "$TRAIN" --dry-run "$WORK/exp.env"
  [[ $stderr == *"warning: VAL_DATA_PATH: $WORK/nope.jsonl does not exist"* ]] || flunk "$stderr"
  [[ $stderr == *"bin/train: doctor: FAIL data.VAL_DATA_PATH: $WORK/nope.jsonl does not exist"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == *"VAL_DATA_PATH: $WORK/nope.jsonl does not exist"* ]] || flunk "$stderr"
  refute_calls
}

@test "rerunning keeps a train.sh the user edited beside the new one, and says so" {
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
  echo "# my edit" >>"$RUN_DIR/train.sh"
  run -0 --separate-stderr "$TRAIN" --render-only "$WORK/exp.env"
  [[ $stderr == *"was edited since it was rendered: kept your copy as $RUN_DIR/train.sh.edited-"* ]] || flunk "$stderr"
  grep -q "# my edit" "$RUN_DIR"/train.sh.edited-*
  run ! grep -q "# my edit" "$RUN_DIR/train.sh"
  # an unedited script is simply re-rendered
  run -0 --separate-stderr "$TRAIN" --render-only --set NUM_ROLLOUT=2 "$WORK/exp.env"
  [[ $stderr != *"was edited"* ]] || flunk "$stderr"
  (($(find "$RUN_DIR" -name 'train.sh.edited-*' | wc -l) == 1))
}

@test "rerunning after a checkpoint was saved resumes from it with --load SAVE_DIR" {
  run -0 "$TRAIN" "$WORK/exp.env"
  run ! flag_value --load
  mkdir -p "$RUN_DIR/checkpoints/iter_0000003"
  echo 3 >"$RUN_DIR/checkpoints/latest_checkpointed_iteration.txt"
  run -0 bash "$RUN_DIR/train.sh"
  assert_output_contains "resuming from $RUN_DIR/checkpoints (checkpoint of rollout 3)"
  run -0 flag_value --load
  assert_output "$RUN_DIR/checkpoints"
  run -0 flag_value --save
  assert_output "$RUN_DIR/checkpoints"
}

@test "a model script that fails stops the run before any process is touched" {
  write_env "$WORK/exp.env" "$WORK/install" "MODEL_TYPE=failing"
  run -1 "$TRAIN" "$WORK/exp.env"
  assert_output_contains "model script $WORK/install/slime/scripts/models/failing.sh failed"
  refute_calls
}

@test "CUDA_HOME pins the toolchain for the job: runtime env and --train-env-vars" {
  mkdir -p "$WORK/cuda-13.0/bin" "$WORK/cuda-13.0/lib64"
  write_env "$WORK/exp.env" "$WORK/install" "CUDA_HOME=$WORK/cuda-13.0"
  LD_LIBRARY_PATH="/usr/local/cuda-12.9/lib64:/opt/x/lib" run -0 "$TRAIN" "$WORK/exp.env"
  # shellcheck disable=SC2016 # a literal, single-quoted on purpose
  run python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["env_vars"]; print(e["CUDA_HOME"]); print(e["LD_LIBRARY_PATH"])' "$JOB_ENV_JSON"
  assert_output "$WORK/cuda-13.0
$WORK/cuda-13.0/lib64:/opt/x/lib"
  run flag_value --train-env-vars
  assert_output "{\"CUDA_HOME\": \"$WORK/cuda-13.0\", \"LD_LIBRARY_PATH\": \"$WORK/cuda-13.0/lib64:/opt/x/lib\"}"
}

@test "TOOLKIT_DEBUG=1 traces, and still never prints the wandb key" {
  # shellcheck disable=SC2031 # each @test has its own environment
  export WANDB_API_KEY=sk-zq8W7vK3 TOOLKIT_DEBUG=1
  run -0 "$TRAIN" "$WORK/exp.env"
  assert_output_contains ":main: start_ray_head 8"
  if grep -rq zq8W7vK3 "$TOOLKIT_RUNS_DIR"; then flunk "the key was traced into train.log"; fi
}

@test "python3 without the launcher's helpers: a private venv is created once, said in one line" {
  # a python3 that lacks jinja2/yaml/dotenv; its `-m venv DIR` makes DIR/bin/python a stub
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
  run -0 --separate-stderr "$TRAIN" --dry-run x.env
  [[ $stderr == "bin/train: python3 lacks jinja2/pyyaml/python-dotenv: installing them into $TOOLKIT_VENV (once)" ]] ||
    flunk "stderr: $stderr"
  run calls
  [[ ${lines[0]} == "python3 -c "* ]] || flunk "$output"
  assert_line "python3 -m venv $TOOLKIT_VENV"
  assert_line "venv-python -m pip install --quiet --quiet --disable-pip-version-check jinja2>=3.1 pyyaml>=6 python-dotenv>=1.0"
  assert_line "venv-python -m agentcore_slime.launch --dry-run x.env"
}

@test "TOOLKIT_PYTHON without the helpers is a clear error (127)" {
  stub fakepy 'exit 4'
  TOOLKIT_PYTHON=fakepy run -127 --separate-stderr "$TRAIN" --dry-run x.env
  [[ $stderr == "bin/train: TOOLKIT_PYTHON=fakepy cannot import jinja2, yaml and dotenv"* ]] || flunk "$stderr"
}

@test "ray missing in a real run: exit 127 before anything is rendered" {
  rm "$STUB_DIR/ray"
  # the test venv also holds a real ray: keep its bin/ off PATH, or the rendered script would
  # run for real (stale-process cleanup included)
  TOOLKIT_PYTHON="$TEST_PYTHON_DIR/python3" PATH="$STUB_DIR:$REPO_ROOT/bin:/usr/bin:/bin" \
    run -127 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == *"ray not found on PATH"* ]] || flunk "$stderr"
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "every invalid env file in tests/fixtures/launcher/invalid exits 2 with its message; no stub is called" {
  local file expected count=0
  for file in "$LAUNCHER_FIXTURES"/invalid/*.env; do
    expected=$(sed -n '1s/^# expect: //p' "$file")
    [[ -n $expected ]] || flunk "$file has no '# expect:' first line"
    run -2 --separate-stderr "$TRAIN" "$file"
    [[ $stderr == "bin/train: "*"$expected"* && $stderr == *" ("*")" ]] || flunk "$(basename "$file"): stderr: $stderr"
    [[ -z $output ]] || flunk "$(basename "$file"): stdout: $output"
    count=$((count + 1))
  done
  ((count >= 15)) || flunk "only $count invalid env files"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "flags after -- that the toolkit owns are refused before anything runs; --rollout-top-p 1 is fine" {
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env" -- --sglang-tool-call-parser qwen25
  [[ $stderr == "bin/train: --sglang-tool-call-parser in EXTRA_FLAGS or after -- (set SGLANG_TOOL_CALL_PARSER"* ]] ||
    flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env" -- --reward-key score
  [[ $stderr == *"--reward-key in EXTRA_FLAGS or after --"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env" -- --log-passrate
  [[ $stderr == "bin/train: --log-passrate in EXTRA_FLAGS or after -- is not supported ("* ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env" -- --global-batch-size 3
  [[ $stderr == *"--global-batch-size 3 does not divide the rollout's"* ]] || flunk "$stderr"
  refute_calls
  run -0 "$TRAIN" "$WORK/exp.env" -- --rollout-top-p 1.0
  run -0 flag_value --rollout-top-p
  assert_output "1.0"
}

@test "reward flags the hook honours pass through: --advantage-estimator, --disable-rewards-normalization" {
  run -0 "$TRAIN" "$WORK/exp.env" -- --advantage-estimator gspo --disable-rewards-normalization
  run -0 job_argv
  [[ $output == *$'--advantage-estimator\ngrpo\n'*$'--advantage-estimator\ngspo\n--disable-rewards-normalization' ]] ||
    flunk "the pass-through flags do not come last: $output"
}

@test "an env file with several mistakes: every one on its own stderr line, exit 2, nothing runs" {
  write_env "$WORK/exp.env" "$WORK/install" "NUM_GPU=8" "LR=fast" "TP_SIZE=0"
  run -2 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ -z $output ]] || flunk "stdout: $output"
  local -a errors
  mapfile -t errors <<<"$stderr"
  ((${#errors[@]} == 3)) || flunk "stderr: $stderr"
  [[ ${errors[0]} == "bin/train: $WORK/exp.env:"*": unknown key NUM_GPU (did you mean NUM_GPUS?)" ]] || flunk "${errors[0]}"
  [[ ${errors[1]} == "bin/train: TP_SIZE=0 ("*") is out of range (TP_SIZE must be an integer >= 1)" ]] ||
    flunk "${errors[1]}"
  [[ ${errors[2]} == "bin/train: LR='fast' ("*"): not a number (LR must be a number > 0)" ]] || flunk "${errors[2]}"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "a bad --set, --variant or option is a usage error (exit 2)" {
  run -2 --separate-stderr "$TRAIN" --set NUM_GPUS "$WORK/exp.env"
  [[ $stderr == "bin/train: --set 'NUM_GPUS' is not KEY=VALUE"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" --set NUM_GPU=2 "$WORK/exp.env"
  [[ $stderr == "bin/train: --set: unknown key NUM_GPU (did you mean NUM_GPUS?)" ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" --variant turbo "$WORK/exp.env"
  [[ $stderr == "bin/train: unknown --variant 'turbo' (use one of: sync, async)" ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" --frobnicate "$WORK/exp.env"
  [[ $stderr == "bin/train: unrecognized arguments: --frobnicate (flags for slime go after \`--\`: bin/train $WORK/exp.env -- --frobnicate; bin/train's own options: bin/train --help)" ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" --dry-run --render-only "$WORK/exp.env"
  [[ $stderr == "bin/train: argument --render-only: not allowed with argument --dry-run"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" "$WORK/missing.env"
  [[ $stderr == "bin/train: cannot read env file $WORK/missing.env"* ]] || flunk "$stderr"
  refute_calls
}

@test "--variant async: train_async.py, GPUs split, no --colocate; its own script and log" {
  # 6 training GPUs / TP 2 = data-parallel 3: the episodes per rollout (24 x 8) must divide by it
  run -0 "$TRAIN" --variant async --set ROLLOUT_NUM_GPUS=2 --set ROLLOUT_BATCH_SIZE=24 "$WORK/exp.env"
  [[ -f $RUN_DIR/train_async.sh && -f $RUN_DIR/train_async.log && ! -e $RUN_DIR/train.sh ]]
  run job_argv
  [[ ${lines[1]} == "$WORK/install/slime/train_async.py" ]] || flunk "$output"
  refute_line --colocate
  [[ $(flag_value --rollout-num-gpus) == 2 && $(flag_value --actor-num-gpus-per-node) == 6 ]]
  [[ $(flag_value --global-batch-size) == 192 ]]
  run calls ray
  assert_output_contains "ray start --head --num-gpus 8 --disable-usage-stats"
}

@test "--variant async: a split that does not divide is an error" {
  run -2 --separate-stderr "$TRAIN" --variant async --set ROLLOUT_NUM_GPUS=3 "$WORK/exp.env"
  [[ $stderr == "bin/train: training GPUs (NUM_GPUS - ROLLOUT_NUM_GPUS)=5 is not divisible by TP_SIZE=2"* ]] ||
    flunk "$stderr"
  run -2 --separate-stderr "$TRAIN" --variant async --set ROLLOUT_NUM_GPUS=8 "$WORK/exp.env"
  [[ $stderr == "bin/train: ROLLOUT_NUM_GPUS=8 leaves no GPU for training"* ]] || flunk "$stderr"
  # Megatron would assert at start-up: 32 x 8 episodes do not split over data-parallel 3
  run -2 --separate-stderr "$TRAIN" --variant async --set ROLLOUT_NUM_GPUS=2 "$WORK/exp.env"
  [[ $stderr == "bin/train: ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT = 256 episodes per rollout is not a multiple of the data-parallel size 3"* ]] ||
    flunk "$stderr"
  refute_calls
}

@test "--variant eval is refused with a pointer to bin/eval, before anything runs" {
  run -2 --separate-stderr "$TRAIN" --variant eval "$WORK/exp.env"
  [[ $stderr == "bin/train: --variant eval was removed (evaluation is bin/eval now: bin/eval ENV_FILE"* ]] ||
    flunk "$stderr"
  refute_calls
  [[ ! -e $TOOLKIT_RUNS_DIR ]]
}

@test "--dry-run of a two-node env file: join.sh, the multi-node flags, node-local path warnings" {
  run -0 --separate-stderr "$TRAIN" --dry-run --set NUM_NODES=2 "$WORK/exp.env"
  [[ $output == *" --num-gpus-per-node 8 --actor-num-nodes 2 --actor-num-gpus-per-node 8 --colocate --rollout-num-gpus 16 "* ]] ||
    flunk "$output"
  [[ $stderr == *"NUM_NODES=2: each worker runs $RUN_DIR/join.sh HEAD_IP:PORT"* ]] || flunk "$stderr"
  # the test's install lives under /tmp: every path the workers need is flagged
  [[ $stderr == *"warning: MODEL_DIR $WORK/install/model looks node-local (under /tmp)"* ]] || flunk "$stderr"
  [[ $stderr == *"warning: DATA_PATH "*"looks node-local"* ]] || flunk "$stderr"
  refute_calls
  run -0 "$TRAIN" --render-only --set NUM_NODES=2 "$WORK/exp.env"
  [[ -x $RUN_DIR/join.sh ]] || flunk "no join.sh in $RUN_DIR"
}

@test "multi-node with the split-GPU variant is refused before anything runs" {
  run -2 --separate-stderr "$TRAIN" --variant async --set NUM_NODES=2 "$WORK/exp.env"
  [[ $stderr == "bin/train: NUM_NODES=2 works with the colocated variants only"* ]] || flunk "$stderr"
  refute_calls
}

teardown() {
  [[ -z ${OTHER_USER:-} ]] || remove_other_user
}

@test "issue 39: GATEWAY_HOST=127.0.0.1 with an AGENT_RUNTIME_ARN stops a real run before anything starts (--skip-doctor starts it)" {
  write_env "$WORK/exp.env" "$WORK/install" "GATEWAY_HOST=127.0.0.1"
  run -1 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == *"bin/train: doctor: FAIL rollout.gateway-address: GATEWAY_HOST=127.0.0.1 is a loopback address, which agents on ACR cannot reach (every episode would time out)"* ]] ||
    flunk "$stderr"
  [[ ${stderr##*$'\n'} == "bin/train: nothing was started (fix the FAIL lines; bin/doctor $WORK/exp.env runs every check; --skip-doctor skips these in an emergency)" ]] ||
    flunk "$stderr"
  refute_calls
  [[ ! -e $RUN_DIR/train.sh ]] || flunk "rendered anyway"
  run -0 "$TRAIN" --skip-doctor "$WORK/exp.env"
}

@test "issue 39: no AWS credentials for the run's workers stops a real run before anything starts" {
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  run -1 --separate-stderr "$TRAIN" "$WORK/exp.env"
  [[ $stderr == *"bin/train: doctor: FAIL aws.credentials: no AWS credentials found: the run's workers inherit this shell's environment"* ]] ||
    flunk "$stderr"
  refute_calls
  [[ ! -e $RUN_DIR/train.sh ]] || flunk "rendered anyway"
  # --render-only and --dry-run are for machines without them: not gated
  run -0 "$TRAIN" --render-only "$WORK/exp.env"
}
