#!/usr/bin/env bash
# One device call of the LM experiments on real text: bash experiments/lm_gpu.sh STEP [options for the script]
#   STEP budget: experiments/lm_budget.py (the token budget at which the val-loss ranking holds)
#   STEP grid:   experiments/lm_grid.py at TOKENS (lm_budget's pick; default 2M) (the paper's LM findings)
# Carry: corpora/english-large (the built corpus: git-ignored, so named in carry), .whl/gpu (fla and its needs as wheels,
# docs/gpu.md), and from the second call on .gpu_state/lm (the runs the previous calls brought back);
# .triton_cache too (the 64 MiB hold under 8 MB of repository, 15.2 MiB of corpus, 9.2 MB of wheels and the cache).
# Each call resumes the step's runs, stops starting runs at LIMIT seconds (default 520: inside a call's 600), and
# leaves $OUT/lm/STEP/runs.jsonl (every finished run so far) and the step's report beside it: copy $OUT/lm to
# .gpu_state/lm before the next call. Knobs: WORKERS (runs sharing the GPU as processes, default 4), CORPUS.
set -uo pipefail
STEP=${1:-}
OUT=${OUT:-/tmp/out} LIMIT=${LIMIT:-520} WORKERS=${WORKERS:-4} CORPUS=${CORPUS:-corpora/english-large} TOKENS=${TOKENS:-2M}
PY=${PYTHON:-python3}
case $STEP in
  budget) args=(-m experiments.lm_budget --out "$OUT/lm/budget") ;;
  grid) args=(-m experiments.lm_grid --tokens "$TOKENS" --out "$OUT/lm/grid") ;;
  *) echo "lm_gpu.sh: unknown step '$STEP'; allowed: budget, grid"; exit 2 ;;
esac
if [ ! -f "$CORPUS/manifest.json" ]; then
  echo "lm_gpu.sh: no built corpus at $CORPUS: build it on the CPU machine (hlnas corpus build ${CORPUS##*/} --fetch) and carry it"
  exit 2
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HLNAS_TRITON_AUTOTUNE=${HLNAS_TRITON_AUTOTUNE:-quick}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache} TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$HOME/.triton/inductor}
for c in triton inductor; do  # a carried .triton_cache (h200.sh's archives), once per machine: kernels start compiled
  dir=$TRITON_CACHE_DIR; [ $c = inductor ] && dir=$TORCHINDUCTOR_CACHE_DIR
  if [ ! -d "$dir" ] && ls .triton_cache/${c}_cache.tgz.* >/dev/null 2>&1; then
    mkdir -p "$HOME/.triton" && cat .triton_cache/${c}_cache.tgz.* | tar xzf - -C "$HOME/.triton"
  fi
done
source experiments/device/site.sh
mkdir -p "$OUT/lm/$STEP"
# the runs of earlier calls: the carried copy, unless this (warm) machine's own is already there
if [ -f ".gpu_state/lm/$STEP/runs.jsonl" ] && [ ! -s "$OUT/lm/$STEP/runs.jsonl" ]; then
  cp ".gpu_state/lm/$STEP/runs.jsonl" "$OUT/lm/$STEP/runs.jsonl"
fi
echo "lm_gpu.sh $STEP: $(wc -l <"$OUT/lm/$STEP/runs.jsonl" 2>/dev/null || echo 0) runs already done; $(nvidia-smi -L 2>/dev/null | head -1)"
timeout $((LIMIT + 60)) $PY "${args[@]}" --workers "$WORKERS" --deadline "$LIMIT" "${@:2}"
rc=$?
[ $rc -eq 124 ] && $PY "${args[@]}" --analyse "${@:2}"  # cut by the outer limit: the report from the runs kept
exit $rc
