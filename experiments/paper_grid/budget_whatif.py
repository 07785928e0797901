"""What the grid would have said, and cost, under a shorter recall-step budget, from the curves it stored.

Issue #20 point 7 asks for at most 30 GPU-s per candidate; the grid spent 76 (session 26), most of it in runs that
never reach the target and so train the whole 4000-step budget. Would a shorter budget have given the same answers?
Every trial stores its validation curve (a check every 100 steps), so each budget B can be replayed without training:

* a run that stopped at its target by B is unchanged;
* a run still training at B is cut there: its recall is its corrected validation recall at its last check at or
  before B (the test-set score is only measured at the end, so this is the validation proxy of it), and it did not
  reach the target;
* ``recall_auc`` is recomputed over B for every run (``hlnas.analysis.mftabular.auc_at``, the rung scheduler's measure);
* GPU-seconds: the run's measured ``gpu_s_util`` split into its recall and LM parts by their wall seconds
  (``mqar_s``, ``train_wall_s``), the recall part scaled by the steps it would have trained.

Then ``compare.py``'s own rules judge each budget: Spearman with Table 7, finding (ii), the ``seeds split`` cells, the
cost per candidate, and which cells would change from learned to not.

    python -m experiments.paper_grid.budget_whatif --storage sqlite:///experiments/paper_grid/results/h200_2026-12-05c.db \\
        --study paper_grid_h200_lr --seed-study paper_grid_h200_lr_s1 \\
        --table experiments/results/grid_h200_lr_2026-12-05c/grid.csv --out experiments/results/<folder>/budget_whatif.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from experiments.paper_grid.compare import LEARNED, TableError, _f, _g, cells, cost, read_table, rises, table7_rho

__all__ = ["at_budget", "judge", "report", "main"]

SOURCE = re.compile(r"^(\S+)#(\d+)")  # collect.py's source column: "STUDY#TRIAL" (then any note)


def at_budget(row: dict, curve: tuple[tuple[int, ...], tuple[float, ...]], budget: int) -> dict:
    """``row`` (a collect.py row) as if its recall run had a ``budget``-step budget; ``curve`` is its (steps, corrected
    recall) checks."""
    from hlnas.analysis.mftabular import auc_at

    steps, values = curve
    ran, base = steps[-1], _f(row["recall_baseline"]) or 0.0
    # stopped at its target: it keeps its last value (mftabular.stored_row's rule)
    held = bool(row.get("mqar_steps_to_target"))
    out = dict(row)
    out["recall_auc"] = f"{auc_at(list(zip(steps, values)), budget, held):.4f}"
    if ran > budget:  # cut at the budget: the last check at or before it, and no target reached
        kept = [v for s, v in zip(steps, values) if s <= budget]
        rec = kept[-1] if kept else 0.0
        out.update(recall=f"{rec:.4f}", recall_raw=f"{base + rec * (1 - base):.4f}", mqar_steps_to_target="")
    g, m, t = _f(row.get("gpu_s_util")), _f(row.get("mqar_s")), _f(row.get("train_wall_s")) or 0.0
    if g is not None and m:
        share = m / (m + t)  # the recall part of the measured GPU-seconds, by wall seconds
        out["gpu_s_util"] = f"{g * (1 - share) + g * share * min(ran, budget) / ran:.2f}"
    return out


def judge(rows: list[dict]) -> dict:
    """compare.py's verdicts on one set of rows."""
    cs = cells(rows)
    return {"cells": cs, "rho": table7_rho(cs, "recall"), "rho_auc": table7_rho(cs, "recall_auc"),
            "rises": rises(cs, "recall"), "cost": cost(rows)}


def _learned(c: dict) -> str:
    return f"{len(c['learned_seeds'])}/{c['n']}"


def _key(row: dict) -> tuple[str, int] | None:
    m = SOURCE.match(row.get("source") or "")
    return (m.group(1), int(m.group(2))) if m else None


def report(rows: list[dict], curves: dict[tuple[str, int], tuple], budgets: list[int]) -> str:
    """The markdown table: a row per budget, and the cells whose learned seeds differ from the full budget's."""
    found = [curves.get(_key(r)) for r in rows]  # each row's curve, None where it has none
    missing = found.count(None)
    full = judge(rows)
    out = ["| budget (steps) | GPU-s per candidate (mean) | rho recall vs Table 7 [95%] | rho recall_auc | (ii) rises "
           "| seeds split cells | cells learned in fewer seeds than at the full budget |", "|---|---|---|---|---|---|---|"]
    for b in budgets:
        rs = [r if c is None else at_budget(r, c, b) for r, c in zip(rows, found)]
        j = judge(rs)
        lost = [f"{m} {q} ({_learned(full['cells'][(m, q)])} -> {_learned(c)})" for (m, q), c in j["cells"].items()
                if len(c["learned_seeds"]) < len(full["cells"][(m, q)]["learned_seeds"])]
        r, ra, g = j["rho"], j["rho_auc"], j["cost"]["mean"]
        ci = "" if r["lo"] is None else f" [{r['lo']:+.2f}, {r['hi']:+.2f}]"
        out.append(f"| {b} | {_g(g, '.1f')} | {_g(r['rho'], '+.2f')}{ci} (n {r['n']}) | {_g(ra['rho'], '+.2f')} | "
                   f"{j['rises']['verdict']} ({len(j['rises']['rising'])} of "
                   f"{len(j['rises']['per_mixer'])}) | {sum(c['seeds_split'] for c in j['cells'].values())} | "
                   f"{', '.join(lost) or 'none'} |")
    note = (f"\n{missing} rows have no stored curve and keep their full-budget values.\n" if missing else "\n")
    return "\n".join(out) + note + (f"\nA cell has learned in a seed at corrected recall >= {LEARNED}. Runs cut at a "
                                    "budget are scored on their last validation check before it.\n")


def _curves(storage: str, names: list[str]) -> tuple[dict[tuple[str, int], tuple], int]:
    """(study, trial number) -> (steps, corrected recall) of every trial with checks, and the longest run's steps."""
    from hlnas.analysis.calibration_figures import curves_info
    from hlnas.analysis.pareto import StorageError, UnknownStudyError, load_study, study_data

    curves = {}
    for n in names:
        try:
            data = study_data(load_study(storage, n))
        except (StorageError, UnknownStudyError) as e:
            raise TableError(str(e)) from None
        for ln in curves_info(data, "recall").lines:
            curves[(n, ln.number)] = (ln.steps, ln.values)
    return curves, max((s[-1] for s, _ in curves.values()), default=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--study", required=True, help="seed 0's study")
    ap.add_argument("--seed-study", action="append", default=[], metavar="NAME", help="another seed's study; repeatable")
    ap.add_argument("--table", required=True, help="collect.py's CSV of those studies (with --util: gpu_s_util)")
    ap.add_argument("--budgets", default="1000,2000,3000,4000", help="recall-step budgets, comma-separated")
    ap.add_argument("--out", required=True, help="the markdown file to write")
    args = ap.parse_args(argv)
    try:
        budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()})
        if not budgets or budgets[0] < 1:
            raise ValueError
    except ValueError:
        print(f"budget_whatif.py: --budgets {args.budgets!r}: expected positive integers, e.g. 1000,2000", file=sys.stderr)
        return 2
    try:
        rows = read_table(args.table)
        curves, top = _curves(args.storage, [args.study, *args.seed_study])
        if budgets[-1] > top:
            raise TableError(f"budget {budgets[-1]} is beyond the longest stored run ({top} steps)")
        text = report(rows, curves, budgets)
    except TableError as e:
        print(f"budget_whatif.py: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# The grid under shorter recall budgets (replayed from its stored curves)\n\nTable: `{args.table}`; "
                   f"studies {', '.join([args.study, *args.seed_study])}; the runs trained up to {top} steps.\n\n{text}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
