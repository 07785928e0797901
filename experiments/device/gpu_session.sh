#!/usr/bin/env bash
# Runs on the lent GPU machine (see README "GPU"): restores the Triton cache carried from the last
# run, installs the carried wheels, runs the given command, and archives the Triton cache to $OUT.
#   bash experiments/device/gpu_session.sh WHEEL_DIR -- COMMAND...
set -uo pipefail
wheels="$1"; shift; [ "${1:-}" = "--" ] && shift
export TRITON_CACHE_DIR=$HOME/.triton/cache PYTHONUNBUFFERED=1 HLNAS_OUT="${OUT:-/tmp/out}"
mkdir -p "$TRITON_CACHE_DIR" "$HLNAS_OUT"  # the default location: a warm machine keeps earlier compiles there
if ls .triton_cache/triton_cache.tgz.* >/dev/null 2>&1; then
  cat .triton_cache/triton_cache.tgz.* | tar xzf - -C "$HOME/.triton" && echo "restored triton cache: $(du -sh $TRITON_CACHE_DIR | cut -f1)"
fi
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
"$@"
rc=$?
# keep only what fits the return channel: 16 MB a file
tar czf - -C "$HOME/.triton" cache | split -b 15M - "$HLNAS_OUT/triton_cache.tgz."
ls -la "$HLNAS_OUT"
exit $rc
