#!/usr/bin/env bash
# Fetch the wheels a device call carries (docs/gpu.md), for the device's Python 3.12 on x86_64:
#   bash experiments/device/fetch_wheels.sh            # .whl/gpu: fla, optuna, pytest and what they need (9.2 MB)
#   bash experiments/device/fetch_wheels.sh tilelang   # also .whl_parts: GatedDeltaNet's TileLang backward, in parts
# A new checkout has no .whl (git-ignored): run this before the session's first device call. Pins: what the
# device's results so far were measured with.
set -euo pipefail
cd "$(dirname "$0")/../.."
get() {  # $1 folder, then NAME==VERSION or NAME ...
  local dir=.whl/$1; shift; mkdir -p "$dir"
  for p in "$@"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "$p"
  done
  echo "$dir: $(ls "$dir" | wc -l) wheels, $(du -sh "$dir" | cut -f1)"
}
get gpu fla-core==0.6.0 flash-linear-attention==0.6.0 optuna==5.0.0 alembic sqlalchemy mako colorlog greenlet \
  pytest pluggy iniconfig pygments packaging pytest-timeout  # the GPU-marked tests run on the device
if [ "${1:-}" = tilelang ]; then
  get a z3-solver==4.15.4.0 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5  # what ran on the H200, 2026-12-01
  get b tilelang==0.1.15
  # 82.5 MB: too large for one call beside the repository (64 MiB in all), so one tar in 20 MB parts that calls carry
  # back to back (.whl_parts/tilelang.tar.aa, .ab, ... and tilelang.parts, their count; h200.sh installs them once
  # all are on the machine). Not under .whl/: h200.sh installs every .whl/*/ folder a call carries
  rm -rf .whl_parts && mkdir -p .whl_parts
  tar cf - -C .whl a b | split -b 20M - .whl_parts/tilelang.tar.
  ls .whl_parts/tilelang.tar.* | wc -l >.whl_parts/tilelang.parts
  echo ".whl_parts: $(cat .whl_parts/tilelang.parts) parts of tilelang.tar, $(du -sh .whl_parts | cut -f1)"
fi
