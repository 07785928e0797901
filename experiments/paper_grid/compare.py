"""A grid CSV (collect.py) against the paper's published numbers -> the comparisons issue #6 asks for.

    python experiments/paper_grid/compare.py --table experiments/paper_grid/results/grid_h200_mqar_2026-11-30.csv \
        --out experiments/paper_grid/results/compare_h200_mqar_2026-11-30.md

* Spearman rank correlation of recall over the (mixer, ratio) cells the paper's Table 7 reports, for the cells
  the study scored (permutation p-value), and per mixer across ratios;
* LM spread across ratios vs recall spread across ratios, per mixer (the paper: LM flat, recall steep);
* best standalone (pure) mixer vs best hybrid, in the study and in the paper;
* every missing cell named, so a partial grid reads as partial.
Recall here is the study's ``recall`` column (RULER average, or MQAR when RULER was not scored); the paper's
is RULER. Only orders are compared, never values: the study is a proxy.
"""

from __future__ import annotations

import argparse
import csv
import sys

from hlnas.paper import PAPER, attention_share, lm_by_ratio, recall_by_ratio, spearman

RATIOS = ("pure", "24:1", "12:1", "6:1", "3:1")


def _f(x: str | None) -> float | None:
    return float(x) if x not in (None, "") else None


def compare(rows: list[dict]) -> str:
    ours = {(r["mixer"], r["ratio"]): r for r in rows if r["status"] == "ok" and _f(r["recall"]) is not None}
    t7, t6 = recall_by_ratio(), lm_by_ratio()
    out = [f"# The study's grid against the paper ({PAPER})", ""]

    cells = [(m, q) for m in t7 if m != "average" for q in RATIOS]
    have = [c for c in cells if c in ours]
    missing = [f"{m} {q}" for m, q in cells if (m, q) not in ours]
    out += ["## Spearman rank correlation of recall with Table 7", ""]
    if len(have) >= 3:
        rho, p = spearman([float(ours[c]["recall"]) for c in have], [t7[m][q] for m, q in have])
        out.append(f"* all scored Table 7 cells ({len(have)} of {len(cells)}): rho = {rho:+.2f}, permutation p = {p:.3f}")
    for m in sorted({m for m, _ in have}):
        mine = [q for q in RATIOS if (m, q) in ours]
        if len(mine) >= 3:
            rho, p = spearman([float(ours[(m, q)]["recall"]) for q in mine], [t7[m][q] for q in mine])
            out.append(f"* {m} across its ratios ({', '.join(mine)}): rho = {rho:+.2f}, p = {p:.3f}")
    out.append(f"* not scored: {', '.join(missing) if missing else 'none'}")
    out.append("")

    out += ["## Does recall rise with the share of attention? (rank correlation of recall with the attention share, "
            "per mixer)", "", "| mixer | ratios scored | study rho | paper rho (Table 7, same ratios) |", "|---|---|---|---|"]
    for m in dict.fromkeys(r["mixer"] for r in rows):
        mine = [q for q in RATIOS if (m, q) in ours]
        if len(mine) >= 3:
            share = [attention_share(q) for q in mine]
            rho, p = spearman(share, [float(ours[(m, q)]["recall"]) for q in mine])
            paper = f"{spearman(share, [t7[m][q] for q in mine])[0]:+.2f}" if m in t7 else "-"
            out.append(f"| {m} | {', '.join(mine)} | {rho:+.2f} (p = {p:.2f}) | {paper} |")
    out.append("")

    out += ["## LM spread vs recall spread across ratios, per mixer", "",
            "| mixer | ratios scored | val loss range (nats) | val loss range / mean | recall range | recall range / mean "
            "| recall, pure -> 3:1 | paper LM range (Table 6) | paper recall range (Table 7) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for m in dict.fromkeys(r["mixer"] for r in rows):
        mine = [q for q in RATIOS if (m, q) in ours]
        if len(mine) < 2:
            continue
        vl = [float(ours[(m, q)]["val_loss"]) for q in mine]
        rc = [float(ours[(m, q)]["recall"]) for q in mine]
        ends = (f"{rc[0]:.3f} -> {rc[-1]:.3f}" if mine[0] == "pure" and mine[-1] == "3:1" else "-")
        plm = f"{max(t6[m].values()) - min(t6[m].values()):.3f}" if m in t6 else "-"
        prc = f"{max(t7[m].values()) - min(t7[m].values()):.3f}" if m in t7 else "-"
        out.append(f"| {m} | {len(mine)} | {max(vl) - min(vl):.3f} | {(max(vl) - min(vl)) / (sum(vl) / len(vl)):.1%} | "
                   f"{max(rc) - min(rc):.3f} | {(max(rc) - min(rc)) / (sum(rc) / len(rc)):.1%} | {ends} | {plm} | {prc} |")
    out.append("")

    out += ["## Best standalone mixer vs best hybrid", ""]
    pure = {m: float(r["recall"]) for (m, q), r in ours.items() if q == "pure"}
    hyb = {(m, q): float(r["recall"]) for (m, q), r in ours.items() if q not in ("pure", "full")}
    if pure and hyb:
        bp, bh = max(pure, key=pure.get), max(hyb, key=hyb.get)
        out.append(f"* study: best pure = {bp} ({pure[bp]:.3f}); best hybrid = {bh[0]} {bh[1]} ({hyb[bh]:.3f}); "
                   f"{'the same mixer' if bp == bh[0] else 'different mixers'} (pure scored for: {', '.join(sorted(pure))})")
    ppure = {m: t7[m]["pure"] for m in t7 if m != "average"}
    phyb = {(m, q): t7[m][q] for m in t7 if m != "average" for q in RATIOS[1:]}
    bp, bh = max(ppure, key=ppure.get), max(phyb, key=phyb.get)
    out.append(f"* paper (Table 7): best pure = {bp} ({ppure[bp]:.3f}); best hybrid = {bh[0]} {bh[1]} ({phyb[bh]:.3f})")
    restricted = {m: v for m, v in ppure.items() if m in pure}
    if restricted:
        rp = max(restricted, key=restricted.get)
        rh = {k: v for k, v in phyb.items() if k[0] in pure}
        bh2 = max(rh, key=rh.get)
        out.append(f"* paper restricted to the mixers the study scored pure ({', '.join(sorted(restricted))}): best pure = {rp}, "
                   f"best hybrid = {bh2[0]} {bh2[1]}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True, help="a CSV written by collect.py")
    ap.add_argument("--out")
    args = ap.parse_args()
    with open(args.table, newline="") as fh:
        text = compare(list(csv.DictReader(fh)))
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
