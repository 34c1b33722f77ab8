#!/usr/bin/env bash
# Summary: Install the pinned slime stack (torch, flash-attn, TE, Apex, Megatron-LM, SGLang, slime) and this toolkit
#
# Usage: install_slime.sh [--dry-run] [--prefix DIR] [--stack fa3c990|v0.3.1] [cu12|cu13]
#
#   --stack NAME      which pinned slime stack (default fa3c990; docs/install.md, "Which slime"):
#                     fa3c990   slime fa3c990 with SGLang 0.5.13, the stack validated end to end
#                               on GPUs with this toolkit (cu13 or cu12)
#                     v0.3.1    slime v0.3.1 (a6272da0d) with SGLang 0.5.15.post1, as slime's own
#                               docker/Dockerfile and build_conda.sh at that release build it (cu12
#                               only, as slime builds it)
#   cu13 | cu12       CUDA variant (default cu13, cu12 for --stack v0.3.1): PyTorch cu130 / cu129
#                     wheels and CUDA 13.0 / 12.9
#   --prefix DIR      clone slime/ and Megatron-LM/ under DIR and keep install_slime.log and the
#                     resume state (.install_slime/) there (default: the current directory; never
#                     inside a git checkout, such as this toolkit's: choose e.g. ~/slime-src). When no
#                     virtualenv or conda env is active, a virtualenv is created at DIR/venv
#   --dry-run         print the numbered plan (every command) and check the preconditions; change nothing
#                     (--dry-run --stack NAME shows that stack's plan)
#   -h, --help        print this help
#
#   CUDA_HOME         CUDA toolkit used for the builds (default /usr/local/cuda-13.0 or /usr/local/cuda-12.9);
#                     its bin/nvcc must exist and report the variant's major version
#   TOOLKIT_MAX_JOBS  parallel compile jobs for flash-attn, TransformerEngine, Apex (default: nproc, at most 64)
#   TOOLKIT_DEBUG=1   trace this script (set -x)
#
# Installs into the active Python environment (VIRTUAL_ENV or CONDA_PREFIX) with `uv pip` when uv is
# on PATH, else `python -m pip`. Each step is skipped when its result is already there (clone at the
# pinned commit, patch applied, package at the pinned version) or was recorded as done by an earlier
# run with the same pins; a failed run resumes at the failed step when started again.
# Exit status: 0 done, 1 a precondition or a step failed, 2 bad arguments or no Python environment,
# 127 a required tool (git, patch, nvcc, uv or pip) is missing.
set -euo pipefail
[[ -n ${TOOLKIT_DEBUG:-} ]] && set -x

# --------------------------------------------------------------------------------------------------
# Pinned stacks. The default (--stack fa3c990): the versions validated end to end (Qwen2.5-3B-Instruct,
# GSM8K, 8 x H100, CUDA 13.0). The other stack, v0.3.1, overrides some of them in pins_v0_3_1 below.
# Change versions here and nowhere else.
#
#   component                      pin
PIN_TORCH="2.11.0"                # torch (torchvision / torchaudio below), cu130 | cu129 wheels
PIN_TORCHVISION="0.26.0"
PIN_TORCHAUDIO="2.11.0"
PIN_FLASH_ATTN="2.8.3"            # built against the installed torch, no build isolation
PIN_FLA=""                        # flash-linear-attention (empty: the latest release)
PIN_TILELANG=""                   # tilelang (empty: the latest release)
PIN_TE="2.11"                     # transformer_engine[pytorch,core-cu13|core-cu12]
PIN_APEX="10417aceddd7d5d05d7cbf7b0fc2daad1105f8b4"      # NVIDIA/apex (C++ and CUDA extensions)
PIN_TMS_REPO="fzyzcjy/torch_memory_saver"
PIN_TMS="a193d9dd1b877d33c64a41cfb3db9f867df2d926"       # torch_memory_saver at PIN_TMS_REPO
PIN_MBRIDGE="89eb10887887bc74853f89a4de258c0702932a1c"   # ISEEKYAN/mbridge (--no-deps; empty: none)
PIN_MEGATRON_BRIDGE="6fde1c8538ea4ad966c7fba5f759be54f943b598" # radixark/Megatron-Bridge (--no-deps; empty: none)
PIN_MODELOPT=">=0.37.0"           # nvidia-modelopt[torch]
PIN_SGLANG="0.5.13"               # pre-releases allowed while resolving
PIN_SGLANG_KERNEL=""              # cu12: sglang-kernel / sgl-deep-gemm from SGLang's cu129 index
PIN_SGL_DEEP_GEMM=""              #   (empty: the latest there)
PIN_RAY="2.60.0"                  # ray[default]: the toolkit's token authentication is tested with it
PIN_SGLANG_ROUTER_WHEEL="https://github.com/zhuzilin/sgl-router/releases/download/v0.3.2-1117d05/sglang_router-0.3.2-cp38-abi3-manylinux_2_28_x86_64.whl"
PIN_CUTLASS_DSL="4.5.2"           # nvidia-cutlass-dsl-libs-base, reinstalled --no-deps
PIN_MEGATRON="1dcf0dafa884ad52ffb243625717a3471643e087"  # NVIDIA/Megatron-LM, editable install
# slime fa3c990 (2026-06-30). What the toolkit passes slime is chosen where it depends on the
# slime and SGLang a node has (templates/lib/slime.sh, when train.sh runs):
# --megatron-to-hf-mode bridge only to a slime that has the flag (fa3c990 does, and only bridge
# mode loads the HF --ref-load there: slime/backends/megatron_utils/checkpoint.py:130; v0.3.1
# removed it and loads an HF checkpoint natively), SGLang's cuda-graph flag by the name that
# SGLang uses (--sglang-cuda-graph-max-bs on 0.5.13, --sglang-cuda-graph-max-bs-decode on
# 0.5.15.post1). tests/slime_stacks/*.flags records every flag each supported stack accepts
# (fa3c990, v0.3.1, 624b824a8) and the tests check every rendered command line against them: when
# PIN_SLIME moves, record the new stack's flags there (tests/slime_stacks/README.md). The rest of
# the command line holds the same on these stacks: --custom-config-path (toolkit.yaml keys become
# args attributes), --train-env-vars (JSON object), --rollout-function-path /
# --eval-function-path, --custom-reward-post-process-path, --eval-prompt-data NAME PATH,
# --global-batch-size (counts rollouts, i.e. Sample.rollout_id, not samples:
# slime/utils/dp_schedule.py), --sglang-<ServerArgs flag> passthrough (router options are
# --router-*), and --load SAVE_DIR, passed only when SAVE_DIR has latest_checkpointed_iteration.txt
# (fa3c990 keeps any other --load as is in bridge mode: slime/utils/arguments.py:1793-1805).
PIN_SLIME="fa3c990af6f18efd3fd9922698bf4bf4048d1263"     # THUDM/slime, editable install --no-deps
PIN_NUMPY="<2"                    # installed last among the stack so nothing upgrades them
PIN_SCIPY="<1.14"                 # scipy >= 1.14 needs numpy >= 2
SLIME_PATCH_DIR="docker/patch/latest"   # in the slime clone
PIN_SGLANG_PATCHES="sglang sglang-top_p"  # SLIME_PATCH_DIR/<name>.patch, applied to the installed sglang

# --stack v0.3.1: slime v0.3.1 as its own docker/Dockerfile and build_conda.sh at a6272da0d build
# it (read from those files): SGLang 0.5.15.post1 (which requires torch 2.11.0, sglang-kernel
# 0.4.4, sgl-deep-gemm 0.1.4 and tilelang 0.1.11), TransformerEngine 2.16.1, flash-attn 2.8.3,
# flash-linear-attention 0.4.2, Apex and Megatron-LM at the commits above, torch_memory_saver from
# zhuzilin's fork at build_conda.sh's TMS_COMMIT, no mbridge and no Megatron-Bridge (slime #2251
# took the conversion in), numpy 1.26.4 and scipy 1.17.1, sgl-router build v0.3.2-9daabcd, and
# the patches of docker/patch/latest (the same files as docker/patch/v0.5.15.post1 there). Left
# out, as for the default stack: the FlashAttention-3 (hopper) build, FlashQLA (an optional GDN
# backend for Qwen3.5/Qwen3-Next, unpinned upstream) and slime's int4_qat kernel.
pins_v0_3_1() {
  PIN_SLIME="a6272da0d4f3d0a08520c99a2f3b4f6c887960dc"   # v0.3.1 (2026-08-06)
  PIN_SGLANG="0.5.15.post1"
  PIN_SGLANG_KERNEL="0.4.4" PIN_SGL_DEEP_GEMM="0.1.4"
  PIN_TE="2.16.1"
  PIN_FLA="0.4.2" PIN_TILELANG="0.1.11"
  PIN_TMS_REPO="zhuzilin/torch_memory_saver" PIN_TMS="8d30c59ca12a68d9deccbc9c6599076a1218cbc5"
  PIN_MBRIDGE="" PIN_MEGATRON_BRIDGE=""
  PIN_SGLANG_ROUTER_WHEEL="https://github.com/zhuzilin/sgl-router/releases/download/v0.3.2-9daabcd/sglang_router-0.3.2-cp38-abi3-manylinux_2_28_x86_64.whl"
  PIN_NUMPY="==1.26.4" PIN_SCIPY="==1.17.1"
  PIN_SGLANG_PATCHES="sglang sglang-top_p sglang-release_hicache sglang-pull_weights"
}
# --------------------------------------------------------------------------------------------------

GITHUB="https://github.com"
TORCH_INDEX="https://download.pytorch.org/whl"
SGLANG_CU129_INDEX="https://docs.sglang.ai/whl/cu129/"
ME="install_slime"

die() { # <status> <message>
  printf '%s: %s\n' "$ME" "$2" >&2
  exit "$1"
}
say() { printf '%s: %s\n' "$ME" "$*" >&2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

# ---------------------------------------------------------------- arguments and preconditions ------

parse_args() { # <argv...>
  DRY_RUN=0 PREFIX="" VARIANT="" STACK=""
  while (($#)); do
    case "$1" in
      -h | --help) usage && exit 0 ;;
      --dry-run) DRY_RUN=1 ;;
      --prefix) (($# > 1)) && [[ -n $2 ]] || die 2 "--prefix needs a directory (e.g. --prefix /opt/slime)"
        PREFIX=$2 && shift ;;
      --prefix=?*) PREFIX=${1#--prefix=} ;;
      --stack) (($# > 1)) && [[ -n $2 ]] || die 2 "--stack needs a name (fa3c990 or v0.3.1)"
        STACK=$2 && shift ;;
      --stack=?*) STACK=${1#--stack=} ;;
      cu12 | cu13) [[ -z $VARIANT ]] || die 2 "give one CUDA variant, not '$VARIANT' and '$1'"
        VARIANT=$1 ;;
      *) die 2 "unknown argument '$1' (usage: $ME.sh [--dry-run] [--prefix DIR] [--stack fa3c990|v0.3.1] [cu12|cu13])" ;;
    esac
    shift
  done
  set_stack
  PREFIX_GIVEN=${PREFIX:+1}
}

# STACK's pins and its default CUDA variant; v0.3.1 is cu12 only (slime's docker/Dockerfile builds
# it on the v0.5.15.post1-cu129 SGLang image by default, build_conda.sh on CUDA 12.9).
set_stack() {
  case "${STACK:=fa3c990}" in
    fa3c990) VARIANT=${VARIANT:-cu13} ;;
    v0.3.1)
      pins_v0_3_1
      VARIANT=${VARIANT:-cu12}
      [[ $VARIANT == cu12 ]] || die 2 "--stack v0.3.1 installs for CUDA 12 only, as slime builds v0.3.1 (CUDA 12.9); give cu12, or --stack fa3c990 for cu13" ;;
    *) die 2 "unknown --stack '$STACK' (choose fa3c990, the default, or v0.3.1; docs/install.md, \"Which slime\")" ;;
  esac
}

set_variant() {
  case "$VARIANT" in
    cu13) CUDA_MAJOR=13 TORCH_BACKEND=cu130 CUDA_DEFAULT=/usr/local/cuda-13.0 ;;
    cu12) CUDA_MAJOR=12 TORCH_BACKEND=cu129 CUDA_DEFAULT=/usr/local/cuda-12.9 ;;
  esac
  CUDA_HOME=${CUDA_HOME:-$CUDA_DEFAULT}
  JOBS=${TOOLKIT_MAX_JOBS:-$(jobs_default)}
  [[ $JOBS =~ ^[1-9][0-9]*$ ]] || die 2 "TOOLKIT_MAX_JOBS must be a positive integer, got '$JOBS'"
}

jobs_default() {
  local n
  n=$(nproc 2>/dev/null || echo 8)
  ((n > 64)) && n=64
  printf '%s\n' "$n"
}

require_tools() {
  local tool
  for tool in git patch; do
    command -v "$tool" >/dev/null || die 127 "'$tool' not found on PATH (install it, e.g. apt-get install $tool)"
  done
  [[ ${BASH_VERSINFO[0]} -gt 4 || (${BASH_VERSINFO[0]} -eq 4 && ${BASH_VERSINFO[1]} -ge 4) ]] ||
    die 1 "bash >= 4.4 required, this is $BASH_VERSION"
}

# CUDA_HOME/bin/nvcc must exist and match the variant, before anything is installed.
check_cuda() {
  local nvcc="$CUDA_HOME/bin/nvcc" text release hint
  [[ -x $nvcc ]] || die 127 "no nvcc at $nvcc (install the CUDA $CUDA_MAJOR toolkit or export CUDA_HOME=<its dir>)"
  text=$("$nvcc" --version 2>&1) || die 1 "$nvcc --version failed: $text"
  release=$(sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' <<<"$text" | head -n 1)
  [[ -n $release ]] || die 1 "cannot read the CUDA release from '$nvcc --version' (is $CUDA_HOME a CUDA toolkit?)"
  hint="export CUDA_HOME=<a CUDA $CUDA_MAJOR toolkit>"
  [[ ${release%%.*} != 1[23] ]] || hint+=" or run '$ME.sh cu${release%%.*}'"
  [[ ${release%%.*} == "$CUDA_MAJOR" ]] ||
    die 1 "CUDA_HOME=$CUDA_HOME has nvcc $release but $VARIANT needs CUDA $CUDA_MAJOR.x ($hint)"
  CUDA_RELEASE=$release
}

# The environment that receives everything: the active venv / conda env, or PREFIX/venv.
resolve_env() {
  NEW_VENV=""
  if [[ -n ${VIRTUAL_ENV:-} ]]; then
    ENV_DIR=$VIRTUAL_ENV
  elif [[ -n ${CONDA_PREFIX:-} ]]; then
    ENV_DIR=$CONDA_PREFIX
  elif [[ -n $PREFIX_GIVEN ]]; then
    ENV_DIR="$PREFIX/venv"
    [[ -x $ENV_DIR/bin/python ]] || NEW_VENV=$ENV_DIR
  else
    die 2 "no Python environment is active (activate a venv or conda env first, or pass --prefix DIR to create DIR/venv)"
  fi
  PY="$ENV_DIR/bin/python"
  [[ -n $NEW_VENV || -x $PY ]] || die 1 "no python at $PY (is the environment at $ENV_DIR complete?)"
  check_python_version
  ((USE_UV)) || [[ -n $NEW_VENV ]] || "$PY" -m pip --version >/dev/null 2>&1 ||
    die 127 "neither uv on PATH nor pip in $ENV_DIR (install uv, or run: $PY -m ensurepip)"
}

check_python_version() {
  local py=$PY version
  [[ -z $NEW_VENV ]] || py=$(command -v python3) || die 127 "python3 not found on PATH (needed to create $NEW_VENV)"
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || die 1 "$py does not run"
  case "$version" in
    3.11 | 3.12) ;;
    *) die 1 "$py is Python $version; the stack needs 3.11 or 3.12 (use another environment)" ;;
  esac
  PY_VERSION=$version
}

# Clones we would reuse must be git clones; a clone at another commit must have no local changes.
check_clone_dir() { # <dir> <commit>
  local dir=$1 commit=$2 head
  [[ -e $dir ]] || return 0
  [[ -d $dir/.git ]] || die 1 "$dir exists and is not a git clone (move it away or choose another --prefix)"
  head=$(git -C "$dir" rev-parse HEAD 2>/dev/null) || head=""
  [[ $head == "$commit" ]] && return 0
  [[ -z $(git -C "$dir" status --porcelain 2>/dev/null) ]] ||
    die 1 "$dir is at ${head:-no commit} with local changes, not at the pinned $commit (commit or move your changes, then rerun)"
}

set_paths() {
  local repo
  PREFIX=${PREFIX:-$PWD}
  PREFIX=$(realpath -m -- "$PREFIX") # absolute and the same whether or not it exists yet
  SLIME_DIR="$PREFIX/slime"
  MEGATRON_DIR="$PREFIX/Megatron-LM"
  STATE_DIR="$PREFIX/.install_slime"
  STATE_FILE="$STATE_DIR/state"
  LOG_FILE="$PREFIX/install_slime.log"
  repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}" 2>/dev/null || echo "${BASH_SOURCE[0]}")")" && pwd)
  PROJECT_DIR="$repo/python"
  [[ -f $PROJECT_DIR/pyproject.toml ]] || die 1 "no $PROJECT_DIR/pyproject.toml (run $ME.sh from a checkout of this project)"
  refuse_prefix_in_checkout
}

# The clones, the log and the resume state never land inside a git checkout (this toolkit's or
# any other): they would show up as untracked files there, or be committed by accident.
refuse_prefix_in_checkout() {
  local dir=$PREFIX
  while :; do
    [[ ! -e $dir/.git ]] ||
      die 2 "--prefix $PREFIX is inside the git checkout $dir (the slime and Megatron-LM clones would land in it): pass --prefix DIR outside it, e.g. --prefix ~/slime-src"
    [[ $dir != / ]] || return 0
    dir=$(dirname "$dir")
  done
}

# ---------------------------------------------------------------- installer front ends ------------

if command -v uv >/dev/null 2>&1; then USE_UV=1 INSTALLER="uv pip"; else USE_UV=0 INSTALLER="python -m pip"; fi

pip_install() { # <args...>: install into $PY's environment
  if ((USE_UV)); then run_cmd uv pip install --python "$PY" "$@"; else run_cmd "$PY" -m pip install "$@"; fi
}
torch_index() { # the PyTorch wheel index of the variant
  if ((USE_UV)); then
    printf '%s\n' "--torch-backend=$TORCH_BACKEND"
  else
    printf '%s\n' "--extra-index-url=$TORCH_INDEX/$TORCH_BACKEND"
  fi
}
prerelease_flag() { if ((USE_UV)); then echo "--prerelease=allow"; else echo "--pre"; fi; }
reinstall_flag() { # <package>
  if ((USE_UV)); then echo "--reinstall-package=$1"; else echo "--force-reinstall"; fi
}
no_config_flag() { if ((USE_UV)); then echo "--no-config"; else echo "--isolated"; fi; }

# ---------------------------------------------------------------- "already done" checks ----------

# satisfied NAME PIN [NAME PIN ...]: exit 0 when every distribution matches its pin:
#   ==V / >=V / <V  version (numeric releases compared padded; a local label in V must match exactly)
#   @COMMIT         installed from git at COMMIT (PEP 610 direct_url.json)
#   url:URL         installed from URL or an editable/local dir at URL (file://...)
#   any | absent    installed at all | not installed
read -r -d '' PY_SATISFIED <<'PY' || true
import json, os, re, sys
from importlib import metadata
from urllib.parse import unquote, urlparse

def release(v):
    nums = re.match(r"[0-9]+(\.[0-9]+)*", v.split("+")[0])
    return [int(x) for x in nums.group(0).split(".")] if nums else []

def compare(a, b):
    a, b = release(a), release(b)
    n = max(len(a), len(b))
    a, b = a + [0] * (n - len(a)), b + [0] * (n - len(b))
    return (a > b) - (a < b)

def same_url(a, b):
    if a.startswith("file://") and b.startswith("file://"):
        return os.path.realpath(unquote(urlparse(a).path)) == os.path.realpath(unquote(urlparse(b).path))
    return a == b

def ok(name, pin):
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return pin == "absent"
    have, origin = dist.version, json.loads(dist.read_text("direct_url.json") or "{}")
    if pin in ("any", "absent"):
        return pin == "any"
    if pin.startswith("@"):
        return origin.get("vcs_info", {}).get("commit_id") == pin[1:]
    if pin.startswith("url:"):
        return same_url(origin.get("url", ""), pin[4:])
    op, want = re.match(r"(==|>=|<)(.*)", pin).groups()
    if op == "==" and "+" in want:
        return have == want
    if op == "==" and not re.fullmatch(r"[0-9.]+", have.split("+")[0]):
        return have.split("+")[0] == want
    return {"==": compare(have, want) == 0, ">=": compare(have, want) >= 0, "<": compare(have, want) < 0}[op]

args = sys.argv[1:]
sys.exit(0 if all(ok(n, p) for n, p in zip(args[::2], args[1::2])) else 1)
PY

version_pin() { # <version>: ==VERSION for satisfied, or any when VERSION is empty
  if [[ -n $1 ]]; then echo "==$1"; else echo any; fi
}
satisfied() { # NAME PIN [NAME PIN ...]
  [[ -x $PY ]] || return 1
  "$PY" -c "$PY_SATISFIED" "$@" >/dev/null 2>&1
}
clone_at() { # <dir> <commit>
  [[ -d $1/.git && $(git -C "$1" rev-parse HEAD 2>/dev/null) == "$2" ]]
}
git_patch_applied() { # <repo> <patch>
  [[ -f $2 ]] && git -C "$1" apply --check -R "$2" >/dev/null 2>&1
}
site_patch_applied() { # <patch>
  local site
  [[ -f $1 ]] && site=$(sglang_site 2>/dev/null) && [[ -d $site ]] &&
    patch -d "$site" -p2 -F0 -R --dry-run -s -i "$1" >/dev/null 2>&1
}
# the directory that holds the installed sglang package (the sglang patches are relative to it),
# found without importing sglang
sglang_site() {
  "$PY" -c 'import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec("sglang").origin)))' \
    2>/dev/null ||
    { ((DRY_RUN)) && echo "<dir of the installed sglang package>"; }
}
torch_cuda_major() {
  "$PY" -c 'import torch; print(torch.version.cuda.split(".")[0])' 2>/dev/null ||
    { ((DRY_RUN)) && echo "<major of torch.version.cuda>"; }
}

# ---------------------------------------------------------------- steps ---------------------------
# Each step NAME has step_NAME (the commands, all through run_cmd), title_NAME, and optionally
# done_NAME (a read-only check that its result is already there). Steps without a check are
# skipped only when the state file records them as done with the same pins.

title_venv() { echo "create the virtualenv $ENV_DIR"; }
step_venv() {
  if ((USE_UV)); then run_cmd uv venv --python "$PY_VERSION" "$ENV_DIR"; else run_cmd python3 -m venv "$ENV_DIR"; fi
}
done_venv() { [[ -x $PY ]]; }

title_torch() { echo "PyTorch $PIN_TORCH ($TORCH_BACKEND)"; }
step_torch() { # the local label (+cu130) makes a build for another CUDA count as not installed
  pip_install "torch==$PIN_TORCH+$TORCH_BACKEND" "torchvision==$PIN_TORCHVISION+$TORCH_BACKEND" \
    "torchaudio==$PIN_TORCHAUDIO+$TORCH_BACKEND" "$(torch_index)"
}
done_torch() {
  satisfied torch "==$PIN_TORCH+$TORCH_BACKEND" torchvision "==$PIN_TORCHVISION+$TORCH_BACKEND" \
    torchaudio "==$PIN_TORCHAUDIO+$TORCH_BACKEND"
}

title_build_tools() { echo "build tools (cmake, ninja, pybind11, packaging, wheel)"; }
step_build_tools() { pip_install cmake ninja pybind11 "packaging>=24.2" wheel; }
done_build_tools() { satisfied cmake any ninja any pybind11 any packaging ">=24.2" wheel any; }

title_flash_attn() { echo "flash-attn $PIN_FLASH_ATTN (compiled, MAX_JOBS=$JOBS)"; }
step_flash_attn() {
  MAX_JOBS=$JOBS pip_install "flash-attn==$PIN_FLASH_ATTN" --no-build-isolation --no-cache-dir "$(torch_index)"
}
done_flash_attn() { satisfied flash-attn "==$PIN_FLASH_ATTN"; }

title_mbridge() { echo "mbridge at ${PIN_MBRIDGE:0:12}"; }
step_mbridge() { pip_install "mbridge @ git+$GITHUB/ISEEKYAN/mbridge.git@$PIN_MBRIDGE" --no-deps; }
done_mbridge() { satisfied mbridge "@$PIN_MBRIDGE"; }

title_fla() {
  if [[ -n $PIN_FLA ]]; then echo "flash-linear-attention $PIN_FLA and tilelang $PIN_TILELANG"; else
    echo "flash-linear-attention and tilelang (latest)"
  fi
}
step_fla() { pip_install "flash-linear-attention${PIN_FLA:+==$PIN_FLA}" "tilelang${PIN_TILELANG:+==$PIN_TILELANG}" "$(torch_index)"; }
done_fla() { satisfied flash-linear-attention "$(version_pin "$PIN_FLA")" tilelang "$(version_pin "$PIN_TILELANG")"; }

title_transformer_engine() { echo "TransformerEngine $PIN_TE (core-cu$CUDA_MAJOR)"; }
step_transformer_engine() {
  local spec="transformer_engine[pytorch,core-cu$CUDA_MAJOR]==$PIN_TE"
  if ((CUDA_MAJOR == 12)); then
    MAX_JOBS=$JOBS pip_install "$spec" --no-build-isolation --no-cache-dir
  elif ((USE_UV)); then # keep transformer-engine-cu12 out, or two libcudart versions get loaded
    run_cmd write_file "$STATE_DIR/te-overrides.txt" "transformer-engine-cu12 ; sys_platform == 'never'"
    MAX_JOBS=$JOBS pip_install "$spec" --no-build-isolation --no-cache-dir --overrides "$STATE_DIR/te-overrides.txt"
  else
    MAX_JOBS=$JOBS pip_install "$spec" --no-build-isolation --no-cache-dir
    run_cmd "$PY" -m pip uninstall -y transformer-engine-cu12
  fi
}
done_transformer_engine() {
  if ((CUDA_MAJOR == 12)); then satisfied transformer-engine "==$PIN_TE"; else
    satisfied transformer-engine "==$PIN_TE" transformer-engine-cu12 absent
  fi
}

title_apex() { echo "Apex at ${PIN_APEX:0:12} (C++ and CUDA extensions)"; }
step_apex() {
  NVCC_APPEND_FLAGS="--threads 4" APEX_CPP_EXT=1 APEX_CUDA_EXT=1 APEX_PARALLEL_BUILD=8 MAX_JOBS=$JOBS \
    pip_install "apex @ git+$GITHUB/NVIDIA/apex.git@$PIN_APEX" -v --no-build-isolation --no-cache-dir
}
done_apex() { satisfied apex "@$PIN_APEX"; }

title_torch_memory_saver() { echo "torch_memory_saver at ${PIN_TMS:0:12}"; }
step_torch_memory_saver() {
  local major
  major=$(torch_cuda_major) || fail "cannot read torch.version.cuda from $PY (is the torch step done?)"
  [[ $major == "$CUDA_MAJOR" || $DRY_RUN -eq 1 ]] ||
    fail "torch in $ENV_DIR is built for CUDA $major but $VARIANT needs $CUDA_MAJOR (rerun to reinstall the $TORCH_BACKEND build)"
  TMS_CUDA_MAJOR=$major pip_install "torch_memory_saver @ git+$GITHUB/$PIN_TMS_REPO.git@$PIN_TMS" \
    --no-deps --no-build-isolation --no-cache-dir "$(reinstall_flag torch_memory_saver)"
}
done_torch_memory_saver() { satisfied torch_memory_saver "@$PIN_TMS"; }

title_megatron_bridge() { echo "Megatron-Bridge at ${PIN_MEGATRON_BRIDGE:0:12} and nvidia-modelopt$PIN_MODELOPT"; }
step_megatron_bridge() {
  pip_install "megatron-bridge @ git+$GITHUB/radixark/Megatron-Bridge.git@$PIN_MEGATRON_BRIDGE" --no-deps --no-build-isolation
  pip_install "nvidia-modelopt[torch]$PIN_MODELOPT" --no-build-isolation
}
done_megatron_bridge() { satisfied megatron-bridge "@$PIN_MEGATRON_BRIDGE" nvidia-modelopt "$PIN_MODELOPT"; }

title_modelopt() { echo "nvidia-modelopt$PIN_MODELOPT (no Megatron-Bridge: this slime has none)"; }
step_modelopt() { pip_install "nvidia-modelopt[torch]$PIN_MODELOPT" --no-build-isolation; }
done_modelopt() { satisfied nvidia-modelopt "$PIN_MODELOPT"; }

title_sglang() { echo "SGLang $PIN_SGLANG"; }
step_sglang() { pip_install "sglang==$PIN_SGLANG" "$(prerelease_flag)" "$(torch_index)"; }
done_sglang() { satisfied sglang "==$PIN_SGLANG"; }

title_sglang_cu129_kernels() {
  echo "SGLang kernels built for CUDA 12.9 (sglang-kernel${PIN_SGLANG_KERNEL:+ $PIN_SGLANG_KERNEL}, sgl-deep-gemm${PIN_SGL_DEEP_GEMM:+ $PIN_SGL_DEEP_GEMM})"
}
step_sglang_cu129_kernels() {
  pip_install "sglang-kernel${PIN_SGLANG_KERNEL:+==$PIN_SGLANG_KERNEL}" --no-deps "$(reinstall_flag sglang-kernel)" \
    --index-url "$SGLANG_CU129_INDEX"
  pip_install "sgl-deep-gemm${PIN_SGL_DEEP_GEMM:+==$PIN_SGL_DEEP_GEMM}" --no-deps "$(reinstall_flag sgl-deep-gemm)" \
    --index-url "$SGLANG_CU129_INDEX"
}

title_megatron_clone() { echo "clone Megatron-LM at ${PIN_MEGATRON:0:12} into $MEGATRON_DIR"; }
step_megatron_clone() { clone_pinned "$GITHUB/NVIDIA/Megatron-LM.git" "$MEGATRON_DIR" "$PIN_MEGATRON"; }
done_megatron_clone() { clone_at "$MEGATRON_DIR" "$PIN_MEGATRON"; }

title_megatron_install() { echo "Megatron-LM, editable (the wheel lacks megatron.training)"; }
step_megatron_install() {
  pip_install -e "$MEGATRON_DIR" --no-build-isolation --config-settings editable_mode=compat
}
done_megatron_install() { satisfied megatron-core "url:file://$MEGATRON_DIR"; }

title_cutlass_pyjwt() { echo "reinstall nvidia-cutlass-dsl-libs-base $PIN_CUTLASS_DSL and PyJWT"; }
step_cutlass_pyjwt() {
  pip_install "nvidia-cutlass-dsl-libs-base==$PIN_CUTLASS_DSL" --no-deps "$(reinstall_flag nvidia-cutlass-dsl-libs-base)"
  pip_install PyJWT "$(reinstall_flag pyjwt)"
}

title_slime_clone() { echo "clone slime at ${PIN_SLIME:0:12} into $SLIME_DIR"; }
step_slime_clone() { clone_pinned "$GITHUB/THUDM/slime.git" "$SLIME_DIR" "$PIN_SLIME"; }
done_slime_clone() { clone_at "$SLIME_DIR" "$PIN_SLIME"; }

title_slime_requirements() { echo "slime's requirements.txt"; }
step_slime_requirements() { pip_install -r "$SLIME_DIR/requirements.txt"; }

title_ray() { echo "ray[default] $PIN_RAY (slime's requirements leave it unpinned)"; }
step_ray() { pip_install "ray[default]==$PIN_RAY"; }
done_ray() { satisfied ray "==$PIN_RAY"; }

title_slime_install() { echo "slime, editable, --no-deps"; }
step_slime_install() { pip_install -e "$SLIME_DIR" --no-deps; }
done_slime_install() { satisfied slime "url:file://$SLIME_DIR"; }

title_sglang_router() { echo "sglang-router 0.3.2 (slime's build $(router_build))"; }
step_sglang_router() { pip_install "sglang-router @ $PIN_SGLANG_ROUTER_WHEEL" "$(reinstall_flag sglang-router)"; }
done_sglang_router() { satisfied sglang-router "url:$PIN_SGLANG_ROUTER_WHEEL"; }

title_numpy_scipy() { echo "numpy$PIN_NUMPY and scipy$PIN_SCIPY (Megatron needs numpy 1.x)"; }
step_numpy_scipy() { pip_install "$(no_config_flag)" "numpy$PIN_NUMPY" "scipy$PIN_SCIPY"; }
done_numpy_scipy() { satisfied numpy "$PIN_NUMPY" scipy "$PIN_SCIPY"; }

title_megatron_patch() { echo "apply slime's megatron.patch to $MEGATRON_DIR"; }
step_megatron_patch() {
  local p="$SLIME_DIR/$SLIME_PATCH_DIR/megatron.patch"
  ((DRY_RUN)) || git -C "$MEGATRON_DIR" apply --check "$p" >/dev/null 2>&1 ||
    fail "$p neither applies to nor is applied in $MEGATRON_DIR (local changes there? see 'git -C $MEGATRON_DIR status')"
  run_cmd git -C "$MEGATRON_DIR" apply "$p"
}
done_megatron_patch() { git_patch_applied "$MEGATRON_DIR" "$SLIME_DIR/$SLIME_PATCH_DIR/megatron.patch"; }

title_sglang_patches() { echo "apply slime's $(patch_names) to the installed sglang"; }
step_sglang_patches() {
  local site name
  site=$(sglang_site) || fail "cannot find the installed sglang package (is the sglang step done?)"
  for name in $PIN_SGLANG_PATCHES; do
    site_patch_applied "$SLIME_DIR/$SLIME_PATCH_DIR/$name.patch" && continue
    run_cmd patch -d "$site" -p2 -F0 -N -i "$SLIME_DIR/$SLIME_PATCH_DIR/$name.patch"
  done
}
done_sglang_patches() {
  local name
  for name in $PIN_SGLANG_PATCHES; do
    site_patch_applied "$SLIME_DIR/$SLIME_PATCH_DIR/$name.patch" || return 1
  done
}
# patch_names: "a.patch and b.patch", or "a.patch, b.patch and c.patch"
patch_names() {
  local -a names
  read -r -a names <<<"$PIN_SGLANG_PATCHES"
  names=("${names[@]/%/.patch}")
  if ((${#names[@]} > 1)); then
    printf '%s' "${names[*]:0:${#names[@]}-1}" | sed 's/ /, /g'
    printf ' and %s\n' "${names[-1]}"
  else
    printf '%s\n' "${names[0]}"
  fi
}
# router_build: the sgl-router release of PIN_SGLANG_ROUTER_WHEEL (v0.3.2-1117d05)
router_build() {
  local release=${PIN_SGLANG_ROUTER_WHEEL%/*}
  printf '%s\n' "${release##*/}"
}

title_project() { echo "this project's Python package ($PROJECT_DIR) with bin/train's helpers, stack pins held"; }
step_project() {
  run_cmd write_file "$STATE_DIR/constraints.txt" "torch==$PIN_TORCH+$TORCH_BACKEND" "numpy$PIN_NUMPY" "scipy$PIN_SCIPY" \
    "sglang==$PIN_SGLANG" "transformer_engine==$PIN_TE" "ray==$PIN_RAY"
  pip_install -e "${PROJECT_DIR}[launcher]" --constraint "$STATE_DIR/constraints.txt"
}
done_project() { # the [launcher] extra lets bin/train run with this environment's python3
  satisfied agentcore-slime "url:file://$PROJECT_DIR" jinja2 any python-dotenv any
}

clone_pinned() { # <url> <dir> <commit>
  if [[ -d $2/.git ]]; then run_cmd git -C "$2" fetch origin "$3"; else run_cmd git clone "$1" "$2"; fi
  run_cmd git -C "$2" checkout --quiet "$3"
}

write_file() { # <path> <line...>
  printf '%s\n' "${@:2}" >"$1"
}

plan_steps() {
  STEPS=()
  [[ -z $NEW_VENV ]] || STEPS+=(venv)
  STEPS+=(torch build_tools flash_attn)
  [[ -z $PIN_MBRIDGE ]] || STEPS+=(mbridge)
  STEPS+=(fla transformer_engine apex torch_memory_saver)
  if [[ -n $PIN_MEGATRON_BRIDGE ]]; then STEPS+=(megatron_bridge); else STEPS+=(modelopt); fi
  STEPS+=(sglang)
  ((CUDA_MAJOR == 12)) && STEPS+=(sglang_cu129_kernels)
  STEPS+=(megatron_clone megatron_install cutlass_pyjwt slime_clone slime_requirements ray slime_install
    sglang_router numpy_scipy megatron_patch sglang_patches project)
}

# ---------------------------------------------------------------- step runner ---------------------

# run_cmd CMD...: print it (dry run) or run it with its output appended to the log; on failure
# remember the command and end the step (each step runs in a subshell).
run_cmd() {
  local shown status=0
  shown=$(show_cmd "$@")
  if ((DRY_RUN)); then
    printf '      %s\n' "$shown"
    return 0
  fi
  printf '$ %s\n' "$shown" >>"$LOG_FILE"
  : >"$CMD_OUT"
  "$@" </dev/null 2>&1 | tee -a "$LOG_FILE" >"$CMD_OUT" || status=${PIPESTATUS[0]}
  if ((status != 0)); then
    printf '%s\n' "$shown" >"$FAILED_CMD"
    exit "$status"
  fi
}
show_cmd() { # <cmd...>: shell-quoted, after the build variables a step sets for it
  local var
  for var in MAX_JOBS TMS_CUDA_MAJOR NVCC_APPEND_FLAGS APEX_CPP_EXT APEX_CUDA_EXT APEX_PARALLEL_BUILD; do
    [[ -z ${!var:-} ]] || printf '%s=%q ' "$var" "${!var}"
  done
  if [[ $1 == write_file ]]; then
    printf '%s' "printf '%s\\n'"
    printf ' %q' "${@:3}"
    printf ' > %q' "$2"
  else
    printf '%q ' "$@" | sed 's/ $//'
  fi
}
# fail MESSAGE: end a step with a failure that is not a command's
fail() {
  printf '(check) %s\n' "$1" >"$FAILED_CMD"
  printf '%s\n' "$1" >"$CMD_OUT"
  exit 1
}

fingerprint() {
  printf '%s\n' "$VARIANT" "$ENV_DIR" "$PREFIX" && set | grep '^PIN_' || true
} 2>/dev/null

recorded_done() { [[ -f $STATE_FILE ]] && grep -qxF "$STATE_KEY $1" "$STATE_FILE"; }
is_done() { # <step>: the check says so, or (no check) the state file does
  if declare -F "done_$1" >/dev/null; then "done_$1"; else recorded_done "$1"; fi
}

run_step() { # <index> <step>
  local i=$1 name=$2 status=0 title
  title=$("title_$name")
  if is_done "$name"; then
    say "[$i/${#STEPS[@]}] skip $name: already done ($title)"
    printf '# skipped %s (already done)\n' "$name" >>"$LOG_FILE"
    record_done "$name"
    return 0
  fi
  say "[$i/${#STEPS[@]}] $name: $title"
  printf '# step %s/%s %s: %s (%s)\n' "$i" "${#STEPS[@]}" "$name" "$title" "$(date -u +%FT%TZ)" >>"$LOG_FILE"
  (export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH" && "step_$name") || status=$?
  if ((status != 0)); then
    report_failure "$i" "$name" "$status"
    exit 1
  fi
  record_done "$name"
}

record_done() { recorded_done "$1" || printf '%s %s\n' "$STATE_KEY" "$1" >>"$STATE_FILE"; }

report_failure() { # <index> <step> <status>
  {
    printf '%s: step %s/%s %s failed (exit %s)\n' "$ME" "$1" "${#STEPS[@]}" "$2" "$3"
    printf '  command: %s\n' "$(cat "$FAILED_CMD" 2>/dev/null || echo '?')"
    printf '  last lines of its output (whole log: %s):\n' "$LOG_FILE"
    tail -n 25 "$CMD_OUT" 2>/dev/null | sed 's/^/    /'
    printf '%s: fix the cause and rerun the same command; finished steps are skipped\n' "$ME"
  } >&2
}

print_plan() {
  local i=0 name note
  printf 'install_slime plan: stack %s (slime %s, SGLang %s), %s, CUDA_HOME=%s (nvcc %s), environment %s (python %s), installer %s\n' \
    "$STACK" "${PIN_SLIME:0:12}" "$PIN_SGLANG" "$VARIANT" "$CUDA_HOME" "$CUDA_RELEASE" "$ENV_DIR" "$PY_VERSION" "$INSTALLER"
  for name in "${STEPS[@]}"; do
    i=$((i + 1))
    note=""
    is_done "$name" && note="  [already done: would skip]"
    printf '%2d. %s: %s%s\n' "$i" "$name" "$("title_$name")" "$note"
    ("step_$name") || true
  done
  printf 'dry run: nothing was changed\n'
}

print_summary() {
  cat <<EOF
install_slime: done (stack $STACK, $VARIANT, CUDA $CUDA_RELEASE at $CUDA_HOME)
  python env:   $ENV_DIR (python $PY_VERSION)$([[ -z $NEW_VENV ]] || printf '; activate it with: source %s/bin/activate' "$ENV_DIR")
  torch:        $PIN_TORCH+$TORCH_BACKEND, flash-attn $PIN_FLASH_ATTN, TransformerEngine $PIN_TE, SGLang $PIN_SGLANG, Ray $PIN_RAY
  Megatron-LM:  $MEGATRON_DIR (at $PIN_MEGATRON, slime's megatron.patch applied)
  slime:        $SLIME_DIR (at $PIN_SLIME)
  router:       sglang-router 0.3.2, slime's build $(router_build)
  toolkit:      $PROJECT_DIR (editable)
  log:          $LOG_FILE

Put these two lines in your env file (e.g. examples/gsm8k.env):
SLIME_DIR=$SLIME_DIR
MEGATRON_DIR=$MEGATRON_DIR
EOF
}

main() {
  parse_args "$@"
  set_variant
  require_tools
  check_cuda
  set_paths
  resolve_env
  check_clone_dir "$MEGATRON_DIR" "$PIN_MEGATRON"
  check_clone_dir "$SLIME_DIR" "$PIN_SLIME"
  plan_steps
  STATE_KEY=$(fingerprint | cksum | cut -d' ' -f1)
  if ((DRY_RUN)); then
    CMD_OUT=/dev/null FAILED_CMD=/dev/null
    print_plan
    return 0
  fi
  mkdir -p "$STATE_DIR" || die 1 "cannot create $STATE_DIR (choose a writable --prefix)"
  CMD_OUT="$STATE_DIR/last-output" FAILED_CMD="$STATE_DIR/failed-command"
  printf '# %s %s %s, %s\n' "$ME" "$*" "$(date -u +%FT%TZ)" "$PY" >>"$LOG_FILE"
  say "installing the slime stack $STACK ($VARIANT) into $ENV_DIR; log: $LOG_FILE"
  local i=0 name
  for name in "${STEPS[@]}"; do
    i=$((i + 1))
    run_step "$i" "$name"
  done
  print_summary
}

main "$@"
