#!/usr/bin/env bash
# Fetch the wheels a device call carries (experiments/device/README.md), for the device's Python 3.12 on x86_64:
#   bash experiments/device/fetch_wheels.sh            # .whl/gpu: fla and optuna with what they need (7.4 MB)
#   bash experiments/device/fetch_wheels.sh tilelang   # also .whl/a and .whl/b: GatedDeltaNet's TileLang backward
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
get gpu fla-core==0.6.0 flash-linear-attention==0.6.0 optuna==5.0.0 alembic sqlalchemy mako colorlog greenlet
if [ "${1:-}" = tilelang ]; then
  get a z3-solver apache-tvm-ffi torch-c-dlpack-ext
  get b tilelang
fi
