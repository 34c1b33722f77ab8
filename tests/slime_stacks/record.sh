#!/usr/bin/env bash
# Summary: Record one slime stack's flags and parsers from its real parsers, patched as slime's container patches them
#
# Usage: tests/slime_stacks/record.sh NAME SLIME_CHECKOUT MEGATRON_REPO PYTHON
#
#   NAME               the stack's name: writes tests/slime_stacks/NAME.flags and NAME.parsers.json
#   SLIME_CHECKOUT     slime, checked out at the stack's commit (a git checkout)
#   MEGATRON_REPO      a git clone of NVIDIA/Megatron-LM that has the commit slime's
#                      docker/Dockerfile pins (MEGATRON_COMMIT)
#   PYTHON             a python with a CPU torch, sglang-router 0.3.2 and the SGLang version of the
#                      Dockerfile's SGLANG_IMAGE_TAG (README.md beside this file says how)
#
# What slime's docker/Dockerfile does to the stack, done to copies in a temporary directory: the
# Megatron-LM commit it pins, with its docker/patch/<PATCH_VERSION>/megatron*.patch applied
# (megatron.patch first), and PYTHON's sglang package with the sglang*.patch files the Dockerfile
# applies, in its order (their python/sglang/ part: the rest is kernels and docs). Then
# record_flags.py reads every parser slime's parse_args builds from them. Needs no network.
[ -n "${BASH_VERSION:-}" ] || { echo "record.sh: run it with bash" >&2; exit 2; }
set -euo pipefail
[[ -n ${TOOLKIT_DEBUG:-} ]] && set -x

die() { # <message> [status]
  printf 'record.sh: %s\n' "$1" >&2
  exit "${2:-1}"
}

# dockerfile_arg FILE NAME: the default of `ARG NAME=...` in FILE.
dockerfile_arg() { # <dockerfile> <name>
  sed -n "s/^ARG $2=//p" "$1" | head -n 1
}

# sglang_patches FILE: the sglang*.patch names FILE applies, in order, each once.
sglang_patches() { # <dockerfile>
  grep -o 'sglang[-_a-z]*\.patch' "$1" | awk '!seen[$0]++'
}

# patched_megatron REPO COMMIT PATCH_DIR OUT: REPO at COMMIT in OUT, slime's patches applied.
patched_megatron() { # <repo> <commit> <patch-dir> <out>
  local patch
  mkdir -p "$4"
  git -C "$1" archive "$2" | tar -x -C "$4"
  for patch in "$3/megatron.patch" "$3"/megatron-*.patch; do
    [[ -f $patch ]] || continue
    (cd "$4" && git apply "$patch") || die "$patch does not apply to Megatron-LM $2"
    say_applied "$patch"
  done
}

# patched_sglang PYTHON DOCKERFILE PATCH_DIR OUT: PYTHON's sglang package (and its dist-info) in
# OUT, with the Dockerfile's SGLang patches applied to it.
patched_sglang() { # <python> <dockerfile> <patch-dir> <out>
  local package info patch
  package=$("$1" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("sglang").origin))')
  info=$("$1" -c 'import importlib.metadata as m; print(m.distribution("sglang")._path)')
  mkdir -p "$4"
  cp -r "$package" "$4/sglang"
  cp -r "$info" "$4/"
  for patch in $(sglang_patches "$2"); do
    [[ -f $3/$patch ]] || continue
    # -p2 strips a/python/; --include matches what is left (a pattern that matches nothing
    # applies nothing, silently: the count below makes sure something was)
    [[ -n $(cd "$4" && git apply -p2 --include='sglang/*' --numstat "$3/$patch") ]] ||
      die "$patch has no change under python/sglang/"
    (cd "$4" && git apply -p2 --include='sglang/*' "$3/$patch") ||
      die "$patch does not apply to the sglang package of $1"
    say_applied "$3/$patch"
  done
}

say_applied() { # <patch>
  printf 'record.sh: applied %s\n' "${1#"$slime/"}" >&2
  applied+=("${1#"$slime/docker/patch/"}")
}

(($# == 4)) || die "usage: tests/slime_stacks/record.sh NAME SLIME_CHECKOUT MEGATRON_REPO PYTHON" 2
name=$1 slime=$(cd "$2" && pwd) megatron=$3 python=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dockerfile=$slime/docker/Dockerfile
[[ -f $dockerfile ]] || die "no $dockerfile (SLIME_CHECKOUT must be a slime checkout)" 2
megatron_commit=$(dockerfile_arg "$dockerfile" MEGATRON_COMMIT)
patch_dir=$slime/docker/patch/$(dockerfile_arg "$dockerfile" PATCH_VERSION)
wanted=$(dockerfile_arg "$dockerfile" SGLANG_IMAGE_TAG)
wanted=${wanted#v} wanted=${wanted%%-*}
found=$("$python" -c 'import importlib.metadata as m; print(m.version("sglang"))') ||
  die "$python has no sglang (install SGLang $wanted for it)" 2
[[ $found == "$wanted" ]] || die "$python has SGLang $found; slime's Dockerfile uses $wanted" 2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
applied=()
patched_megatron "$megatron" "$megatron_commit" "$patch_dir" "$work/megatron"
patched_sglang "$python" "$dockerfile" "$patch_dir" "$work/site"
PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" "$python" "$here/record_flags.py" \
  --slime "$slime" --megatron "$work/megatron" --megatron-commit "$megatron_commit" --stack "$name" \
  --patched "${applied[*]}" --parsers "$here/$name.parsers.json" \
  --stand-in torchvision --stand-in setproctitle --stand-in uvicorn --stand-in fastapi \
  --stand-in wandb --stand-in networkx --stand-in six >"$work/flags"
mv "$work/flags" "$here/$name.flags"
printf 'record.sh: wrote %s and %s\n' "$here/$name.flags" "$here/$name.parsers.json" >&2
