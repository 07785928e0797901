#!/usr/bin/env bash
# One device call of the proxy screen (README.md here): bash experiments/proxy/gpu.sh STEP ARGS
#   subset PROTOCOL SEED   the subset screen: the control, 6:1 and 3:1 of the four Table 7 mixers, pure DeltaNet (10)
#   cells PROTOCOL SEED    the selection rule's 21 cells: the Transformer and every ratio of the Table 7 mixers
#   probe                  point 1's probes: fla's GLA kernel at strong decays, and HGRN-2 3:1 seed 0 with fla's
#                          path eager (no graph, no compile) and with only GLA's op on PyTorch
# Carry .whl/gpu (fetch_wheels.sh), and from the second call on .gpu_state/proxy (the rows earlier calls brought back:
# a step skips the cases they hold on the same kind of card). MAX: start at most that many cases. Runs share the GPU as processes (NPROC,
# default: every case started); each pauses by DEADLINE seconds (default 470: inside a call's 600), keeping its state in
# .screen_state, so the next call on the same warm machine continues it (a fresh machine starts it over). Rows land in
# $OUT/proxy/screen_CARD.jsonl: copy $OUT/proxy to .gpu_state/proxy (and the rows to results/) before the next call.
set -uo pipefail
STEP=${1:-}
OUT=${OUT:-/tmp/out} DEADLINE=${DEADLINE:-470} PY=${PYTHON:-python3}
HERE=experiments/proxy
source experiments/device/site.sh
# one inductor compile worker per process: a screen runs a dozen processes, each of which would otherwise start a
# pool as large as the machine's cores
export PYTHONUNBUFFERED=1 HLNAS_TRITON_AUTOTUNE=${HLNAS_TRITON_AUTOTUNE:-quick} \
  TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-1}
mkdir -p "$OUT/proxy"
# one rows file per kind of card (screen_nvidia_h100_80gb_hbm3.jsonl): the same cases run again on another card (the
# rule's point 6), and a call skips only what its own kind of card has done
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '_')
card=${card%_}; rows=$OUT/proxy/screen_${card:-cpu}.jsonl
[ -s "$rows" ] || { [ -f ".gpu_state/proxy/${rows##*/}" ] && cp ".gpu_state/proxy/${rows##*/}" "$rows"; }
echo "proxy gpu.sh $STEP: $(nvidia-smi -L 2>/dev/null | head -1)"
case $STEP in
  subset|cells)
    [ $# -eq 3 ] || { echo "gpu.sh $STEP: give PROTOCOL SEED"; exit 2; }
    cases=$($PY $HERE/screen.py plan "$STEP" "$2" "$3" "$rows") || exit 2
    # MAX: start at most this many of them (the rest wait for the next call, instead of being cut short in this one)
    [ -n "${MAX:-}" ] && cases=$(tr ' ' '\n' <<<"$cases" | head -n "$MAX" | tr '\n' ' ')
    [ -n "$cases" ] || { echo "every case of $STEP $2 seed $3 is done"; $PY $HERE/screen.py table "$rows"; exit 0; }
    n=$(wc -w <<<"$cases")
    $PY $HERE/screen.py run "$rows" "$DEADLINE" "${NPROC:-$n}" $cases 2>"$OUT/proxy/screen_$STEP.err"
    $PY $HERE/screen.py table "$rows" ;;
  probe)
    $PY $HERE/reproduce.py kernels "$OUT/proxy/kernels.jsonl" >"$OUT/proxy/kernels.log" 2>&1 &
    REPRO_GRAPH=0 REPRO_COMPILE=0 $PY $HERE/reproduce.py run fla_eager hgrn2 3:1 0 $((DEADLINE - 60)) \
      "$OUT/proxy/repro.jsonl" >"$OUT/proxy/repro_eager.log" 2>&1 &
    HLNAS_TORCH_OPS=gla $PY $HERE/reproduce.py run fla_but_gla hgrn2 3:1 0 $((DEADLINE - 60)) \
      "$OUT/proxy/repro.jsonl" >"$OUT/proxy/repro_gla.log" 2>&1 &
    wait
    tail -n 3 "$OUT"/proxy/*.log ;;
  *) echo "gpu.sh: unknown step '$STEP'; allowed: subset, cells, probe"; exit 2 ;;
esac
