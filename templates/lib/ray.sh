# shellcheck shell=bash
# ray.sh: this run's Ray node (token authentication, one run at a time, ports), the head's
# wait for worker GPUs, the slime job, and a bounded stop on exit, Ctrl-C or TERM.
# The caller sets RAY_TEMP_DIR, RAY_PORT, RAY_DASHBOARD_PORT, RAY_CLIENT_SERVER_PORT and
# RAY_DASHBOARD_AGENT_PORT (plain shell variables, not exported: Ray never reads them).

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

# ray_dashboard_url: the head's job/state API address.
ray_dashboard_url() {
  printf 'http://127.0.0.1:%s' "$RAY_DASHBOARD_PORT"
}

# ray_has_token_auth: true when this Ray knows token authentication (Ray >= 2.52 has
# `ray get-auth-token`; older Rays, such as some slime containers', do not).
ray_has_token_auth() {
  ray get-auth-token --help >/dev/null 2>&1
}

# refuse_foreign_secret FILE WHAT: exit 1 unless FILE (when it exists) is a regular file, not a
# link, owned by this user and writable by no one else, in a directory of this user's that no
# one else can write (else another user could swap FILE between this check and Ray's read).
refuse_foreign_secret() { # <file> <what>
  local file=$1 what=$2 dir uid owner mode
  uid=$(id -u)
  dir=$(dirname -- "$file")
  read -r owner mode < <(stat -L -c '%u %a' -- "$dir") || die "cannot read the directory of $what $file"
  ((owner == uid)) ||
    die "$what $file is in $dir, which belongs to uid $owner, not to you (uid $uid): another user could replace it (keep it in a directory of yours, such as ~/.ray)"
  (((8#$mode & 8#022) == 0)) ||
    die "$what $file is in $dir, which other users can write (mode $mode): they could replace it (chmod go-w $dir)"
  [[ -e $file || -L $file ]] || return 0
  [[ ! -L $file ]] ||
    die "$what $file is a symbolic link (to $(readlink -- "$file")): the toolkit never reads a secret through a link (remove the link; the head creates a new token, or copy the head's file in its place)"
  [[ -f $file ]] || die "$what $file is not a regular file (remove it)"
  read -r owner mode < <(stat -c '%u %a' -- "$file") || die "cannot read $what $file"
  ((owner == uid)) ||
    die "$what $file belongs to uid $owner, not to you (uid $uid): its content may be theirs (remove it, or copy the head's file in its place)"
  (((8#$mode & 8#022) == 0)) ||
    die "$what $file is writable by other users (mode $mode): its content may be theirs (remove it; the head creates a new token, or copy the head's file in its place, mode 0600)"
}

# ensure_token_file FILE: reuse FILE (made mode 0600) or create it with a random token.
# The token is written by python3 (ray_helper.py token) straight into a new file (O_EXCL, no
# link followed), then renamed over FILE: never printed, never on argv.
ensure_token_file() { # <file>
  local file=$1
  (umask 077 && mkdir -p -- "$(dirname -- "$file")") ||
    die "cannot create the directory of the Ray token file $file (set TOOLKIT_RAY_TOKEN_FILE to a path of yours)"
  refuse_foreign_secret "$file" "the Ray token file"
  if [[ -s $file ]]; then
    chmod 600 "$file" || die "cannot chmod 600 $file (is it yours?)"
    say "Ray token authentication: using $file"
    return 0
  fi
  python3 "$TOOLKIT_HELPER_DIR/ray_helper.py" token "$file" ||
    die "cannot create the Ray token file $file (set TOOLKIT_RAY_TOKEN_FILE to a writable path)"
  say "Ray token authentication: created $file (mode 0600)"
}

# setup_ray_auth TOKEN_FILE CREATE [MODE]: MODE token (the default) turns on token
# authentication for every ray command of this script (and the Ray it starts) through the
# environment: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH. CREATE=1 creates a missing token
# (head); a worker must get the head's. A Ray without token authentication is refused.
# MODE none (the env file's RAY_AUTH=none, an explicit opt-out) runs without, with a warning.
setup_ray_auth() { # <token-file> <create> [<mode>]
  unset RAY_AUTH_TOKEN # a token in the environment would win over the file the workers use
  if [[ ${3:-token} == none ]]; then
    unset RAY_AUTH_MODE RAY_AUTH_TOKEN_PATH
    say "warning: RAY_AUTH=none: Ray token authentication is off; anyone who reaches this node's Ray ports can run code as you (remove RAY_AUTH=none from the env file to turn it on)"
    return 0
  fi
  ray_has_token_auth ||
    die "this Ray ($(ray --version 2>/dev/null || echo 'unknown version')) has no token authentication: anyone who reaches this node's Ray ports could run code as you (install the Ray that install_slime.sh pins, >= 2.52; or set RAY_AUTH=none in the env file to run without it)"
  if [[ $2 == 1 ]]; then
    ensure_token_file "$1"
  else
    [[ -s $1 || -L $1 ]] ||
      die "no Ray token at $1 (copy the head's token file here, mode 0600: scp HEAD:$1 $1 && chmod 600 $1; or set TOOLKIT_RAY_TOKEN_FILE)"
    refuse_foreign_secret "$1" "the Ray token file"
    chmod 600 "$1" || die "cannot chmod 600 $1 (is it yours?)"
  fi
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$1
}

# setup_ray_tls ON CA CERT KEY NUM_NODES PEER: ON=1 turns on Ray's own TLS (mutual TLS of its
# gRPC) for every ray command of this script and the Ray it starts, through the environment
# Ray's processes inherit (RAY_USE_TLS, RAY_TLS_CA_CERT, RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY),
# after checking the files (check_ray_tls_files; PEER: see there). ON=0 clears them, with a
# warning when the run spans nodes: Ray's traffic, the token included, is then cleartext.
setup_ray_tls() { # <on> <ca-cert> <cert> <key> <num-nodes> <peer>
  if [[ $1 != 1 ]]; then
    unset RAY_USE_TLS RAY_TLS_CA_CERT RAY_TLS_SERVER_CERT RAY_TLS_SERVER_KEY
    (($5 <= 1)) ||
      say "warning: RAY_TLS is off on a $5-node run: Ray's traffic between the nodes, its token included, crosses the network in cleartext (set RAY_TLS=1 and the RAY_TLS_* files in the env file; docs/launcher.md, 'Ray security: tokens and TLS')"
    return 0
  fi
  check_ray_tls_files "$2" "$3" "$4" "$6"
  export RAY_USE_TLS=1 RAY_TLS_CA_CERT=$2 RAY_TLS_SERVER_CERT=$3 RAY_TLS_SERVER_KEY=$4
  say "Ray TLS: on (certificate $3, CA $2)"
}

# refuse_unsafe_tls_file FILE WHAT PRIVATE: exit 1 unless FILE (links resolved) is a regular
# file owned by this user or root that no other user can write (they could swap in their own
# CA or certificate); PRIVATE=1 (the key): nobody else can read it either.
refuse_unsafe_tls_file() { # <file> <what> <private>
  local file=$1 real owner mode uid
  uid=$(id -u)
  real=$(readlink -f -- "$file") && [[ -f $real && -r $real ]] ||
    die "RAY_TLS: $2 $file is missing or not a readable file (set $2 in the env file to this node's file)"
  read -r owner mode < <(stat -c '%u %a' -- "$real") || die "RAY_TLS: cannot read $2 $file"
  [[ $owner == "$uid" || $owner == 0 ]] ||
    die "RAY_TLS: $2 $file belongs to uid $owner, not to you or root: its content may be theirs (use files of yours)"
  (((8#$mode & 8#022) == 0)) || die "RAY_TLS: $2 $file is writable by other users (mode $mode) (chmod go-w $real)"
  [[ $3 != 1 ]] || (((8#$mode & 8#077) == 0)) ||
    die "RAY_TLS: the private key $file is readable by other users (mode $mode) (chmod 600 $real)"
}

# check_ray_tls_files CA CERT KEY PEER: exit 1 unless the files are safe (above) and a TLS
# handshake in memory (ray_helper.py tls-check), both ways as Ray's mutual TLS does, succeeds:
# KEY matches CERT, CERT is valid now and signed by CA, and CERT names this node's address: the
# source address of the kernel's route to PEER (a UDP connect() that sends no packet), as Ray
# picks its node address (PEER: the head's address for a worker; for a head 8.8.8.8, unless
# TOOLKIT_NODE_IP names the address).
check_ray_tls_files() { # <ca-cert> <cert> <key> <peer>
  refuse_unsafe_tls_file "$1" RAY_TLS_CA_CERT 0
  refuse_unsafe_tls_file "$2" RAY_TLS_SERVER_CERT 0
  refuse_unsafe_tls_file "$3" RAY_TLS_SERVER_KEY 1
  python3 "$TOOLKIT_HELPER_DIR/ray_helper.py" tls-check "$@" ||
    die "RAY_TLS: the certificate files do not work for this node (see the line above; docs/launcher.md, 'Ray security: tokens and TLS')"
}

# resolve_ray_temp_dir: RAY_TEMP_DIR, by default `ray` in this user's private node-local
# directory (Ray makes its temp dir mode 0777: inside a 0700 parent no one else reaches it).
# An explicit one must be short enough for Ray's unix sockets, and not a link or another user's.
resolve_ray_temp_dir() {
  local owner type
  ensure_private_dir "$(toolkit_runtime_dir)"
  RAY_TEMP_DIR=${RAY_TEMP_DIR:-$(toolkit_runtime_dir)/ray}
  # Ray's longest socket path is <temp dir>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store
  ((${#RAY_TEMP_DIR} <= 43)) ||
    die "RAY_TEMP_DIR $RAY_TEMP_DIR is ${#RAY_TEMP_DIR} characters: Ray's unix sockets under it would pass the 107-byte limit (use at most 43, or leave RAY_TEMP_DIR unset)" 2
  read -r owner type < <(stat -c '%u %F' -- "$RAY_TEMP_DIR" 2>/dev/null) || return 0
  [[ $type == directory ]] ||
    die "RAY_TEMP_DIR $RAY_TEMP_DIR is a $type, not a directory (remove it, or leave RAY_TEMP_DIR unset)" 2
  [[ $owner == "$(id -u)" ]] ||
    die "RAY_TEMP_DIR $RAY_TEMP_DIR belongs to $(owner_name "$owner"), not to you (leave RAY_TEMP_DIR unset: the default is private to you)" 2
}

# acquire_run_lock EXP_ID: one run at a time on this node's Ray (RAY_TEMP_DIR), with the
# kernel lock ray-<hash>.lock in the private directory (lock.sh). A held lock is an error
# naming the holder's PID and EXP_ID; so is one of this user's evaluations on the node's GPUs.
# Sets TOOLKIT_RUN_SLOT, the marker of this run's processes.
acquire_run_lock() { # <exp-id>
  local lock holder_pid holder_exp
  TOOLKIT_RUN_SLOT=$(lock_slot ray "$RAY_TEMP_DIR")
  lock="$(toolkit_runtime_dir)/$TOOLKIT_RUN_SLOT.lock"
  if ! take_lock "$lock" "$$ $1"; then
    read -r holder_pid holder_exp <<<"$TOOLKIT_LOCK_HOLDER"
    die "another run uses this node's Ray: PID ${holder_pid:-?} (EXP_ID ${holder_exp:-?}), lock $lock (wait for it to end, stop it with 'kill ${holder_pid:-PID}', or give this run its own RAY_TEMP_DIR and Ray ports)"
  fi
  refuse_beside_evaluations
}

# release_run_lock: let go of the run lock (the kernel also does when this script dies).
release_run_lock() {
  release_lock
}

# check_ports_free KEY=PORT...: exit 1 naming every port another process listens on, and the
# env-file key that chooses it.
check_ports_free() { # <key=port>...
  local busy
  busy=$(python3 "$TOOLKIT_HELPER_DIR/ray_helper.py" ports "$@") || die "python3 could not check the Ray ports"
  [[ -z $busy ]] ||
    die "ports in use by another process (another user's Ray?): ${busy% } (choose free ones with these keys in the env file)"
}

# run_interruptibly COMMAND...: run COMMAND in the background (its stdout to stderr) and wait
# for it, so that a trapped Ctrl-C or TERM is handled at once instead of after COMMAND ends.
# Never redirect a call of this function: bash would keep a copy of the redirected fd open
# while a trap runs inside it, and the log's tee would then never see the end of its input.
run_interruptibly() { # <command>...
  run_in_background "$@"
  wait "$TOOLKIT_CHILD_PID"
}

# bind_engines_to_loopback: a one-node run's Ray node address is 127.0.0.1 (ray start
# --node-ip-address, through TOOLKIT_NODE_IP), and SLIME_HOST_IP=127.0.0.1 is exported for the
# Ray workers: slime binds its SGLang engines to the Ray node's address and its router to
# SLIME_HOST_IP. They take unauthenticated HTTP (slime's own calls to them send no key; docs/
# launcher.md), so this keeps the network out. Other local users still reach 127.0.0.1.
# A SLIME_HOST_IP the user exported wins (and the node keeps Ray's own choice of address).
bind_engines_to_loopback() {
  if env_is_set SLIME_HOST_IP; then
    say "warning: SLIME_HOST_IP is set: the SGLang engines and router listen on the node's network address without authentication (unset it to keep them on 127.0.0.1)"
    return 0
  fi
  export SLIME_HOST_IP=127.0.0.1
  TOOLKIT_NODE_IP=127.0.0.1
  say "one node: Ray, the SGLang engines and the router listen on 127.0.0.1 only"
}

# run_in_background COMMAND...: start COMMAND in the background, its stdout to stderr
# (TOOLKIT_CHILD_PID = its PID; the cleanup traps stop it).
run_in_background() { # <command>...
  "$@" >&2 &
  TOOLKIT_CHILD_PID=$!
}

# start_ray_head NUM_GPUS: start this run's Ray head (stopped again by the cleanup traps). Its
# processes, and all that slime's Ray actors start (SGLang engines, router), inherit this
# run's marker (AGENTCORE_SLIME_RUN), which the next run's cleanup finds after a crash.
start_ray_head() { # <num-gpus>
  local -a node_ip=()
  if [[ -n ${TOOLKIT_NODE_IP:-} ]]; then node_ip=(--node-ip-address "$TOOLKIT_NODE_IP"); fi
  say "starting the Ray head with $1 GPUs (temp dir $RAY_TEMP_DIR, port $RAY_PORT)"
  TOOLKIT_RAY_STARTED=1 # from here on, whatever part of Ray came up is ours to stop
  run_interruptibly env "$(run_marker_env "${TOOLKIT_RUN_SLOT:-}")" \
    ray start --head --num-gpus "$1" --disable-usage-stats \
    --temp-dir "$RAY_TEMP_DIR" --port "$RAY_PORT" --dashboard-port "$RAY_DASHBOARD_PORT" \
    --ray-client-server-port "$RAY_CLIENT_SERVER_PORT" \
    --dashboard-agent-listen-port "$RAY_DASHBOARD_AGENT_PORT" "${node_ip[@]}" ||
    die "ray start failed (see the output above)"
}

# The head's word to its workers that its run ended (not a crash) is a key in Ray's internal
# key-value store, which the workers' join.sh polls: ray_run_end.py (in TOOLKIT_HELPER_DIR; the
# python3 that has Ray) puts it (`put`) or waits for it (`watch`). TOOLKIT_RUN_END_KV overrides
# its path.

# tell_workers_run_ended STATUS: before the head stops its Ray, tell the workers that the run
# ended, and give them up to TOOLKIT_WORKERS_LEAVE_TIMEOUT seconds (default 20) to leave.
tell_workers_run_ended() { # <exit-status>
  local deadline=$((SECONDS + ${TOOLKIT_WORKERS_LEAVE_TIMEOUT:-20})) state _ip _n role _id alive
  stop_node_watch
  timeout -k 2 10 python3 "${TOOLKIT_RUN_END_KV:-$TOOLKIT_HELPER_DIR/ray_run_end.py}" put "127.0.0.1:$RAY_PORT" "$1" 2>/dev/null ||
    { say "could not tell the workers that the run ended: their join.sh will report a lost head"; return 0; }
  while ((SECONDS < deadline)); do
    alive=0
    while read -r state _ip _n role _id; do
      [[ $state == ALIVE && $role == worker ]] && alive=$((alive + 1))
    done < <(cluster_nodes || true)
    ((alive > 0)) || return 0
    sleep 1
  done
  say "$alive worker node(s) still in the cluster after ${TOOLKIT_WORKERS_LEAVE_TIMEOUT:-20}s: stopping Ray anyway"
}

# join_ray_cluster HEAD_ADDRESS NUM_GPUS: a worker joins the head (`ray start --block`, with
# this node's run marker) and stays until the head says its run ended (exit 0, one line) or
# this node's Ray stops (exit 1: the head died or the network failed; Ray's output says which).
join_ray_cluster() { # <head-address> <num-gpus>
  local me=$BASHPID # (in the background command below, $BASHPID would be the child's own)
  say "joining the Ray head at $1 with $2 GPUs (temp dir $RAY_TEMP_DIR); Ctrl-C leaves the cluster"
  TOOLKIT_RAY_STARTED=1
  run_in_background env "$(run_marker_env "${TOOLKIT_RUN_SLOT:-}")" ray start --address="$1" \
    --num-gpus "$2" --disable-usage-stats --block --temp-dir "$RAY_TEMP_DIR" \
    --dashboard-agent-listen-port "$RAY_DASHBOARD_AGENT_PORT"
  python3 "${TOOLKIT_RUN_END_KV:-$TOOLKIT_HELPER_DIR/ray_run_end.py}" watch "$1" "${TOOLKIT_RUN_END_POLL:-1}" "$me" </dev/null 2>/dev/null &
  TOOLKIT_END_WATCH_PID=$!
  while is_live "$TOOLKIT_CHILD_PID"; do
    if [[ -n $TOOLKIT_END_WATCH_PID ]] && ! is_live "$TOOLKIT_END_WATCH_PID"; then
      wait "$TOOLKIT_END_WATCH_PID" && leave_cluster_after_head_ended
      TOOLKIT_END_WATCH_PID= # the watcher failed: a lost head is still reported below
    fi
    sleep 1 &
    wait "$!" # returns at once when a trapped signal arrives
  done
  wait "$TOOLKIT_CHILD_PID" || true
  say "this node's Ray stopped without word from the head that its run ended: the head died or this node lost it (see Ray's output above)"
  return 1
}

# leave_cluster_after_head_ended: the head's run ended: one line, exit 0 (the EXIT trap stops
# this node's Ray quietly).
leave_cluster_after_head_ended() {
  TOOLKIT_END_WATCH_PID=
  TOOLKIT_QUIET_EXIT=1
  say "the head's run ended: this node leaves the cluster"
  exit 0
}

# print_join_command JOIN_SCRIPT NUM_NODES: tell the user the one command to run on each worker.
print_join_command() { # <join-script> <num-nodes>
  local state ip n role id head_ip=""
  while read -r state ip n role id; do
    [[ $role == head && $state == ALIVE ]] && head_ip=$ip
  done < <(cluster_nodes || true)
  [[ -n $head_ip ]] || die "could not read the head's address from 'ray list nodes'"
  say "waiting up to ${JOIN_TIMEOUT}s for $(($2 - 1)) worker node(s); on each worker run:"
  say "  bash $(printf '%q' "$1") $head_ip:$RAY_PORT"
}

# cluster_nodes: one line per node of the cluster, `STATE IP GPUS HEAD NODE_ID`
# (from `ray list nodes`, which authenticates with the token).
cluster_nodes() {
  ray list nodes --address="$(ray_dashboard_url)" --format=json --limit=10000 2>/dev/null |
    python3 "$TOOLKIT_HELPER_DIR/ray_helper.py" nodes
}

# wait_for_gpus NUM_NODES GPUS_PER_NODE TIMEOUT: wait until the cluster's live nodes have
# NUM_NODES x GPUS_PER_NODE GPUs; exit 1 after TIMEOUT seconds naming who joined.
wait_for_gpus() { # <num-nodes> <gpus-per-node> <timeout-seconds>
  local want=$(($1 * $2)) deadline=$((SECONDS + $3)) nodes gpus joined state ip n role _id
  while :; do
    nodes=0 gpus=0 joined=""
    while read -r state ip n role _id; do
      [[ $state == ALIVE ]] || continue
      nodes=$((nodes + 1)) gpus=$((gpus + n)) joined+="$ip ($role, $n GPUs), "
    done < <(cluster_nodes || true)
    if ((gpus >= want)); then
      say "$nodes nodes with $gpus GPUs joined: ${joined%, }"
      return 0
    fi
    ((SECONDS < deadline)) || die "JOIN_TIMEOUT: after $3 s, $nodes of $1 nodes ($gpus of $want GPUs) joined: ${joined%, }; missing: $(($1 - nodes)) node(s) with $2 GPUs each (run the join.sh command printed above on each worker; check that the workers reach this node's port $RAY_PORT; or raise JOIN_TIMEOUT)"
    run_interruptibly sleep 2
  done
}

# watch_worker_nodes: in the background, report every node that dies during the run
# (polled every TOOLKIT_NODE_POLL seconds, default 10), with its address.
watch_worker_nodes() {
  local script=$BASHPID
  (
    trap - INT TERM EXIT
    local reported=" " state ip n role id
    # the watch ends with the script that started it: a SIGKILLed train.sh runs no trap that
    # stops it, and an orphaned watch would poll Ray (a python process each time) forever
    while is_live "$script" && sleep "${TOOLKIT_NODE_POLL:-10}" >/dev/null 2>&1; do
      while read -r state ip n role id; do
        [[ $state == DEAD && $reported != *" $id "* ]] || continue
        reported+="$id "
        say "error: $role node $ip ($n GPUs, node id $id) died; the job loses its GPUs and will fail or hang (see that node's join.sh output and $RAY_TEMP_DIR/session_latest/logs there)"
      done < <(cluster_nodes || true)
    done
  ) &
  TOOLKIT_WATCH_PID=$!
}

# stop_node_watch: stop the background loops (the head's node watch, a worker's end watch).
stop_node_watch() {
  local pid
  for pid in "${TOOLKIT_WATCH_PID:-}" "${TOOLKIT_END_WATCH_PID:-}"; do
    [[ -z $pid ]] || kill "$pid" 2>/dev/null || true
  done
  TOOLKIT_WATCH_PID='' TOOLKIT_END_WATCH_PID=''
}

# runtime_env_json PYTHONPATH: the job's Ray runtime env as JSON (built by python3's json,
# ray_helper.py runtime-env):
# PYTHONPATH, CUDA_DEVICE_MAX_CONNECTIONS=1 and, when CUDA is pinned, CUDA_HOME and LD_LIBRARY_PATH.
runtime_env_json() { # <pythonpath>
  TOOLKIT_JOB_PYTHONPATH=$1 python3 "$TOOLKIT_HELPER_DIR/ray_helper.py" runtime-env
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
  ray job submit --address="$(ray_dashboard_url)" --submission-id="$1" \
    --runtime-env-json="$2" -- "${@:3}" &
  TOOLKIT_SUBMIT_PID=$!
  wait "$TOOLKIT_SUBMIT_PID"
}

# stop_job: ask Ray to stop the submitted job, for at most TOOLKIT_JOB_STOP_TIMEOUT seconds
# (default 15); if it does not stop in time, stopping Ray afterwards kills it.
stop_job() {
  local limit=${TOOLKIT_JOB_STOP_TIMEOUT:-15}
  [[ -n ${TOOLKIT_JOB_ID:-} ]] || return 0
  say "stopping Ray job $TOOLKIT_JOB_ID (up to ${limit}s)"
  run_interruptibly timeout -k 2 "$limit" ray job stop --address="$(ray_dashboard_url)" "$TOOLKIT_JOB_ID" ||
    say "the job did not stop within ${limit}s: stopping Ray kills it"
  if [[ -n ${TOOLKIT_SUBMIT_PID:-} ]]; then
    kill "$TOOLKIT_SUBMIT_PID" 2>/dev/null || true
  fi
}

# stop_own_ray: stop the Ray node this script started (its processes only, verified gone).
stop_own_ray() {
  [[ -n ${TOOLKIT_RAY_STARTED:-} ]] || return 0
  stop_node_watch
  stop_ray_processes "$(id -u)" "$(ray_node_pattern "$RAY_TEMP_DIR" "$RAY_PORT")"
  # what slime's actors started and Ray's stop left running (an SGLang engine, the router)
  [[ -z ${TOOLKIT_RUN_SLOT:-} ]] || stop_marked_processes "$(id -u)" "$(run_marker_env "$TOOLKIT_RUN_SLOT")"
  if [[ -n ${TOOLKIT_CHILD_PID:-} ]]; then
    kill "$TOOLKIT_CHILD_PID" 2>/dev/null || true # `ray start --block` of a worker
  fi
  TOOLKIT_RAY_STARTED=
}

# kill_children_now: the background commands we wait for, and our Ray, SIGKILLed at once.
kill_children_now() {
  local pid
  for pid in "${TOOLKIT_CHILD_PID:-}" "${TOOLKIT_SUBMIT_PID:-}" "${TOOLKIT_WATCH_PID:-}" "${TOOLKIT_END_WATCH_PID:-}"; do
    [[ -z $pid ]] || kill -KILL "$pid" 2>/dev/null || true
  done
  if [[ -n ${TOOLKIT_RAY_STARTED:-} ]]; then
    kill_ray_processes_now "$(id -u)" "$(ray_node_pattern "$RAY_TEMP_DIR" "$RAY_PORT")"
    [[ -z ${TOOLKIT_RUN_SLOT:-} ]] ||
      signal_marked_processes KILL "$(id -u)" "$(run_marker_env "$TOOLKIT_RUN_SLOT")" >/dev/null
  fi
  TOOLKIT_RAY_STARTED=
}

# cleanup_on_signal SIGNAL: first Ctrl-C/TERM: stop the job (bounded), exit 128+N and let
# the EXIT trap stop our Ray. A second one meanwhile: SIGKILL our Ray and exit at once.
cleanup_on_signal() { # <signal-name>
  local status=143
  [[ $1 == INT ]] && status=130
  if [[ -n ${TOOLKIT_STOPPING:-} ]]; then
    trap - EXIT
    say "second SIG$1: killing this run's Ray processes now"
    kill_children_now
    release_run_lock
    exit "$status"
  fi
  TOOLKIT_STOPPING=$1
  say "caught SIG$1: stopping the Ray job and Ray (a second Ctrl-C stops at once)"
  if [[ -n ${TOOLKIT_CHILD_PID:-} ]]; then
    kill "$TOOLKIT_CHILD_PID" 2>/dev/null || true
  fi
  stop_job
  exit "$status"
}

# cleanup_on_exit: tell the workers (a head of NUM_NODES > 1: TOOLKIT_HAS_WORKERS) that the
# run ended, stop the Ray node we started, release the lock, keep the exit status.
cleanup_on_exit() {
  local status=$?
  trap - EXIT
  if [[ -n ${TOOLKIT_RAY_STARTED:-} ]]; then
    [[ -z ${TOOLKIT_HAS_WORKERS:-} ]] || tell_workers_run_ended "$status" || true
    stop_own_ray || true
    [[ -n ${TOOLKIT_QUIET_EXIT:-} ]] || say "stopped Ray (exit status $status)"
  fi
  release_run_lock
  stop_logging
  exit "$status"
}

# install_cleanup_trap: on Ctrl-C or TERM stop the job and Ray; on any exit stop Ray.
install_cleanup_trap() {
  trap 'cleanup_on_signal INT' INT
  trap 'cleanup_on_signal TERM' TERM
  trap cleanup_on_exit EXIT
}
