#!/usr/bin/env bash
# The device diagnosis of 2026-12-06: every GatedDeltaNet case of the delta-rule probe (delta_capacity_keys.json) failed
# with "CUDA error: misaligned address" inside a compiled step, where the grid's GatedDeltaNet (4 heads) had trained
# before session 30's lean gated norm. Five variants at once, each its own process with CUDA_LAUNCH_BLOCKING=1 (the
# failing kernel named in the traceback), 20 steps: the probe's 1x32-key case solo, solo with the lean norm off, solo
# eager, as 2 replicas; and the grid's GatedDeltaNet 3:1 (its default heads). Logs in $OUT/diag/, one line each at the end.
# Needs fla on PYTHONPATH (h200.sh's /tmp/site).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/diag"
D=(python3 -m experiments.device.diagnose_recall --cases experiments/paper_grid/delta_capacity_keys.json --index 8 --steps 20)
GRID='{"layout": "gated_deltanet:3:1", "residual_init": "zero", "compile": true,
       "mixer_hparams": {"attention": {"input_conv": 4, "input_conv_init": "shift"}}}'
export CUDA_LAUNCH_BLOCKING=1
"${D[@]}" --label solo >"$OUT/diag/solo.log" 2>&1 &
HLNAS_LEAN_GATED_NORM=0 "${D[@]}" --label solo_no_lean >"$OUT/diag/solo_no_lean.log" 2>&1 &
"${D[@]}" --no-compile --label solo_eager >"$OUT/diag/solo_eager.log" 2>&1 &
"${D[@]}" --seeds 0,1 --label replicas >"$OUT/diag/replicas.log" 2>&1 &
python3 -m experiments.device.diagnose_recall --case "$GRID" --steps 20 --label grid_gdn >"$OUT/diag/grid_gdn.log" 2>&1 &
wait
for f in "$OUT"/diag/*.log; do tail -n 1 "$f"; done
