#!/usr/bin/env bash
# The grid's whole CPU analysis after a session's GPU calls, in one command (issue #20 points 4, 6 and 7; #23 point 3):
#   bash experiments/paper_grid/analyse.sh DB OUTDIR [GPU_UTIL_CSV ...]
# DB: the study database the calls brought back (read from a copy: nothing here writes to it); OUTDIR: the session's
# results folder; the CSVs: every call's logs/gpu_util.csv, so collect.py measures each trial's share of the GPU.
# Env: G (the grid's study, seed 1 in ${G}_s1), SP (its space), W (the calls' WORKERS, for gpu_s_est), SEEDS (the
# tabular benchmark's seeds per sampler), MISSING (error, or infeasible while the grid is partial).
# Writes into OUTDIR: grid.csv, compare.md, grid_seeds.png, take_off.md and .png (the 24:1 and 12:1 runs' curves),
# budget_whatif.md (the grid's verdicts and cost under shorter recall budgets), figures/ (hlnas report, seed 0), tabular/ (each seed),
# mf_replay/ (the rung scheduler replayed on seed 0's curves). Every step runs, whatever an earlier one said; the rc of
# each is printed, and the script's is the first failure's.
# PLACE=<study> (seed 1 in <study>_s1; PSP: its space) analyses a placement study instead (issue #20 points 5 and 6):
# placement.csv (collect.py; the lender's calibration runs stand in for rows not trained yet), placement.md and .png,
# take_off.md and .png (per placement), tabular/ (each seed) and figures/ (hlnas report, seed 0).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: bash $0 DB OUTDIR [GPU_UTIL_CSV ...]" >&2; exit 2; }
DB=$1 D=$2; shift 2
[ -f "$DB" ] || { echo "analyse.sh: no study database at $DB" >&2; exit 2; }
G=${G:-paper_grid_h200_lr} SP=${SP:-search_spaces/paper_grid_h200_lr.yaml} W=${W:-3} SEEDS=${SEEDS:-10}
MISSING=${MISSING:-infeasible}
PY=${PYTHON:-python}
mkdir -p "$D"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$DB" "$tmp/h.db"; S=sqlite:///$tmp/h.db
rc=0
step() {  # name, then the command
  local name=$1; shift
  echo "== $name: $*"
  "$@"; local r=$?
  echo "== $name rc=$r"; [ $r -ne 0 ] && [ $rc -eq 0 ] && rc=$r
  return 0
}
tabular() {  # the tabular benchmark on each seed's rows: $1 the space, $2 the collected table
  for s in 0 1; do
    step "tabular seed $s" $PY experiments/paper_grid/tabular_bench.py --no-paper --seed $s --seeds "$SEEDS" --space "$1" \
      --objectives recall_auc,kv_cache_bytes --missing "$MISSING" --table "$2" --out "$D/tabular"
  done
}
if [ -n "${PLACE:-}" ]; then
  PSP=${PSP:-experiments/paper_grid/placement_h200_lr.yaml}
  step collect $PY -m experiments.paper_grid.collect --storage "$S" --study "$PLACE" --seed-study "${PLACE}_s1" \
    --concurrency "$W" ${1:+--util "$@"} --out "$D/placement.csv"
  step placement $PY -m experiments.paper_grid.placement --table "$D/placement.csv" --out "$D"
  step "take-off" $PY -m experiments.paper_grid.take_off --storage "$S" --study "$PLACE" --seed-study "${PLACE}_s1" \
    --ratios 6:1,3:1 --by-placement --out "$D"
  tabular "$PSP" "$D/placement.csv"
  step report $PY -m hlnas report --storage "$S" --study "$PLACE" --out "$D/figures"
  exit $rc
fi
step collect $PY -m experiments.paper_grid.collect --storage "$S" --study "$G" --seed-study "${G}_s1" --concurrency "$W" \
  ${1:+--util "$@"} --out "$D/grid.csv"
step compare $PY experiments/paper_grid/compare.py --table "$D/grid.csv" --out "$D/compare.md"
step figure $PY -m experiments.paper_grid.grid_figure --table "$D/grid.csv" --out "$D/grid_seeds.png"
step "take-off" $PY -m experiments.paper_grid.take_off --storage "$S" --study "$G" --seed-study "${G}_s1" --out "$D"
step "budget what-if" $PY -m experiments.paper_grid.budget_whatif --storage "$S" --study "$G" --seed-study "${G}_s1" \
  --table "$D/grid.csv" --budgets 1000,1500,2000,2500,3000,4000 --out "$D/budget_whatif.md"
step report $PY -m hlnas report --storage "$S" --study "$G" --out "$D/figures"
tabular "$SP" "$D/grid.csv"
step "mf replay" $PY -m hlnas bench-samplers --study "$G" --storage "$S" --missing "$MISSING" --out "$D/mf_replay"
exit $rc
