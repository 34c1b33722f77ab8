#!/usr/bin/env bats
# templates/lib/cuda.sh, sourced directly: CUDA pinning and the torch_memory_saver fixup.
# A fake site-packages directory on PYTHONPATH stands in for the training venv: the real
# python3 locates `nvidia` and `torch_memory_saver` in it exactly as on a GPU node.

load ../test_helper
load launcher

_setup() {
  # shellcheck source=templates/lib/common.sh
  source "$LIB_DIR/common.sh"
  # shellcheck source=templates/lib/cuda.sh
  source "$LIB_DIR/cuda.sh"
  SITE="$WORK/site-packages"
  mkdir -p "$SITE" "$WORK/cuda-13.0/bin" "$WORK/cuda-13.0/lib64"
  export PYTHONPATH="$SITE"
}

# make_tms VARIANT...: a torch_memory_saver install whose preload libraries are the VARIANTs
# (file names as its setup.py builds them: torch_memory_saver_hook_mode_preload<VARIANT>.abi3.so)
make_tms() {
  mkdir -p "$SITE/torch_memory_saver"
  : >"$SITE/torch_memory_saver/__init__.py"
  local variant
  for variant in "$@"; do
    echo "$variant" >"$SITE/torch_memory_saver_hook_mode_preload$variant.abi3.so"
    : >"$SITE/torch_memory_saver_hook_mode_torch$variant.abi3.so"
  done
}

@test "pin_cuda_toolchain: nvidia/*/lib, then CUDA_HOME/lib64, then ambient minus other CUDA installs" {
  mkdir -p "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib" "$SITE/nvidia/nccl/lib" "$SITE/nvidia/empty"
  local home="$WORK/cuda-13.0"
  # shellcheck disable=SC2030 # each @test has its own environment
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/opt/a/lib::/usr/local/cuda-12.9/lib64:/usr/local/cuda-12.9/extras/CUPTI/lib64:$home/lib64:/usr/local/cudnn/lib:/opt/a/lib:/usr/local/cuda-13.0-custom/lib"
  export PATH="/usr/local/cuda-12.9/bin:$PATH"
  pin_cuda_toolchain "$home/" 2>/dev/null
  [[ $CUDA_HOME == "$home" ]] || flunk "CUDA_HOME=$CUDA_HOME"
  [[ $PATH == "$home/bin:/usr/local/cuda-12.9/bin:"* ]] || flunk "PATH=$PATH"
  local expected="$SITE/nvidia/cu13/lib:$SITE/nvidia/cudnn/lib:$SITE/nvidia/nccl/lib:$home/lib64:/opt/a/lib:/usr/local/cudnn/lib:/usr/local/cuda-13.0-custom/lib"
  [[ $LD_LIBRARY_PATH == "$expected" ]] || flunk "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" "expected:        $expected"
  # exported, so `ray start` and the job inherit it
  run bash -c 'printf %s "$LD_LIBRARY_PATH"'
  assert_output "$expected"
}

@test "pin_cuda_toolchain keeps entries under CUDA_HOME itself when it is a /usr/local/cuda-X.Y" {
  run is_other_cuda_dir /usr/local/cuda-13.0/extras/CUPTI/lib64 /usr/local/cuda-13.0
  assert_failure
  run is_other_cuda_dir /usr/local/cuda-12.9/lib64 /usr/local/cuda-13.0
  assert_success
  run is_other_cuda_dir /usr/local/cuda /usr/local/cuda-13.0
  assert_success
  run is_other_cuda_dir /usr/local/cudnn/lib /usr/local/cuda-13.0
  assert_failure
}

@test "pin_cuda_toolchain with no ambient LD_LIBRARY_PATH and no nvidia wheels" {
  unset LD_LIBRARY_PATH
  pin_cuda_toolchain "$WORK/cuda-13.0" 2>/dev/null
  # shellcheck disable=SC2031 # each @test has its own environment
  [[ $LD_LIBRARY_PATH == "$WORK/cuda-13.0/lib64" ]] || flunk "$LD_LIBRARY_PATH"
}

@test "pin_cuda_toolchain: a CUDA_HOME that is not a directory is an error" {
  run -2 pin_cuda_toolchain "$WORK/cuda-99"
  assert_output_contains "CUDA_HOME $WORK/cuda-99 is not a directory"
}

@test "fix_torch_memory_saver links the cu12 name to a cu13-only build, idempotently" {
  make_tms _cu13
  run -0 fix_torch_memory_saver
  assert_output_contains "linked $SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so"
  [[ $(readlink "$SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so") == torch_memory_saver_hook_mode_preload_cu13.abi3.so ]]
  [[ $(cat "$SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so") == _cu13 ]]
  local before
  before=$(ls -l --time-style=+%s.%N "$SITE")
  run -0 fix_torch_memory_saver
  assert_output ""
  [[ $(ls -l --time-style=+%s.%N "$SITE") == "$before" ]] || flunk "the second run changed the directory"
}

@test "fix_torch_memory_saver leaves a real cu12 build alone" {
  make_tms _cu12 _cu13
  run -0 fix_torch_memory_saver
  assert_output ""
  [[ ! -L $SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so ]]
  [[ $(cat "$SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so") == _cu12 ]]
}

@test "fix_torch_memory_saver leaves an unsuffixed build alone" {
  make_tms ""
  run -0 fix_torch_memory_saver
  assert_output ""
  [[ ! -e $SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so ]]
}

@test "fix_torch_memory_saver is a no-op without torch_memory_saver" {
  run -0 fix_torch_memory_saver
  assert_output ""
  [[ -z $(ls -A "$SITE") ]]
}

@test "fix_torch_memory_saver replaces a dangling cu12 link" {
  make_tms _cu13
  ln -s gone.so "$SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so"
  run -0 fix_torch_memory_saver
  [[ $(readlink "$SITE/torch_memory_saver_hook_mode_preload_cu12.abi3.so") == torch_memory_saver_hook_mode_preload_cu13.abi3.so ]]
}
