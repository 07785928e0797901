"""The paper's LM findings tested on real text: the LM half of the grid (``search_spaces/paper_grid_lm_english.yaml``:
6 mixers x 5 ratios + the Transformer, iso-parameter, the built real-English corpus) at one token budget, 2 seeds
(each its own initialisation and data order). The recall half is not retrained: the grid's stored recall stands.

    python -m experiments.lm_grid --tokens 2M --out runs/lm_grid --workers 4
    python -m experiments.lm_grid --tokens 2M --out runs/lm_grid --analyse

Writes ``runs.jsonl`` (one row per run, resumable), ``cells.csv`` (seed mean and spread per cell) and ``lm_grid.md``:

* (i) LM quality flat across ratios: per mixer, the range of its seed-mean val loss over the 5 ratios against twice
  its largest seed spread (max - min, floor 0.01): flat or not; yes when more than half the mixers are flat
  (``experiments/paper_grid/compare.py``'s rule, the same as for the byte-level grid);
* (iii) the best standalone mixer is not the best hybrid: the lowest pure val loss (ties within twice the spread)
  against each mixer's best hybrid cell, and against the hybrids averaged over 24:1..3:1 and at 3:1 alone; yes,
  no or undecided by compare.py's margins;
* Spearman rho of the cells' val loss (negated: higher is better, as accuracy) against the paper's LM-by-ratio table
  (Table 6, ``hlnas/resources/paper_grid.csv``), with a bootstrap 95% interval, beside the rho of the attention-share
  predictor (which trains nothing) and the partial rho of the grid with the share held fixed;
* the cost: training seconds per candidate (mean, max) and the cards.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from statistics import mean

from experiments.lm_runs import add_run_args, cells_of, parse_tokens, plan, rows_of
from hlnas.cli.args import space_from_args
from experiments.paper_grid.compare import RATIOS, best_pure_vs_hybrid, lm_flat
from hlnas.analysis.paper import PAPER, attention_share, lm_by_ratio, spearman
from hlnas.analysis.rankstats import bootstrap_interval, spearman_rho
from hlnas.errors import HlnasError

HYBRID = RATIOS[1:]


def cells(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(mixer, ratio) -> seed-mean val loss, its spread (max - min over seeds; None with one seed), and the negated
    loss (``neg_val_loss``: higher is better, the direction compare.py's rules read)."""
    by: dict = {}
    for r in rows:
        v = r.get("val_loss")
        if r.get("status") == "ok" and v is not None and math.isfinite(v):
            by.setdefault((r["mixer"], r["ratio"]), []).append(v)
    out = {}
    for key, vs in by.items():
        sp = max(vs) - min(vs) if len(vs) >= 2 else None
        out[key] = {"n": len(vs), "val_loss": mean(vs), "val_loss_spread": sp, "neg_val_loss": -mean(vs),
                    "neg_val_loss_spread": sp}
    return out


def with_best_hybrid(cs: dict) -> dict:
    """``cs`` plus, per mixer, a cell ``(mixer, 'best')``: its best hybrid ratio (lowest val loss), for (iii)."""
    out = dict(cs)
    for m in {m for m, _ in cs}:
        hyb = [q for q in HYBRID if (m, q) in cs]
        if hyb:
            q = min(hyb, key=lambda q: cs[(m, q)]["val_loss"])
            out[(m, "best")] = {**cs[(m, q)], "ratio_of_best": q}
    return out


def rho_with_interval(ours: list[float], theirs: list[float]) -> dict:
    """Spearman rho, its permutation p, and a 95% percentile bootstrap interval over the cells, as hlnas validate
    computes the interval (compare.py's own helper went when compare.py took hlnas validate's numbers)."""
    n = len(ours)
    if n < 3:
        return {"n": n, "rho": None, "p": None, "lo": None, "hi": None}
    rho, p = spearman(ours, theirs)
    lo, hi, _ = bootstrap_interval(lambda idx: spearman_rho([ours[i] for i in idx], [theirs[i] for i in idx]), n)
    return {"n": n, "rho": None if math.isnan(rho) else rho, "p": p, "lo": lo, "hi": hi}


def paper_rho(cs: dict) -> dict:
    """Spearman of -val_loss against Table 6 over the cells both have, the share-only predictor's, and the partial rho
    of the grid with the share held fixed."""
    t6 = lm_by_ratio()
    both = [(m, q) for m in t6 if m != "average" for q in RATIOS if (m, q) in cs]
    theirs = [t6[m][q] for m, q in both]
    ours = [cs[c]["neg_val_loss"] for c in both]
    share = [attention_share(q) for _, q in both]
    res = {"cells": both, "of": sum(len(v) for m, v in t6.items() if m != "average"),
           "grid": rho_with_interval(ours, theirs), "share": rho_with_interval(share, theirs), "partial": None}
    if len(both) >= 4:
        r_xy, r_xz, r_yz = (spearman(a, b, permutations=0)[0] for a, b in ((ours, theirs), (ours, share), (theirs, share)))
        den = math.sqrt(max(0.0, (1 - r_xz**2) * (1 - r_yz**2)))
        res["partial"] = (r_xy - r_xz * r_yz) / den if den > 0 and not math.isnan(r_xy) else None
    return res


def _g(x, spec=".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _ci(r: dict) -> str:
    return "-" if r["lo"] is None else f"[{r['lo']:+.2f}, {r['hi']:+.2f}]"


def findings(cs: dict) -> tuple[list[str], dict]:
    res = {"flat": lm_flat(cs)}
    f = res["flat"]
    per = "; ".join(f"{m} range {v['range']:.3f} vs 2x spread {_g(None if v['spread'] is None else 2 * v['spread'])}"
                    + ("" if v["flat"] is None else " flat" if v["flat"] else " not flat") for m, v in f["per_mixer"].items())
    lines = ["| finding | verdict | the numbers behind it |", "|---|---|---|",
             f"| (i) LM quality flat across ratios | {f['verdict']} | flat for {len(f['flat'])} of {len(f['judged'])} "
             f"mixers with 2 seeds; {per or 'no mixer with 2 ratios'}; range between the mixers' mean val loss "
             f"{_g(f['between_mixers'])} |"]
    cb = with_best_hybrid(cs)
    for how, what in (("best", "each mixer's best hybrid ratio"), ("average", "hybrids averaged over 24:1..3:1"),
                      ("3:1", "at 3:1")):
        b = best_pure_vs_hybrid(cb, "neg_val_loss", how)
        res[f"best_{how}"] = b
        if b["pure"] is None:
            nums = "no pure model or no hybrid scored"
        else:
            ratio = f" {cb[(b['hybrid'], 'best')]['ratio_of_best']}" if how == "best" else ""
            nums = (f"best pure: {b['pure']} val loss {-b['pure_value']:.3f}"
                    + (f" (tied within 2x spread with {', '.join(b['pure_tied'])})" if b.get("pure_tied") else "")
                    + f"; best hybrid ({what}): {b['hybrid']}{ratio} {-b['hybrid_value']:.3f}")
            if "runner_up" in b:
                nums += (f"; {b['pure']}'s own {-b['own']:.3f} leads {b['runner_up']}'s {-b['runner_up_value']:.3f} by "
                         f"{b['margin']:.3f} vs 2x spread {2 * b['spread']:.3f}")
            elif "margin" in b:
                nums += f"; {b['pure']}'s own {-b['own']:.3f}, margin {b['margin']:.3f} vs 2x spread {2 * b['spread']:.3f}"
            else:
                nums += f"; {b.get('note', '')}"
        lines.append(f"| (iii) best standalone mixer is not the best hybrid ({what}) | {b['verdict']} | {nums} |")
    return lines, res


def report(rows: list[dict], what: str) -> str:
    cs = cells(rows)
    seeds = sorted({r["seed"] for r in rows if r.get("status") == "ok"})
    out = [f"# The paper's LM findings on real text ({what})", "",
           f"{len(cs)} cells over seeds {', '.join(map(str, seeds))} (each seed its own initialisation and data order). "
           "Spread = max - min over the seeds (floor 0.01 in the findings).", "",
           "| mixer | ratio | seeds | params | val loss | spread |", "|---|---|---|---|---|---|"]
    params = {(r["mixer"], r["ratio"]): r.get("params") for r in rows}
    order = {q: i for i, q in enumerate((*RATIOS, "transformer"))}
    for (m, q), c in sorted(cs.items(), key=lambda kv: (kv[0][0] == "transformer", kv[0][0], order.get(kv[0][1], 9))):
        out.append(f"| {m} | {q} | {c['n']} | {params.get((m, q)) or 0:,} | {c['val_loss']:.4f} | {_g(c['val_loss_spread'], '.4f')} |")
    out += ["", "## The findings", ""]
    lines, _ = findings(cs)
    out += lines
    pr = paper_rho(cs)
    out += ["", f"## Spearman rank correlation with the paper's LM-by-ratio table ({PAPER}, Table 6)", "",
            f"Cells both have: {len(pr['cells'])} of Table 6's {pr['of']}; the grid's value is -val loss (higher is "
            "better, as the paper's accuracy); 95% interval: 2000 bootstrap resamples of the cells.", "",
            "| predictor | n | rho | 95% interval | permutation p |", "|---|---|---|---|---|"]
    for name, key in (("this grid (val loss)", "grid"), ("attention share alone (trains nothing)", "share")):
        r = pr[key]
        out.append(f"| {name} | {r['n']} | {_g(r['rho'], '+.2f')} | {_ci(r)} | {_g(r['p'])} |")
    out += ["", f"Partial rho of the grid against Table 6 with the attention share held fixed: {_g(pr['partial'], '+.2f')}."]
    t6 = lm_by_ratio()
    out += ["", "The paper (Table 6, a relative ranking only): LM range over ratios per mixer "
            + "; ".join(f"{m} {max(v.values()) - min(v.values()):.3f}" for m, v in t6.items() if m != "average") + "."]
    timed = [r for r in rows if r.get("status") == "ok" and r.get("train_wall_s") is not None]
    walls = [r["train_wall_s"] for r in timed]
    gpu = [r["train_wall_s"] / (r.get("concurrency") or 1) for r in timed]
    cards = sorted({r.get("device_name") or "unrecorded" for r in timed})
    out += ["", "## Cost", ""]
    out.append(f"Training seconds per candidate run: mean {mean(walls):.1f}, max {max(walls):.1f} over {len(walls)} runs; "
               f"GPU-seconds per candidate (wall / the runs sharing the device, an estimate): mean {mean(gpu):.1f}, max "
               f"{max(gpu):.1f} ({', '.join(cards)})." if walls else "No run finished.")
    failed = [r for r in rows if r.get("status") != "ok"]
    if failed:
        out += ["", f"Failed runs ({len(failed)}): " + "; ".join(f"{r['mixer']} {r['ratio']} s{r['seed']}: "
                                                                f"{(r.get('error') or '')[:120]}" for r in failed)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default="paper_grid_lm_english", help="the grid's LM space (a YAML file or name)")
    ap.add_argument("--tokens", help="the token budget (lm_budget.py's pick; default the space's train.tokens); 2M = 2**21")
    ap.add_argument("--cells", help="comma-separated mixer:ratio cells (default: every candidate of the space)")
    ap.add_argument("--out", required=True, help="folder for runs.jsonl, cells.csv, lm_grid.md")
    add_run_args(ap)
    ap.add_argument("--analyse", action="store_true", help="only write the report from the runs already in --out")
    args = ap.parse_args(argv)
    try:
        space = space_from_args(args)
        tokens = parse_tokens(args.tokens) if args.tokens else space.train.tokens
        cells_ = cells_of(space, [c.strip() for c in args.cells.split(",") if c.strip()] if args.cells else None)
        runs = plan(space, cells_, [tokens], [int(s) for s in args.seeds.split(",") if s.strip()])
        rows = rows_of(args, space, runs)
    except HlnasError as e:
        print(f"lm_grid: error: {e}", file=sys.stderr)
        return 2
    what = f"space {space.name}, corpus {space.data.source}, {tokens:,} tokens per candidate"
    text = report(rows, what)
    with open(f"{args.out}/lm_grid.md", "w") as fh:
        fh.write(text)
    with open(f"{args.out}/cells.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["mixer", "ratio", "seeds", "val_loss", "val_loss_spread"])
        for (m, q), c in sorted(cells(rows).items()):
            w.writerow([m, q, c["n"], c["val_loss"], c["val_loss_spread"]])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
