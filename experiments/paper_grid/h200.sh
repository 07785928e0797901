#!/usr/bin/env bash
# The GPU side of the paper grid (docs/gpu.md): one device call, in the repo root of the lent machine:
#   bash experiments/paper_grid/h200.sh STEP...
# steps:
#   warm[:T]        hlnas warm of $SPACE per mixer, in parallel, and check at once
#   check[:T]       every op's fla path against the PyTorch reference (each op its own process), and the GPU tests
#   train_all[:T]   one proxy candidate per mixer trained and scored (experiments/gpu_train_all.py)
#   precision       bf16 vs float32 gradients per mixer (experiments/gpu_model_precision.py)
#   calibrate_by:T  hlnas calibrate of $CAL_SPACE (default $SPACE) into the study database; resumes its stored runs
#   grid_by:T, grid_s1_by:T            the grid's search ($SPACE, study $GRID_STUDY) and its second seed (the same space
#                                      with --set train.seed=1 in study ${GRID_STUDY}_s1, --calibrated-by $GRID_STUDY;
#                                      refused unless $GRID_STUDY's calibration is valid)
#   placement_by:T, placement_s1_by:T  the placement extension ($PLACE_SPACE, study $PLACE_STUDY) and its second seed
#   gpu_tests[:T]   the GPU-marked tests of $GPU_TESTS (those matching $GPU_TESTS_K if set: a pytest -k expression)
#   bench_lm[:T], bench_paper[:T], bench_recall[:T], bench_autotune[:T], bench_decode[:T], bench_overhead[:T]
#                   the benchmarks of experiments/bench (docs/results.md), each capped to leave the closing archive
#                   30 s of CALL_LIMIT
# T in STEP_by:T is seconds from the script's start after which no new trial or run starts.
# STEP/N: that step at N workers; A+B: steps A and B side by side (e.g. grid_by:120/1+grid_s1_by:120/2)
# DRAIN=S (the session's last call): runs in flight when a calibrate_by/grid_by/placement_by step's T passes go on up to S
# seconds more before pausing, so those that finish are stored (a machine that goes back takes paused runs with it):
# S must cover a whole run at this call's WORKERS (processes time-slice the GPU: 4 workers run each about 4x slower)
# Carried from the CPU machine: .whl/gpu (fla, optuna and its needs as wheels), .triton_cache (the Triton
# and inductor caches archived by the previous call), .gpu_state (the study database h200.db and its generation h200.gen, both
# brought back by the previous call: copy both after every call).
# A warm machine keeps /tmp/site, ~/.triton/cache and /tmp/hlnas_state between calls; a fresh one restores
# them from the carried copies, so each call resumes where the last stopped, on this machine or another.
set -uo pipefail
OUT=${OUT:-/tmp/out}
STATE=${HLNAS_STATE:-/tmp/hlnas_state}  # HLNAS_STATE: tests only
mkdir -p "$OUT/logs" "$STATE"
export TRITON_CACHE_DIR=$HOME/.triton/cache PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# inductor's caches (FX graphs, AOT autograd, its own Triton kernels: the recall model's compiled blocks) beside
# Triton's, so they come back and are carried with it: every call of 2026-12-04 landed on a fresh machine, and each
# case spent about 48 s building and compiling before its first step
export TORCHINDUCTOR_CACHE_DIR=$HOME/.triton/inductor
# one Triton config per kernel: a full fla autotune compile of the grid's kernels took > 5 minutes of a lease
export HLNAS_TRITON_AUTOTUNE=${HLNAS_TRITON_AUTOTUNE:-quick}
DB=sqlite:///$STATE/h200.db
# the calibrated grid and its placement extension (the studies of results/h200_2026-12-05f.db); another space: a new
# study name
SPACE=${SPACE:-search_spaces/paper_grid_h200_lr.yaml} GRID_STUDY=${GRID_STUDY:-paper_grid_h200_lr}
PLACE_SPACE=${PLACE_SPACE:-experiments/paper_grid/placement_h200_lr.yaml} PLACE_STUDY=${PLACE_STUDY:-placement_h200_lr}
t0=$(date +%s); say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

if [ ! -d "$TRITON_CACHE_DIR" ] && ls .triton_cache/triton_cache.tgz.* >/dev/null 2>&1; then
  mkdir -p "$HOME/.triton" && cat .triton_cache/triton_cache.tgz.* | tar xzf - -C "$HOME/.triton"
  say "restored triton cache $(du -sh "$TRITON_CACHE_DIR" | cut -f1)"
fi
if [ ! -d "$TORCHINDUCTOR_CACHE_DIR" ] && ls .triton_cache/inductor_cache.tgz.* >/dev/null 2>&1; then
  mkdir -p "$HOME/.triton" && cat .triton_cache/inductor_cache.tgz.* | tar xzf - -C "$HOME/.triton"
  say "restored inductor cache $(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1)"
fi
mkdir -p "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR"
# the carried wheels, once per machine (.whl/gpu; tilelang in parts): experiments/device/site.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device/site.sh"
# The study database: the machine's own copy (a warm machine continues the last call, paused runs included) unless the
# carried one is newer. Each call ends by raising the generation stamped beside it (h200.gen, brought back with
# h200.db): on 2026-12-03 a fresh machine restored a stale carried copy and the next call, on that machine, kept it
# over the newer one carried, so two calls' runs landed in two databases.
gen() { [ -f "$1" ] && cat "$1" || echo "${2:-0}"; }
carried=$(gen .gpu_state/h200.gen 0) mine=$([ -f $STATE/h200.db ] && gen $STATE/h200.gen 0 || echo -1)
if [ -f .gpu_state/h200.db ] && [ "$carried" -gt "$mine" ]; then
  cp .gpu_state/h200.db $STATE/h200.db && chmod u+w $STATE/h200.db && echo "$carried" >$STATE/h200.gen
  say "restored study database (generation $carried; this machine had $([ "$mine" -lt 0 ] && echo none || echo "$mine"))"
elif [ -f $STATE/h200.db ] && [ "$carried" -lt "$mine" ]; then
  say "kept this machine's study database (generation $mine; the carried one is $carried)"
fi
export PYTHONPATH=$SITE:$PWD
# a fresh machine (the last one went back after 30 s idle) has nothing installed: say so at once
python3 -c "import optuna" 2>/dev/null || { say "optuna (and fla) not installed on this machine: carry .whl/gpu in this call (docs/gpu.md)"; exit 2; }
[ -f $STATE/torch_ops ] && export HLNAS_TORCH_OPS=$(cat $STATE/torch_ops)
NG=$(python3 -c 'import torch; print(max(1, torch.cuda.device_count()))')
say "$(nvidia-smi -L | head -4 | tr '\n' ' ') ($NG GPUs)"

# the GPU's utilisation every 2 s, for the GPU-seconds each call spent (runs share the GPU by time-slicing)
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 2 >"$OUT/logs/gpu_util.csv" 2>/dev/null &
UTIL_PID=$!

PIDS=()
WARM_MIXERS=${WARM_MIXERS:-"transformer hgrn retnet gla hgrn2 deltanet gated_deltanet"}  # $SPACE's mixers + the control
warm_mixers() {  # hlnas warm: one short trial per mixer at $SPACE's own shapes, in parallel (Triton compiles on the CPU)
  local i=0
  for m in $WARM_MIXERS; do
    CUDA_VISIBLE_DEVICES=$((i % NG)) timeout "$1" python3 -m hlnas warm --space $SPACE --mixers $m \
      >"$OUT/logs/warm_$m.log" 2>&1 & PIDS+=($!); i=$((i + 1))
  done
}
check_ops() {  # every op in its own process (a CUDA fault in one must not poison the others), all GPUs
  local i=0
  for op in attention hgrn simple_gla simple_gla@g_gamma gla delta_rule gated_delta_rule; do
    CUDA_VISIBLE_DEVICES=$((i % NG)) timeout "$1" python3 -m experiments.gpu_check --ops $op \
      --out "$OUT/logs/check_${op/@/_}.md" >"$OUT/logs/check_${op/@/_}.log" 2>&1 & PIDS+=($!); i=$((i + 1))
  done
  CUDA_VISIBLE_DEVICES=$((i % NG)) timeout "$1" python3 -m pytest -q -rP -m gpu tests/kernels tests/test_model_gpu.py tests/score/test_recall_proxy.py tests/test_train_gpu.py tests/test_bench_gpu_scripts.py \
    -p no:cacheprovider >"$OUT/logs/pytest_gpu.log" 2>&1 & PIDS+=($!)
}
check_done() {
  for p in "${PIDS[@]}"; do wait $p; done; PIDS=()
  # an op whose fla kernel failed its check here runs on the PyTorch path in everything that follows
  python3 - "$OUT/logs" >$STATE/torch_ops <<'PY'
import glob, json, sys
bad = set()
for f in glob.glob(sys.argv[1] + "/check_*.json"):
    for r in json.load(open(f)):
        if not r.get("ok"):
            bad.add(r["op"].split("@")[0])
print(",".join(sorted(bad)))
PY
  export HLNAS_TORCH_OPS=$(cat $STATE/torch_ops)
  say "check done; ops kept on PyTorch: '$HLNAS_TORCH_OPS'"; tail -n 3 "$OUT/logs/pytest_gpu.log"
  cat "$OUT"/logs/check_*.md | grep "^| [a-z]"
}
train_all() {
  CUDA_VISIBLE_DEVICES=0 timeout "${1:-150}" python3 experiments/gpu_train_all.py --space $SPACE --tokens 491520 --quick-score \
    --mixers hgrn,retnet,gla,hgrn2,deltanet,gated_deltanet,mamba2 --out "$OUT/logs/gpu_train.md" >"$OUT/logs/train_all.log" 2>&1
  say "train_all rc=$?"; grep "^| " "$OUT/logs/gpu_train.md" 2>/dev/null
}
search() {  # $1 space, $2 study, $3 seconds before no new trial starts, $4 hard stop (SIGTERM: running trials re-queued),
            # then extra hlnas search arguments (the same on every call of a study: a resume checks its space)
  local resume=() workers=${WORKERS:-$((NG * 4))}  # trials sharing the GPUs (one process each)
  python3 -c "import optuna,sys; optuna.load_study(study_name='$2', storage='$DB')" 2>/dev/null && resume=(--resume)
  [ -n "${RETRY_FAILED:-}" ] && [ ${#resume[@]} -gt 0 ] && resume+=(--retry-failed)  # after fixing what failed
  timeout -s TERM "$4" python3 -m hlnas search --space "$1" --storage $DB --study "$2" "${resume[@]}" \
    --executor processes --workers $workers --timeout "$3" --drain ${DRAIN:-0} --no-progress \
    "${@:5}" >>"$OUT/logs/search_$2.log" 2>&1
  say "search $2 rc=$? ($workers workers): $(grep -c " done " "$OUT/logs/search_$2.log") trials done in this call's log"
  grep -E "failed|infeasible" "$OUT/logs/search_$2.log" | cut -c1-200 | tail -5
  # where the study stands now ("N complete, M waiting (target T trials)"): the session sees its progress in the tail
  python3 -m hlnas status --storage $DB --study "$2" 2>/dev/null | head -1
}

# A search's hard stop: 60 s after its last start, but never past CALL_LIMIT (the device call's limit) less the
# time the closing archive needs. A call killed by its limit brings back no database and no logs archive.
CALL_LIMIT=${CALL_LIMIT:-600}
# the hard stop of a search or calibration given T: T, DRAIN, then 60 s for the runs to pause and the study to close
hard_stop() { local cap=$(( CALL_LIMIT - 20 - ($(date +%s) - t0) )) h=$(( $1 + ${DRAIN:-0} + 60 )); echo $(( h < cap ? h : cap )); }
# a benchmark's timeout: $1 seconds, but never past CALL_LIMIT less 30 s for the closing archive
# (at least 1: `timeout 0` would mean no limit at all, and a call killed by the device brings nothing back)
cap() { local c=$(( CALL_LIMIT - 30 - ($(date +%s) - t0) )); c=$(( $1 < c ? $1 : c )); echo $(( c < 1 ? 1 : c )); }

# one step; "STEP/N" runs it at N workers (its own WORKERS, e.g. the one trial left of a study beside another study)
run_step() {
  local step=$1
  if [[ $step == */* ]]; then local WORKERS=${step##*/}; step=${step%/*}; fi
  case $step in
    warm*) [[ $step == warm:* ]] && t=${step#warm:} || t=300; warm_mixers $t; check_ops $t; check_done ;;  # compile + check at once
    check*) [[ $step == check:* ]] && t=${step#check:} || t=200; check_ops $t; check_done ;;
    train_all*) train_all "${step#train_all:}" ;;
    precision) timeout 120 python3 -m experiments.gpu_model_precision --out "$OUT/logs/gpu_model_precision.md" >"$OUT/logs/precision.log" 2>&1
               say "precision rc=$?"; grep "^| " "$OUT/logs/gpu_model_precision.md" ;;
    grid_by:*)  # no new trial after T seconds from the start of this script, whatever ran before
      left=$(( ${step#grid_by:} - ($(date +%s) - t0) ))
      # if/else, not `&& search || say`: search ends with a grep that finds no failure (rc 1), and every grid call of
      # 2026-12-05 that ran printed "no time left" after its trials
      if [ $left -gt 30 ]; then search $SPACE $GRID_STUDY $left $(hard_stop $left); else say "no time left for the grid"; fi ;;
    grid_s1_by:*)  # seed 1 of the grid: its own study; calibration already judged the protocol on seeds 0 and 1
      left=$(( ${step#grid_s1_by:} - ($(date +%s) - t0) ))
      cal=$(python3 - "$GRID_STUDY" "$DB" 2>/dev/null <<'PY'
import sys, optuna
s = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2])
print((s.user_attrs.get("hlnas_calibration") or {}).get("status"))
PY
)
      if [ "$cal" != valid ]; then say "grid_s1: $GRID_STUDY's calibration is '${cal:-absent}', not valid: seed 1 not started"
      elif [ $left -gt 30 ]; then search $SPACE ${GRID_STUDY}_s1 $left $(hard_stop $left) --set train.seed=1 --calibrated-by $GRID_STUDY
      else say "no time left for the grid's seed 1"; fi ;;
    placement_by:*|placement_s1_by:*)
      # placement_s1_by: the placement's second seed, study ${PLACE_STUDY}_s1 with --set train.seed=1, so both seeds can
      # run in one call (placement_by:T/2+placement_s1_by:T/2) without changing PLACE_STUDY/PLACE_SET
      local study=$PLACE_STUDY set=${PLACE_SET:-} from=${PLACE_RESULTS_FROM:-}
      [[ $step == placement_s1_by:* ]] && study=${PLACE_STUDY}_s1 set=train.seed=1 from=${PLACE_S1_RESULTS_FROM:-}
      left=$(( ${step#*_by:} - ($(date +%s) - t0) ))
      # PLACE_CALIBRATED_BY: the grid study whose calibration vouches for the same protocol (hlnas search --calibrated-by);
      # PLACE_RESULTS_FROM / PLACE_S1_RESULTS_FROM: the grid study of the same seed, whose trained layouts (the paper
      # cells) each seed adopts instead of training them again (hlnas search --results-from)
      if [ $left -gt 30 ]; then search $PLACE_SPACE $study $left $(hard_stop $left) ${set:+--set $set} \
        ${PLACE_CALIBRATED_BY:+--calibrated-by $PLACE_CALIBRATED_BY} ${from:+--results-from $from}
      else say "no time left for placement ($study)"; fi ;;
    calibrate_by:*)  # the recall protocol's controls: no run starts after T, and those in flight pause at their next
                     # check (kept on this machine: a back-to-back call continues them); the hard stop 60 s later
                     # loses only a run that had not reached a check by then
      left=$(( ${step#calibrate_by:} - ($(date +%s) - t0) ))
      # T already passed (the machine's start took it, or a step before): say so and go on, as grid_by does; hlnas
      # calibrate would refuse --timeout 0 and the call would bring back nothing new
      if [ $left -lt 1 ]; then say "no time left for the calibration: T=${step#calibrate_by:} s passed at $(( $(date +%s) - t0 )) s"; return 0; fi
      export HLNAS_RECALL_PROGRESS=1  # a line per validation check: a run killed by the hard stop still tells
      # CAL_SPACE defaults to the grid's space and study, so the grid reuses the calibration's seed-0 runs
      timeout -s TERM $(hard_stop $left) python3 -m hlnas calibrate ${CAL_SPACE:-$SPACE} --study ${CAL_STUDY:-$GRID_STUDY} \
        --storage $DB --executor processes --workers ${WORKERS:-5} --no-progress \
        --timeout $left --drain ${DRAIN:-0} >>"$OUT/logs/calibrate.log" 2>&1
      say "calibrate rc=$?"; grep -A60 "^role" "$OUT/logs/calibrate.log" | tail -60 ;;
    bench_lm*)  # issue #22 point 1: the LM half's eager vs CUDA-graph vs compiled-in-graph step at the proxy shape
      [[ $step == bench_lm:* ]] && t=${step#bench_lm:} || t=300
      timeout $(cap $t) python3 -m experiments.bench.lm_step --out "$OUT/logs" >"$OUT/logs/bench_lm.log" 2>&1
      say "bench_lm rc=$?"; cat "$OUT"/logs/lm_step_*.md 2>/dev/null ;;
    bench_paper*)  # issue #22 points 2-3: paper-340m training speed against plain PyTorch, with the per-op profile
      [[ $step == bench_paper:* ]] && t=${step#bench_paper:} || t=540
      timeout $(cap $t) python3 -m experiments.bench.paper_scale --out "$OUT/logs" --profile ${BENCH_ONLY:+--only $BENCH_ONLY} \
        ${BENCH_MODE:+--mode $BENCH_MODE} >"$OUT/logs/bench_paper.log" 2>&1
      say "bench_paper rc=$?"; cat "$OUT"/logs/paper_scale_h[0-9]*_*.md 2>/dev/null ;;
    bench_recall*)  # issues #20 point 7 and #21: the recall model's training step at the calibrating space's shape
                    # (CUDA graph, as the proxy) against a plain-PyTorch Transformer of that shape, with the per-op
                    # profile: what limits a recall-proxy GPU-second (about 2 % MFU at batch 64)
      [[ $step == bench_recall:* ]] && t=${step#bench_recall:} || t=240
      timeout $(cap $t) python3 -m experiments.bench.paper_scale --recall-space ${CAL_SPACE:-$SPACE} --mode graph --profile \
        --only ${BENCH_ONLY:-matmul,plain,transformer,gla:3:1,hgrn:pure,retnet:pure,gla:pure,hgrn2:pure,deltanet:pure,gated_deltanet:pure} \
        ${RECALL_BATCH:+--batch $RECALL_BATCH} --out "$OUT/logs" >"$OUT/logs/bench_recall.log" 2>&1
      say "bench_recall rc=$?"; cat "$OUT"/logs/recall_step_h*_*.md 2>/dev/null ;;
    bench_autotune*)  # issue #22 point 2: quick vs full Triton autotune, compile seconds and speed side by side
      [[ $step == bench_autotune:* ]] && t=${step#bench_autotune:} || t=540
      t=$(cap $t)
      # AUTOTUNE_RECALL=1: at the recall model's shape ($CAL_SPACE or $SPACE, graph steps, as bench_recall), where
      # fla's kernels run on small heads (GLA's dv backward kernel: 13% of the compiled GLA 3:1 recall step, 2026-12-06)
      [ "${AUTOTUNE_RECALL:-0}" = 1 ] && shape="--recall-space ${CAL_SPACE:-$SPACE} --mode graph" || shape=
      timeout $t python3 -m experiments.bench.paper_scale --out "$OUT/logs" --autotune-compare $shape \
        --only ${BENCH_ONLY:-gla:3:1} --child-timeout $(( t / 2 - 10 )) >"$OUT/logs/bench_autotune.log" 2>&1
      say "bench_autotune rc=$?"; cat "$OUT"/logs/paper_scale_autotune_*.md 2>/dev/null ;;
    bench_decode*)  # issue #22 point 5: KV + state bytes held after decoding 4k and 32k tokens vs the cost model
      [[ $step == bench_decode:* ]] && t=${step#bench_decode:} || t=300
      timeout $(cap $t) python3 -m experiments.bench.decode_memory --out "$OUT/logs" ${DECODE_MIXERS:+--mixers $DECODE_MIXERS} \
        >"$OUT/logs/bench_decode.log" 2>&1
      say "bench_decode rc=$? (1: a row differs from the cost model)"; cat "$OUT"/logs/decode_memory_*.md 2>/dev/null ;;
    bench_overhead*)  # issue #22 point 4: trial start to first training step, cold processes first, then a warm worker
      [[ $step == bench_overhead:* ]] && t=${step#bench_overhead:} || t=420
      timeout $(cap $t) python3 -m experiments.bench.trial_overhead --out "$OUT/logs" --space $SPACE --child-timeout 120 \
        ${OVERHEAD_MODES:+--modes $OVERHEAD_MODES} >"$OUT/logs/bench_overhead.log" 2>&1
      say "bench_overhead rc=$?"; cat "$OUT"/logs/trial_overhead_*.md 2>/dev/null ;;
    gpu_tests*)  # the GPU-marked tests of $GPU_TESTS only (default: fla's l2norm and the compiled conv's shifted
                 # multiply-adds, the models (test_model_gpu's bf16 check), the head loss, the captured and compiled LM
                 # steps with them inside)
      [[ $step == gpu_tests:* ]] && t=${step#gpu_tests:} || t=150
      # SIGINT, not TERM: pytest stops at the test in progress and still prints the failures so far (on 2026-12-06 a
      # timed-out run printed only its progress dots, and which test failed, and why, was lost); KILL 15 s later
      # GPU_TESTS is word-split (paths, node ids); GPU_TESTS_K, a pytest -k expression, goes through as one argument
      local limit k=(); limit=$(cap $t); [ -n "${GPU_TESTS_K:-}" ] && k=(-k "$GPU_TESTS_K")
      timeout -s INT -k 15 $(( limit > 16 ? limit - 15 : 1 )) python3 -m pytest -q -rfEP -m gpu ${GPU_TESTS:-tests/kernels/test_l2norm.py tests/kernels/test_causal_conv1d.py tests/test_model_gpu.py tests/test_head_loss.py tests/test_train_gpu.py} \
        "${k[@]}" -p no:cacheprovider >"$OUT/logs/gpu_tests.log" 2>&1
      rc=$?; say "gpu_tests rc=$rc"; grep -E "^(FAILED|ERROR) " "$OUT/logs/gpu_tests.log" | cut -c1-300; tail -n 2 "$OUT/logs/gpu_tests.log" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
}
# "A+B": steps A and B at once (two studies' searches side by side: on 2026-12-05 seed 0's last trial ran alone
# before seed 1's, and a process alone leaves its compile seconds idle on the GPU); the next step waits for both.
# Each runs in a subshell: what a step sets up for later ones (check's ops kept on PyTorch) goes in a step of its own
for step in "$@"; do
  if [[ $step == *+* ]]; then
    IFS=+ read -ra together <<<"$step"; pids=()
    for s in "${together[@]}"; do run_step "$s" & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p"; done  # their rc, as a lone step's, is not the call's
  else
    run_step "$step"
  fi
done

kill $UTIL_PID 2>/dev/null
# bring back: the study database and logs (one archive), and the Triton cache in 15 MB parts (the return
# channel takes 8 files of 16 MB)
if [ -f $STATE/h200.db ]; then
  echo $(( $(gen $STATE/h200.gen 0) + 1 )) >$STATE/h200.gen
  cp $STATE/h200.db "$OUT/h200.db" && cp $STATE/h200.gen "$OUT/h200.gen"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
# CACHE_BACK=0: not the Triton cache (a call followed at once by another on the same machine): 19 MB coming back
# delayed the next call past the machine's 30 s idle window on 2026-12-03 (likely, not proven)
if [ "${CACHE_BACK:-1}" = 1 ]; then
  tar czf - -C "$HOME/.triton" cache | split -b 15M - "$OUT/triton_cache.tgz."
  n=$(ls "$OUT"/triton_cache.tgz.* | wc -l)
  [ "$n" -gt 3 ] && { say "triton cache too large to bring back ($(du -sh $HOME/.triton/cache | cut -f1)); dropped"; rm -f "$OUT"/triton_cache.tgz.*; }
  # inductor's in one part at most (the return channel's 8 files): a larger one stays behind, Triton's still comes
  tar czf - -C "$HOME/.triton" inductor | split -b 15M - "$OUT/inductor_cache.tgz."
  n=$(ls "$OUT"/inductor_cache.tgz.* | wc -l)
  [ "$n" -gt 1 ] && { say "inductor cache too large to bring back ($(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1)); dropped"; rm -f "$OUT"/inductor_cache.tgz.*; }
fi
ls -la "$OUT"; say done
