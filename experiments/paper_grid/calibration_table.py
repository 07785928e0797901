"""A stored calibration -> one row per control run with its GPU-seconds (issue #20 point 3's committed table).

    python -m experiments.paper_grid.calibration_table --storage sqlite:///.gpu_state/h200.db --study paper_grid_h200_lr \
        --util experiments/results/calibration_h200_lr_2026-12-04/*gpu_util*.csv \
        --out experiments/results/calibration_h200_lr_2026-12-04/runs

writes ``runs.csv`` and ``runs.md``: per run its recall at the training length beside its no-recall baseline, the
corrected recall, the graded measure (``recall_auc``), steps, steps to target, wall seconds (``mqar_s``, and the LM
half's ``train_wall_s`` for the seed-0 runs that are the grid's trials) and ``gpu_s``: the GPU's sampled utilisation
shared among the runs active at each sample (``gpu_share``). Pass every utilisation file of the calls the runs ran in.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
from pathlib import Path

from experiments.paper_grid.gpu_share import attribute, calibration_spans, read_util
from hlnas.errors import HlnasError
from hlnas.search.storage import load_study

COLUMNS = ["key", "role", "mixer", "ratio", "seed", "layout", "recall_raw", "recall_baseline", "recall", "recall_auc",
           "mqar_steps_done", "mqar_steps_to_target", "mqar_s", "train_wall_s", "gpu_s", "started_utc"]


def rows(study, util_paths=()) -> tuple[list[dict], dict | None]:
    """The calibration's stored runs in the verdict's order (control, then per mixer pure, 3:1, 6:1; seed by seed),
    with ``gpu_s`` where utilisation files are given; and the utilisation totals (None without files)."""
    cal = study.user_attrs.get("hlnas_calibration")
    if not cal or not cal.get("runs"):
        raise HlnasError(f"study '{study.study_name}' has no stored calibration runs (hlnas_calibration)")
    spans, out = calibration_spans(study), []
    for key, run in cal["runs"].items():
        row = {c: run.get(c) for c in COLUMNS}
        if key in spans:
            row["started_utc"] = dt.datetime.fromtimestamp(spans[key][0], dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        out.append(row)
    totals = None
    if util_paths:
        share, totals = attribute(spans, read_util(util_paths))
        for row in out:
            row["gpu_s"] = share.get(row["key"])
    roles = {"control": 0, "pure": 1, "hybrid": 2}
    out.sort(key=lambda r: (r["role"] != "control", r["mixer"], roles.get(r["role"], 3), r["seed"]))
    return out, totals


def _fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def markdown(data: list[dict], totals: dict | None) -> str:
    lines = ["| run | ratio | recall [no-recall] | corrected | recall_auc | steps | to target | mqar_s | LM s | gpu_s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data:
        lines.append(f"| {r['key']} | {r['ratio'] or '-'} | {_fmt(r['recall_raw'])} [{_fmt(r['recall_baseline'])}] | "
                     f"{_fmt(r['recall'])} | {_fmt(r['recall_auc'])} | {_fmt(r['mqar_steps_done'])} | "
                     f"{_fmt(r['mqar_steps_to_target'])} | {_fmt(r['mqar_s'], '.0f')} | {_fmt(r['train_wall_s'], '.0f')} | "
                     f"{_fmt(r['gpu_s'], '.0f')} |")
    known = [r["gpu_s"] for r in data if r["gpu_s"] is not None]
    if totals is not None:
        lines += ["", f"GPU-seconds: {totals['sampled']:.0f} busy in the utilisation files, {totals['attributed']:.0f} "
                      f"shared among {len(known)} runs (sum of gpu_s {sum(known):.0f}), {totals['unattributed']:.0f} "
                      "while no stored run was active (start, installs, runs cut and never stored)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--storage", required=True)
    ap.add_argument("--study", required=True)
    ap.add_argument("--util", nargs="*", default=[], help="h200.sh's gpu_util.csv files of the calls the runs ran in")
    ap.add_argument("--out", help="write OUT.csv and OUT.md (else print the markdown)")
    args = ap.parse_args(argv)
    try:
        data, totals = rows(load_study(args.storage, args.study), args.util)
    except (HlnasError, ValueError, OSError) as e:
        print(f"calibration_table: {e}", file=sys.stderr)
        return 2
    text = markdown(data, totals)
    if not args.out:
        print(text, end="")
        return 0
    with open(f"{args.out}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(data)
    Path(f"{args.out}.md").write_text(text)
    print(f"wrote {args.out}.csv and {args.out}.md ({len(data)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
