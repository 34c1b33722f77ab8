#!/usr/bin/env bats
# templates/lib/ray.sh, sourced directly: Ray token authentication required (RAY_AUTH), the
# token file never read through a link or from a place another user can write, Ray's TLS
# (RAY_TLS) exported to every ray command through the environment after its files are checked,
# and a one-node run's Ray, engines and router on 127.0.0.1. Certificates are made with openssl.

bats_require_minimum_version 1.5.0

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/processes.sh
  source "$LIB_DIR/processes.sh"
  # shellcheck source=templates/lib/lock.sh
  source "$LIB_DIR/lock.sh"
  # shellcheck source=templates/lib/ray.sh
  source "$LIB_DIR/ray.sh"
  stub_cluster
  RAY_TEMP_DIR="$WORK/ray" RAY_PORT=6390 RAY_DASHBOARD_PORT=8266 RAY_CLIENT_SERVER_PORT=10010
  TOOLKIT_RUN_SLOT=$(lock_slot ray "$RAY_TEMP_DIR") # the run's marker, as acquire_run_lock sets it
  RAY_DASHBOARD_AGENT_PORT=52370
  PATH="$PATH:/usr/sbin:/sbin" # useradd, userdel (with_other_user): the sealed PATH lacks them
}

teardown() {
  remove_other_user
}

# make_certs DIR [SAN]: a CA (DIR/ca.crt) and a node key/certificate it signed (DIR/node.key,
# DIR/node.crt) naming SAN (default: 127.0.0.1 and this machine's address), plus an expired
# one (DIR/expired.crt) and one naming another address (DIR/elsewhere.crt).
make_certs() { # <dir> [san]
  local dir=$1 san=${2:-}
  [[ -n $san ]] || san="IP:127.0.0.1,IP:$(own_address)"
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=node -keyout "$dir/node.key" -out "$dir/node.csr" 2>/dev/null
  sign "$dir" node.crt 1 "$san"
  sign "$dir" expired.crt -1 "$san"
  sign "$dir" elsewhere.crt 1 IP:10.255.255.1
  chmod 600 "$dir/node.key" "$dir/ca.key"
}

sign() { # <dir> <out> <days> <san>
  printf 'subjectAltName=%s\n' "$4" >"$1/san.ext"
  openssl x509 -req -in "$1/node.csr" -CA "$1/ca.crt" -CAkey "$1/ca.key" -CAcreateserial \
    -days "$3" -extfile "$1/san.ext" -out "$1/$2" 2>/dev/null
}

# own_address: this machine's address as Ray picks it (the source of its route to 8.8.8.8).
own_address() {
  python3 -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("8.8.8.8", 80)); print(s.getsockname()[0])
except OSError:
    print("127.0.0.1")'
}

# stub_ray_env: a ray stub that records, per call, its first argument and the TLS variables
# of its environment, and its whole argv (to show no certificate path or token is on it).
stub_ray_env() {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray 'echo "$1 ${RAY_USE_TLS:-no-tls} ${RAY_TLS_CA_CERT:-} ${RAY_TLS_SERVER_CERT:-} ${RAY_TLS_SERVER_KEY:-} ${SLIME_HOST_IP:-no-host-ip}" >>"$ENV_LOG"; exit 0'
}

@test "a Ray without token authentication is refused with the fix (exit 1, nothing created)" {
  # shellcheck disable=SC2016 # the stub's body expands when it runs
  stub ray '[[ $1 == get-auth-token ]] && { echo "Error: No such command" >&2; exit 2; }; [[ $1 == --version ]] && echo "ray, version 2.47.1"; exit 0'
  run -1 --separate-stderr setup_ray_auth "$HOME/.ray/auth_token" 1 token
  [[ $stderr == *"this Ray (ray, version 2.47.1) has no token authentication"*"install the Ray that install_slime.sh pins"*"or set RAY_AUTH=none in the env file"* ]] ||
    flunk "$stderr"
  [[ ! -e $HOME/.ray/auth_token ]] || flunk "a token was created"
}

@test "RAY_AUTH=none opts out explicitly: a warning, no RAY_AUTH_* in the environment" {
  export "RAY_AUTH_MODE=token" "RAY_AUTH_TOKEN_PATH=/elsewhere" # as if inherited
  setup_ray_auth "$HOME/.ray/auth_token" 1 none 2>"$WORK/err"
  grep -q "warning: RAY_AUTH=none: Ray token authentication is off" "$WORK/err"
  [[ ! -v RAY_AUTH_MODE && ! -v RAY_AUTH_TOKEN_PATH && ! -e $HOME/.ray/auth_token ]] || flunk "auth still on"
}

@test "a token file that is a link is never read or written through (head and worker)" {
  mkdir -p "$HOME/.ray" "$WORK/victim"
  echo "precious" >"$WORK/victim/file"
  ln -s "$WORK/victim/file" "$HOME/.ray/auth_token"
  for create in 1 0; do
    run -1 setup_ray_auth "$HOME/.ray/auth_token" "$create"
    assert_output_contains "the Ray token file $HOME/.ray/auth_token is a symbolic link (to $WORK/victim/file)"
    refute_output_contains "precious"
  done
  [[ $(cat "$WORK/victim/file") == precious && -L $HOME/.ray/auth_token ]] || flunk "the link or its target changed"
  [[ ! -v RAY_AUTH_MODE ]] || flunk "auth turned on with a linked token"
}

@test "a token file other users can write, or in a directory they can write, is refused" {
  mkdir -p "$HOME/.ray"
  echo "their-token" >"$HOME/.ray/auth_token"
  chmod 666 "$HOME/.ray/auth_token"
  run -1 setup_ray_auth "$HOME/.ray/auth_token" 1
  assert_output_contains "is writable by other users (mode 666): its content may be theirs"
  refute_output_contains "their-token"
  chmod 600 "$HOME/.ray/auth_token"
  chmod 777 "$HOME/.ray"
  run -1 setup_ray_auth "$HOME/.ray/auth_token" 0
  assert_output_contains "is in $HOME/.ray, which other users can write (mode 777): they could replace it (chmod go-w $HOME/.ray)"
  [[ $(cat "$HOME/.ray/auth_token") == their-token ]] || flunk "the file was changed"
}

@test "second local user: a token file they own, or in their directory, is refused (and never printed)" {
  with_other_user
  local theirs
  theirs=$(getent passwd "$OTHER_USER" | cut -d: -f6)/ray
  as_other_user bash -c "mkdir -p '$theirs' && echo planted-token-zz9 >'$theirs/auth_token' && chmod 644 '$theirs/auth_token'"
  chmod o+x "$(dirname "$theirs")"
  run -1 setup_ray_auth "$theirs/auth_token" 0
  assert_output_contains "which belongs to uid $(id -u "$OTHER_USER"), not to you"
  refute_output_contains "planted-token-zz9"
  # a file of theirs in a directory of ours (e.g. moved there): refused by owner
  mkdir -p "$HOME/.ray"
  cp "$theirs/auth_token" "$HOME/.ray/auth_token"
  chown "$OTHER_USER" "$HOME/.ray/auth_token"
  run -1 setup_ray_auth "$HOME/.ray/auth_token" 1
  assert_output_contains "the Ray token file $HOME/.ray/auth_token belongs to uid $(id -u "$OTHER_USER"), not to you"
  refute_output_contains "planted-token-zz9"
  [[ ! -v RAY_AUTH_MODE ]] || flunk "auth turned on with their token"
}

@test "RAY_TLS=1: the files are checked, then exported to ray through the environment only" {
  make_certs "$WORK/tls"
  stub_ray_env
  setup_ray_tls 1 "$WORK/tls/ca.crt" "$WORK/tls/node.crt" "$WORK/tls/node.key" 2 8.8.8.8 2>"$WORK/err"
  grep -q "Ray TLS: on (certificate $WORK/tls/node.crt, CA $WORK/tls/ca.crt)" "$WORK/err"
  start_ray_head 4 2>/dev/null
  ray job submit -- true
  run cat "$ENV_LOG"
  assert_output "start 1 $WORK/tls/ca.crt $WORK/tls/node.crt $WORK/tls/node.key no-host-ip
job 1 $WORK/tls/ca.crt $WORK/tls/node.crt $WORK/tls/node.key no-host-ip"
  run calls
  refute_output_contains "$WORK/tls"
}

@test "RAY_TLS=1 refuses, naming the problem: missing file, readable key, wrong key, expired, other CA, other address" {
  make_certs "$WORK/tls"
  local t="$WORK/tls"
  run -1 setup_ray_tls 1 "$t/ca.crt" "$t/missing.crt" "$t/node.key" 2 8.8.8.8
  assert_output_contains "RAY_TLS: RAY_TLS_SERVER_CERT $t/missing.crt is missing or not a readable file"
  chmod 644 "$t/node.key"
  run -1 setup_ray_tls 1 "$t/ca.crt" "$t/node.crt" "$t/node.key" 2 8.8.8.8
  assert_output_contains "RAY_TLS: the private key $t/node.key is readable by other users (mode 644) (chmod 600 $t/node.key)"
  chmod 600 "$t/node.key"
  run -1 setup_ray_tls 1 "$t/ca.crt" "$t/node.crt" "$t/ca.key" 2 8.8.8.8
  assert_output_contains "$t/ca.key is not the key of $t/node.crt"
  run -1 setup_ray_tls 1 "$t/ca.crt" "$t/expired.crt" "$t/node.key" 2 8.8.8.8
  assert_output_contains "certificate has expired"
  run -1 setup_ray_tls 1 "$t/node.crt" "$t/node.crt" "$t/node.key" 2 8.8.8.8
  assert_output_contains "does not verify for this node's address"
  run -1 setup_ray_tls 1 "$t/ca.crt" "$t/elsewhere.crt" "$t/node.key" 2 8.8.8.8
  assert_output_contains "IP address mismatch, certificate is not valid for '$(own_address)'"
  [[ ! -v RAY_USE_TLS ]] || flunk "TLS exported after a failed check"
}

@test "a worker checks its certificate against the address it reaches the head from" {
  make_certs "$WORK/tls" IP:127.0.0.1
  setup_ray_tls 1 "$WORK/tls/ca.crt" "$WORK/tls/node.crt" "$WORK/tls/node.key" 2 127.0.0.1 2>/dev/null
  [[ $RAY_USE_TLS == 1 ]]
}

@test "RAY_TLS off: inherited TLS variables cleared; a warning on more than one node only" {
  export RAY_USE_TLS=1 RAY_TLS_CA_CERT=/x RAY_TLS_SERVER_CERT=/y RAY_TLS_SERVER_KEY=/z
  run -0 setup_ray_tls 0 "" "" "" 1 8.8.8.8
  assert_output ""
  setup_ray_tls 0 "" "" "" 1 8.8.8.8
  [[ ! -v RAY_USE_TLS && ! -v RAY_TLS_CA_CERT && ! -v RAY_TLS_SERVER_CERT && ! -v RAY_TLS_SERVER_KEY ]]
  run -0 setup_ray_tls 0 "" "" "" 2 8.8.8.8
  assert_output_contains "warning: RAY_TLS is off on a 2-node run: Ray's traffic between the nodes, its token included, crosses the network in cleartext"
}

@test "one node: Ray's node address and slime's engines and router on 127.0.0.1; a user's SLIME_HOST_IP wins" {
  stub_ray_env
  bind_engines_to_loopback 2>/dev/null
  start_ray_head 1 2>/dev/null
  run calls
  assert_output "ray start --head --num-gpus 1 --disable-usage-stats --temp-dir $WORK/ray --port 6390 --dashboard-port 8266 --ray-client-server-port 10010 --dashboard-agent-listen-port 52370 --node-ip-address 127.0.0.1"
  run cat "$ENV_LOG"
  assert_output "start no-tls    127.0.0.1"
  unset TOOLKIT_NODE_IP
  export SLIME_HOST_IP=10.1.2.3
  run -0 bind_engines_to_loopback
  assert_output_contains "warning: SLIME_HOST_IP is set"
}
