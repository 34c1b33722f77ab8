#!/usr/bin/env bats
# install_slime.sh: plan, preconditions, idempotence and resume, with every external tool stubbed.
#
# Stand-ins (tests/fixtures/install/): `uv pip` and `python -m pip` go to fake_pip.py, which writes
# dist-info (and PEP 610 direct_url.json) into a fake site-packages; the environment's python runs the
# installer's own checks with the real interpreter against that site-packages only (-S); git and
# patch go to fake_git.py / fake_patch.py, which keep clone HEADs and applied patches; nvcc prints
# what CUDA's nvcc prints. So "already done" is decided by the installer's real code on real files.

load ../test_helper

INSTALLER="$REPO_ROOT/install_slime.sh"
FIXTURES="$REPO_ROOT/tests/fixtures/install"

_setup() {
  unset CONDA_PREFIX # the runner's own conda env must not count as the active environment
  export REAL_PYTHON FIX="$FIXTURES"
  REAL_PYTHON=$(command -v python3)
  export VIRTUAL_ENV="$BATS_TEST_TMPDIR/env"
  export FAKE_SITE="$VIRTUAL_ENV/lib/python3.12/site-packages"
  export PREFIX="$BATS_TEST_TMPDIR/prefix" TOOLKIT_MAX_JOBS=16
  PY_VERSION=$("$REAL_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  mkdir -p "$VIRTUAL_ENV/bin" "$FAKE_SITE"
  stub python "$(
    cat <<'BODY'
if [[ ${1:-} == -m && ${2:-} == pip ]]; then shift 2; exec "$REAL_PYTHON" "$FIX/fake_pip.py" "$@"; fi
PYTHONPATH="$FAKE_SITE" exec "$REAL_PYTHON" -S "$@"
BODY
  )"
  ln -s "$STUB_DIR/python" "$VIRTUAL_ENV/bin/python"
  stub python3 "$(
    cat <<'BODY'
if [[ $1 == -m && $2 == venv ]]; then mkdir -p "$3/bin" && ln -s "$STUB_DIR/python" "$3/bin/python"; exit; fi
exec "$REAL_PYTHON" "$@"
BODY
  )"
  stub uv "$(
    cat <<'BODY'
if [[ $1 == venv ]]; then mkdir -p "${*: -1}/bin" && ln -s "$STUB_DIR/python" "${*: -1}/bin/python"; exit; fi
shift; sub=$1; shift; args=()
while (($#)); do if [[ $1 == --python ]]; then shift; else args+=("$1"); fi; shift; done
exec "$REAL_PYTHON" "$FIX/fake_pip.py" "$sub" "${args[@]}"
BODY
  )"
  stub git "exec \"\$REAL_PYTHON\" \"\$FIX/fake_git.py\" \"\$@\""
  stub patch "exec \"\$REAL_PYTHON\" \"\$FIX/fake_patch.py\" \"\$@\""
  fake_cuda 13.0
}

# fake_cuda RELEASE: CUDA_HOME with a bin/nvcc that reports RELEASE
fake_cuda() {
  export CUDA_HOME="$BATS_TEST_TMPDIR/cuda-$1"
  mkdir -p "$CUDA_HOME/bin"
  stub nvcc "printf '%s\n' 'nvcc: NVIDIA (R) Cuda compiler driver' 'Cuda compilation tools, release $1, V$1.88'"
  ln -sf "$STUB_DIR/nvcc" "$CUDA_HOME/bin/nvcc"
}

# mask temp dirs, the repo and the test interpreter's version in $output
mask_output() {
  output=$(sed "s:$BATS_TEST_TMPDIR:\$TMP:g; s:$REPO_ROOT:\$REPO:g; s:(python $PY_VERSION):(python X.Y):g" <<<"$output")
}

# the calls that change something (installs, clones, checkouts, patches), temp dirs masked
changes() {
  calls | grep -E '^(uv (pip|venv)|python -m pip|python3 -m venv|git clone|git -C [^ ]+ (checkout|fetch|apply [^-])|patch )' |
    grep -v -- '--dry-run' | sed "s:$BATS_TEST_TMPDIR:\$TMP:g; s:$REPO_ROOT:\$REPO:g" || true
}

# changed ERE: some change matches ERE
changed() {
  changes | grep -qE -- "$1"
}

# snapshot of every path under the test dir with its content checksum (not bats' own files)
tree_state() {
  (cd "$BATS_TEST_TMPDIR" && find . \( -path ./calls.log -o -name 'separate-stderr-*' \) -prune -o -print0 |
    sort -z | xargs -0 -r cksum 2>/dev/null || true)
}

@test "--help prints the usage header" {
  run -0 "$INSTALLER" --help
  assert_output_contains "Usage: install_slime.sh [--dry-run] [--prefix DIR] [--stack fa3c990|v0.3.1] [cu12|cu13]"
  assert_output_contains "--dry-run"
  refute_calls
}

@test "argument errors exit 2 with a message on stderr and run nothing" {
  local bad
  for bad in cu11 "--prefix" "cu12 cu13" "--force" "cu13 extra" "--stack" "--stack v0.3.0" "--stack v0.3.1 cu13"; do
    # shellcheck disable=SC2086 # split the bad argument lists on purpose
    run -2 --separate-stderr "$INSTALLER" $bad
    [[ -z $output ]] || flunk "stdout must stay empty for '$bad': $output"
    [[ $stderr == install_slime:* ]] || flunk "no error for '$bad': $stderr"
  done
  run -2 --separate-stderr "$INSTALLER" --stack=v0.3.1 cu13
  [[ $stderr == *"--stack v0.3.1 installs for CUDA 12 only"*"give cu12, or --stack fa3c990 for cu13"* ]] || flunk "$stderr"
  run -2 --separate-stderr "$INSTALLER" --stack latest
  [[ $stderr == *"unknown --stack 'latest' (choose fa3c990, the default, or v0.3.1;"* ]] || flunk "$stderr"
  TOOLKIT_MAX_JOBS=lots run -2 --separate-stderr "$INSTALLER"
  [[ $stderr == *"TOOLKIT_MAX_JOBS must be a positive integer, got 'lots'"* ]] || flunk "$stderr"
  refute_calls
}

@test "refuses when no Python environment is active and no --prefix is given" {
  unset VIRTUAL_ENV CONDA_PREFIX
  run -2 --separate-stderr "$INSTALLER" --dry-run
  [[ $stderr == *"no Python environment is active"*"--prefix DIR"* ]] || flunk "$stderr"
  [[ -z $(changes) ]] || flunk "changed something: $(changes)"
}

@test "a CUDA toolkit of the wrong major version is refused before anything is installed" {
  fake_cuda 12.9
  run -1 --separate-stderr "$INSTALLER" --prefix "$PREFIX" cu13
  [[ $stderr == *"nvcc 12.9 but cu13 needs CUDA 13.x"* ]] || flunk "$stderr"
  assert_calls <<<"nvcc --version"
  [[ ! -e $PREFIX/install_slime.log ]]
}

@test "a missing nvcc at the variant's default CUDA_HOME exits 127 and names the path" {
  unset CUDA_HOME
  run -127 --separate-stderr "$INSTALLER" --prefix "$PREFIX" cu12
  [[ $stderr == *"no nvcc at /usr/local/cuda-12.9/bin/nvcc"*"export CUDA_HOME"* ]] || flunk "$stderr"
  refute_calls
}

@test "--dry-run prints the cu13 plan and changes nothing" {
  local before
  before=$(tree_state)
  run -0 --separate-stderr "$INSTALLER" --dry-run --prefix "$PREFIX" cu13
  [[ $(tree_state) == "$before" ]] || flunk "the dry run changed files:" "$(diff <(echo "$before") <(tree_state))"
  [[ ! -e $PREFIX ]] || flunk "the dry run created $PREFIX"
  [[ -z $(changes) ]] || flunk "the dry run ran: $(changes)"
  mask_output
  assert_output <"$FIXTURES/plan-cu13.txt"
}

@test "--dry-run prints the cu12 plan: cu129 wheels, core-cu12 TE, SGLang's cu129 kernels" {
  fake_cuda 12.9
  run -0 --separate-stderr "$INSTALLER" --dry-run --prefix "$PREFIX" cu12
  [[ -z $(changes) ]] || flunk "the dry run ran: $(changes)"
  mask_output
  assert_output <"$FIXTURES/plan-cu12.txt"
}

@test "--dry-run --stack v0.3.1 prints slime v0.3.1's plan (cu12 unless told) and changes nothing" {
  fake_cuda 12.9
  local before plan
  before=$(tree_state)
  run -0 --separate-stderr "$INSTALLER" --dry-run --prefix "$PREFIX" --stack v0.3.1
  [[ $(tree_state) == "$before" ]] || flunk "the dry run changed files:" "$(diff <(echo "$before") <(tree_state))"
  [[ -z $(changes) ]] || flunk "the dry run ran: $(changes)"
  mask_output
  assert_output <"$FIXTURES/plan-v0.3.1-cu12.txt"
  # the same plan with the variant named and the option spelled --stack=NAME
  plan=$output
  run -0 --separate-stderr "$INSTALLER" --dry-run --prefix "$PREFIX" --stack=v0.3.1 cu12
  mask_output
  [[ $output == "$plan" ]] || flunk "$(diff <(echo "$plan") <(echo "$output"))"
}

@test "--stack fa3c990 is the default stack: the same plan with or without the option" {
  run -0 --separate-stderr "$INSTALLER" --dry-run --prefix "$PREFIX" --stack fa3c990
  mask_output
  assert_output <"$FIXTURES/plan-cu13.txt"
}

@test "--stack v0.3.1 installs v0.3.1's pins: its SGLang, TE, kernels, torch_memory_saver fork, router build, four sglang patches, no bridges" {
  fake_cuda 12.9
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" --stack v0.3.1
  assert_output_contains "install_slime: done (stack v0.3.1, cu12, CUDA 12.9 at $CUDA_HOME)"
  assert_output_contains "slime:        $PREFIX/slime (at a6272da0d4f3d0a08520c99a2f3b4f6c887960dc)"
  assert_output_contains "router:       sglang-router 0.3.2, slime's build v0.3.2-9daabcd"
  run -0 cat "$PREFIX/.install_slime/constraints.txt"
  assert_output <<'EOF'
torch==2.11.0+cu129
numpy==1.26.4
scipy==1.17.1
sglang==0.5.15.post1
transformer_engine==2.16.1
ray==2.60.0
EOF
  local py="--python \$TMP/env/bin/python"
  changes >"$BATS_TEST_TMPDIR/changes"
  run -0 cat "$BATS_TEST_TMPDIR/changes"
  assert_output <<EOF
uv pip install $py torch==2.11.0+cu129 torchvision==0.26.0+cu129 torchaudio==2.11.0+cu129 --torch-backend=cu129
uv pip install $py cmake ninja pybind11 packaging\>=24.2 wheel
uv pip install $py flash-attn==2.8.3 --no-build-isolation --no-cache-dir --torch-backend=cu129
uv pip install $py flash-linear-attention==0.4.2 tilelang==0.1.11 --torch-backend=cu129
uv pip install $py transformer_engine\[pytorch\,core-cu12\]==2.16.1 --no-build-isolation --no-cache-dir
uv pip install $py apex\ @\ git+https://github.com/NVIDIA/apex.git@10417aceddd7d5d05d7cbf7b0fc2daad1105f8b4 -v --no-build-isolation --no-cache-dir
uv pip install $py torch_memory_saver\ @\ git+https://github.com/zhuzilin/torch_memory_saver.git@8d30c59ca12a68d9deccbc9c6599076a1218cbc5 --no-deps --no-build-isolation --no-cache-dir --reinstall-package=torch_memory_saver
uv pip install $py nvidia-modelopt\[torch\]\>=0.37.0 --no-build-isolation
uv pip install $py sglang==0.5.15.post1 --prerelease=allow --torch-backend=cu129
uv pip install $py sglang-kernel==0.4.4 --no-deps --reinstall-package=sglang-kernel --index-url https://docs.sglang.ai/whl/cu129/
uv pip install $py sgl-deep-gemm==0.1.4 --no-deps --reinstall-package=sgl-deep-gemm --index-url https://docs.sglang.ai/whl/cu129/
git clone https://github.com/NVIDIA/Megatron-LM.git \$TMP/prefix/Megatron-LM
git -C \$TMP/prefix/Megatron-LM checkout --quiet 1dcf0dafa884ad52ffb243625717a3471643e087
uv pip install $py -e \$TMP/prefix/Megatron-LM --no-build-isolation --config-settings editable_mode=compat
uv pip install $py nvidia-cutlass-dsl-libs-base==4.5.2 --no-deps --reinstall-package=nvidia-cutlass-dsl-libs-base
uv pip install $py PyJWT --reinstall-package=pyjwt
git clone https://github.com/THUDM/slime.git \$TMP/prefix/slime
git -C \$TMP/prefix/slime checkout --quiet a6272da0d4f3d0a08520c99a2f3b4f6c887960dc
uv pip install $py -r \$TMP/prefix/slime/requirements.txt
uv pip install $py ray\\[default\\]==2.60.0
uv pip install $py -e \$TMP/prefix/slime --no-deps
uv pip install $py sglang-router\ @\ https://github.com/zhuzilin/sgl-router/releases/download/v0.3.2-9daabcd/sglang_router-0.3.2-cp38-abi3-manylinux_2_28_x86_64.whl --reinstall-package=sglang-router
uv pip install $py --no-config numpy==1.26.4 scipy==1.17.1
git -C \$TMP/prefix/Megatron-LM apply \$TMP/prefix/slime/docker/patch/latest/megatron.patch
patch -d \$TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i \$TMP/prefix/slime/docker/patch/latest/sglang.patch
patch -d \$TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i \$TMP/prefix/slime/docker/patch/latest/sglang-top_p.patch
patch -d \$TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i \$TMP/prefix/slime/docker/patch/latest/sglang-release_hicache.patch
patch -d \$TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i \$TMP/prefix/slime/docker/patch/latest/sglang-pull_weights.patch
uv pip install $py -e \$REPO/python\\[launcher\\] --constraint \$TMP/prefix/.install_slime/constraints.txt
EOF
  # a second run finds every step done, the four patches included
  : >"$CALL_LOG"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" --stack v0.3.1
  [[ -z $(changes) ]] || flunk "second run changed: $(changes)"
  [[ $(grep -c '] skip ' <<<"$stderr") -eq 22 ]] || flunk "expected 22 skipped steps: $stderr"
}

@test "moving an install of the default stack to v0.3.1 reinstalls what differs and keeps what both share" {
  fake_cuda 12.9
  run -0 "$INSTALLER" --prefix "$PREFIX" cu12
  : >"$CALL_LOG"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" --stack v0.3.1
  changed '^uv pip install .* sglang==0\.5\.15\.post1 ' || flunk "$(changes)"
  changed 'checkout --quiet a6272da0d4f3d0a08520c99a2f3b4f6c887960dc$' || flunk "$(changes)"
  ! changed 'torch==2\.11\.0\+cu129|flash-attn==|apex' || flunk "reinstalled what both stacks share: $(changes)"
}

@test "cu13 with uv: every step in order, all into the active environment, this project last" {
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" cu13
  # the summary ends with the two lines for the env file
  assert_line "SLIME_DIR=$PREFIX/slime"
  assert_line "MEGATRON_DIR=$PREFIX/Megatron-LM"
  assert_output_contains "python env:   $VIRTUAL_ENV"
  grep -q '^\$ .*sglang==0.5.13' "$PREFIX/install_slime.log" || flunk "the log does not record the sglang command"
  # the constraints keep the project's dependencies from moving the stack
  grep -qx 'numpy<2' "$PREFIX/.install_slime/constraints.txt" || flunk "numpy is not held"
  grep -qx 'torch==2.11.0+cu130' "$PREFIX/.install_slime/constraints.txt" || flunk "torch is not held"
  grep -qx 'ray==2.60.0' "$PREFIX/.install_slime/constraints.txt" || flunk "ray is not held"
  local py="--python \$TMP/env/bin/python"
  changes >"$BATS_TEST_TMPDIR/changes"
  run -0 cat "$BATS_TEST_TMPDIR/changes"
  assert_output <<EOF
uv pip install $py torch==2.11.0+cu130 torchvision==0.26.0+cu130 torchaudio==2.11.0+cu130 --torch-backend=cu130
uv pip install $py cmake ninja pybind11 packaging\>=24.2 wheel
uv pip install $py flash-attn==2.8.3 --no-build-isolation --no-cache-dir --torch-backend=cu130
uv pip install $py mbridge\ @\ git+https://github.com/ISEEKYAN/mbridge.git@89eb10887887bc74853f89a4de258c0702932a1c --no-deps
uv pip install $py flash-linear-attention tilelang --torch-backend=cu130
uv pip install $py transformer_engine\[pytorch\,core-cu13\]==2.11 --no-build-isolation --no-cache-dir --overrides \$TMP/prefix/.install_slime/te-overrides.txt
uv pip install $py apex\ @\ git+https://github.com/NVIDIA/apex.git@10417aceddd7d5d05d7cbf7b0fc2daad1105f8b4 -v --no-build-isolation --no-cache-dir
uv pip install $py torch_memory_saver\ @\ git+https://github.com/fzyzcjy/torch_memory_saver.git@a193d9dd1b877d33c64a41cfb3db9f867df2d926 --no-deps --no-build-isolation --no-cache-dir --reinstall-package=torch_memory_saver
uv pip install $py megatron-bridge\ @\ git+https://github.com/radixark/Megatron-Bridge.git@6fde1c8538ea4ad966c7fba5f759be54f943b598 --no-deps --no-build-isolation
uv pip install $py nvidia-modelopt\[torch\]\>=0.37.0 --no-build-isolation
uv pip install $py sglang==0.5.13 --prerelease=allow --torch-backend=cu130
git clone https://github.com/NVIDIA/Megatron-LM.git \$TMP/prefix/Megatron-LM
git -C \$TMP/prefix/Megatron-LM checkout --quiet 1dcf0dafa884ad52ffb243625717a3471643e087
uv pip install $py -e \$TMP/prefix/Megatron-LM --no-build-isolation --config-settings editable_mode=compat
uv pip install $py nvidia-cutlass-dsl-libs-base==4.5.2 --no-deps --reinstall-package=nvidia-cutlass-dsl-libs-base
uv pip install $py PyJWT --reinstall-package=pyjwt
git clone https://github.com/THUDM/slime.git \$TMP/prefix/slime
git -C \$TMP/prefix/slime checkout --quiet fa3c990af6f18efd3fd9922698bf4bf4048d1263
uv pip install $py -r \$TMP/prefix/slime/requirements.txt
uv pip install $py ray\\[default\\]==2.60.0
uv pip install $py -e \$TMP/prefix/slime --no-deps
uv pip install $py sglang-router\ @\ https://github.com/zhuzilin/sgl-router/releases/download/v0.3.2-1117d05/sglang_router-0.3.2-cp38-abi3-manylinux_2_28_x86_64.whl --reinstall-package=sglang-router
uv pip install $py --no-config numpy\<2 scipy\<1.14
git -C \$TMP/prefix/Megatron-LM apply \$TMP/prefix/slime/docker/patch/latest/megatron.patch
patch -d \$TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i \$TMP/prefix/slime/docker/patch/latest/sglang.patch
patch -d \$TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i \$TMP/prefix/slime/docker/patch/latest/sglang-top_p.patch
uv pip install $py -e \$REPO/python\\[launcher\\] --constraint \$TMP/prefix/.install_slime/constraints.txt
EOF
}

@test "a second run skips every step: no clone, no install, no patch" {
  run -0 "$INSTALLER" --prefix "$PREFIX"
  : >"$CALL_LOG"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX"
  [[ -z $(changes) ]] || flunk "second run changed: $(changes)"
  [[ $(grep -c '] skip ' <<<"$stderr") -eq 22 ]] || flunk "expected 22 skipped steps: $stderr"
  [[ $stderr == *"skip apex: already done"* ]] || flunk "$stderr"
  assert_line "SLIME_DIR=$PREFIX/slime"
  # and the plan marks every step as done
  run -0 --separate-stderr "$INSTALLER" --dry-run --prefix "$PREFIX"
  [[ $(grep -c '\[already done: would skip\]$' <<<"$output") -eq 22 ]] || flunk "$output"
  [[ -z $(changes) ]] || flunk "the dry run changed: $(changes)"
}

@test "a package that no longer matches its pin is reinstalled, and the patches it lost reapplied" {
  run -0 "$INSTALLER" --prefix "$PREFIX"
  "$REAL_PYTHON" "$FIXTURES/fake_pip.py" install "sglang==0.5.12" # someone moved sglang
  : >"$CALL_LOG"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX"
  changes >"$BATS_TEST_TMPDIR/changes"
  run -0 sed 's/ --python [^ ]*//' "$BATS_TEST_TMPDIR/changes"
  assert_output <<'EOF'
uv pip install sglang==0.5.13 --prerelease=allow --torch-backend=cu130
patch -d $TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i $TMP/prefix/slime/docker/patch/latest/sglang.patch
patch -d $TMP/env/lib/python3.12/site-packages -p2 -F0 -N -i $TMP/prefix/slime/docker/patch/latest/sglang-top_p.patch
EOF
}

@test "a failed step reports the step, the command and its last output lines; the rerun resumes there" {
  FAKE_PIP_FAIL="sglang-router @" run -1 --separate-stderr "$INSTALLER" --prefix "$PREFIX"
  [[ $stderr == *"step 18/22 sglang_router failed (exit 1)"* ]] || flunk "$stderr"
  [[ $stderr == *"command: uv pip install --python $VIRTUAL_ENV/bin/python sglang-router\ @\ https://"* ]] || flunk "$stderr"
  [[ $stderr == *"RuntimeError: fake build failure"* ]] || flunk "$stderr"
  [[ -z $output ]] || flunk "no summary after a failure: $output"
  ! changed 'numpy|patch ' || flunk "ran past the failed step: $(changes)"
  grep -q "fake build failure" "$PREFIX/install_slime.log" || flunk "the failure is not in the log"

  : >"$CALL_LOG"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX"
  [[ $(changes | head -n 1) == "uv pip install --python \$TMP/env/bin/python sglang-router\\ @\\ "* ]] ||
    flunk "did not resume at sglang_router: $(changes)"
  [[ $(grep -c '] skip ' <<<"$stderr") -eq 17 ]] || flunk "expected the 17 finished steps skipped: $stderr"
  # steps with a check are skipped by it; steps without one (slime's requirements, the reinstalls) by the state file
  ! changed 'torch==|flash-attn==|transformer_engine|git clone' || flunk "redid checked steps: $(changes)"
  ! changed ' -r |PyJWT' || flunk "redid recorded steps: $(changes)"
}

@test "without uv it uses the environment's python -m pip, and removes transformer-engine-cu12 on cu13" {
  rm "$STUB_DIR/uv"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" cu13
  ! changed '^uv ' || flunk "uv was used: $(changes)"
  changes | grep -qx 'python -m pip install torch==2.11.0+cu130 torchvision==0.26.0+cu130 torchaudio==2.11.0+cu130 --extra-index-url=https://download.pytorch.org/whl/cu130' ||
    flunk "$(changes)"
  changes | grep -qx 'python -m pip uninstall -y transformer-engine-cu12' || flunk "$(changes)"
  [[ $(changes | tail -n 1) == "python -m pip install -e \$REPO/python\\[launcher\\] --constraint "* ]] || flunk "$(changes)"
}

@test "with --prefix and no active environment it creates PREFIX/venv and installs there" {
  unset VIRTUAL_ENV
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" cu13
  [[ $(changes | head -n 1) == "uv venv --python $PY_VERSION \$TMP/prefix/venv" ]] || flunk "$(changes)"
  [[ $(changes | grep -c '^uv pip') -eq $(changes | grep -cF -- "--python \$TMP/prefix/venv/bin/python ") ]] ||
    flunk "an install went elsewhere: $(changes)"
  assert_output_contains "source $PREFIX/venv/bin/activate"
}

@test "a clone at another commit with local changes is refused before anything is installed" {
  mkdir -p "$PREFIX"
  "$REAL_PYTHON" "$FIXTURES/fake_git.py" clone https://github.com/THUDM/slime.git "$PREFIX/slime"
  "$REAL_PYTHON" "$FIXTURES/fake_git.py" -C "$PREFIX/slime" apply "$PREFIX/slime/docker/patch/latest/sglang.patch"
  run -1 --separate-stderr "$INSTALLER" --prefix "$PREFIX"
  [[ $stderr == *"$PREFIX/slime is at 0000000000000000000000000000000000000000 with local changes"* ]] || flunk "$stderr"
  [[ -z $(changes) ]] || flunk "changed something: $(changes)"
}

@test "an existing clone at another commit without changes is fetched and checked out, not recloned" {
  mkdir -p "$PREFIX"
  "$REAL_PYTHON" "$FIXTURES/fake_git.py" clone https://github.com/NVIDIA/Megatron-LM.git "$PREFIX/Megatron-LM"
  run -0 "$INSTALLER" --prefix "$PREFIX"
  ! changed 'clone .*Megatron' || flunk "recloned: $(changes)"
  changes | grep -qx "git -C \$TMP/prefix/Megatron-LM fetch origin 1dcf0dafa884ad52ffb243625717a3471643e087" || flunk "$(changes)"
}

@test "a torch built for the other CUDA counts as not installed and is replaced by the variant's build" {
  "$REAL_PYTHON" "$FIXTURES/fake_pip.py" install "torch==2.11.0+cu129" "torchvision==0.26.0+cu129" "torchaudio==2.11.0+cu129"
  run -0 --separate-stderr "$INSTALLER" --prefix "$PREFIX" cu13
  [[ $stderr == *"[1/22] torch: PyTorch 2.11.0 (cu130)"* ]] || flunk "$stderr"
  # torch_memory_saver was built against the cu130 torch, as TMS_CUDA_MAJOR says
  grep -q '^\$ TMS_CUDA_MAJOR=13 uv pip install' "$PREFIX/install_slime.log" || flunk "$(grep TMS "$PREFIX/install_slime.log")"
}

@test "refuses a prefix inside a git checkout (the toolkit's own, by default from its root) before anything changes" {
  mkdir -p "$BATS_TEST_TMPDIR/project/.git" "$BATS_TEST_TMPDIR/project/src"
  local before
  before=$(tree_state)
  cd "$REPO_ROOT"
  run -2 --separate-stderr "$INSTALLER" --dry-run
  [[ $stderr == *"--prefix $REPO_ROOT is inside the git checkout $REPO_ROOT"*"--prefix ~/slime-src"* ]] || flunk "$stderr"
  cd "$BATS_TEST_TMPDIR/project/src"
  run -2 --separate-stderr "$INSTALLER" --prefix deps/slime
  [[ $stderr == *"--prefix $BATS_TEST_TMPDIR/project/src/deps/slime is inside the git checkout $BATS_TEST_TMPDIR/project "* ]] || flunk "$stderr"
  [[ $(tree_state) == "$before" ]] || flunk "changed files:" "$(diff <(echo "$before") <(tree_state))"
  [[ -z $(changes) ]] || flunk "ran: $(changes)"
}
