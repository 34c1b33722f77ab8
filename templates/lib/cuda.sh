# shellcheck shell=bash
# cuda.sh: pin one CUDA toolchain (CUDA_HOME, PATH, LD_LIBRARY_PATH) and fix the
# torch_memory_saver preload library name, so Megatron, TransformerEngine and SGLang
# all load the same libcudart.

# python_package_dirs PACKAGE: the directories python3 would import PACKAGE from, one per
# line (namespace packages such as `nvidia` have several); nothing if it is not installed.
# The package is located, not imported (cuda_helper.py).
python_package_dirs() { # <package>
  python3 "$TOOLKIT_HELPER_DIR/cuda_helper.py" "$1" 2>/dev/null || true
}

# nvidia_lib_dirs: the python environment's nvidia/*/lib directories (pip CUDA wheels).
nvidia_lib_dirs() {
  local root dir
  while IFS= read -r root; do
    for dir in "$root"/*/lib; do
      [[ -d $dir ]] && printf '%s\n' "$dir"
    done
  done < <(python_package_dirs nvidia)
}

# is_other_cuda_dir DIR CUDA_HOME: true when DIR is inside /usr/local/cuda or
# /usr/local/cuda-X.Y but not inside CUDA_HOME.
is_other_cuda_dir() { # <dir> <cuda-home>
  local dir=${1%/} home=${2%/}
  [[ $dir == "$home" || $dir == "$home"/* ]] && return 1
  [[ $dir =~ ^/usr/local/cuda(-[0-9][0-9.]*)?(/|$) ]]
}

# pin_cuda_toolchain CUDA_HOME: export CUDA_HOME, put CUDA_HOME/bin first on PATH and
# rebuild LD_LIBRARY_PATH as: nvidia/*/lib of the python env, CUDA_HOME/lib64, then the
# ambient entries minus every other /usr/local/cuda[-X.Y] entry (duplicates dropped).
pin_cuda_toolchain() { # <cuda-home>
  local home=${1%/} entry
  local -a dirs=() ambient=()
  [[ -d $home ]] || die "CUDA_HOME $home is not a directory (set CUDA_HOME to an installed toolkit, e.g. /usr/local/cuda-13.0)" 2
  mapfile -t dirs < <(nvidia_lib_dirs)
  dirs+=("$home/lib64")
  IFS=: read -r -a ambient <<<"${LD_LIBRARY_PATH:-}"
  for entry in "${ambient[@]}"; do
    [[ -n $entry ]] || continue
    is_other_cuda_dir "$entry" "$home" && continue
    in_list "$entry" "${dirs[@]}" || dirs+=("$entry")
  done
  export CUDA_HOME=$home
  export PATH="$home/bin:$PATH"
  LD_LIBRARY_PATH=$(IFS=:; printf '%s' "${dirs[*]}")
  export LD_LIBRARY_PATH
  say "pinned CUDA toolchain $home"
}

# in_list WORD ITEM...: true when WORD is one of the ITEMs.
in_list() { # <word> <item>...
  local word=$1 item
  shift
  for item in "$@"; do [[ $item == "$word" ]] && return 0; done
  return 1
}

# fix_torch_memory_saver [SITE_DIR]: slime LD_PRELOADs
# SITE_DIR/torch_memory_saver_hook_mode_preload_cu12.abi3.so (or the unsuffixed name), but a
# cu13 build ships only ..._cu13.abi3.so. Link the cu12 name to it. Idempotent; a no-op when
# torch_memory_saver is absent or one of the names slime looks for already exists.
# SITE_DIR defaults to the directory that holds python3's torch_memory_saver package.
fix_torch_memory_saver() { # [site-dir]
  local site=${1:-} stem=torch_memory_saver_hook_mode_preload pkg
  if [[ -z $site ]]; then
    pkg=$(python_package_dirs torch_memory_saver | head -n 1)
    [[ -n $pkg ]] || return 0
    site=$(dirname "$pkg")
  fi
  [[ -e $site/${stem}_cu12.abi3.so || -e $site/$stem.abi3.so ]] && return 0
  [[ -f $site/${stem}_cu13.abi3.so ]] || return 0
  if [[ -L $site/${stem}_cu12.abi3.so ]]; then
    rm -f "$site/${stem}_cu12.abi3.so" # a dangling link of ours from an earlier install
  fi
  ln -s "${stem}_cu13.abi3.so" "$site/${stem}_cu12.abi3.so"
  say "linked $site/${stem}_cu12.abi3.so -> ${stem}_cu13.abi3.so (torch_memory_saver cu13 build)"
}
