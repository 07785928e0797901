"""How many training tokens the LM objective needs before it ranks candidates as a longer run would.

Trains each candidate (default: 10 cells of the paper's grid, iso-parameter, on the built real-English corpus of
``search_spaces/paper_grid_lm_english.yaml``) at every token budget and seed, then compares the ranking of validation
loss at budget N with the ranking at 4N (Spearman rho and Kendall tau over the candidates, on seed means and per seed;
beside them the rho between the two seeds at N, the noise floor of the ranking). The pick: the smallest N whose
ranking agrees with 4N's at rho >= --threshold (default 0.9), and from which every larger measured pair agrees too.
Seeds set both the initialisation and the data order (``train.seed`` and ``data.seed``).

    python -m experiments.lm_budget --out runs/lm_budget --workers 4
    python -m experiments.lm_budget --out runs/lm_budget --analyse        # the table again, no training

Writes ``runs.jsonl`` (one row per run, appended as each finishes: a call cut short resumes), ``budget.md`` (the
agreement table, the pick, the cost per candidate and budget) and ``budget.csv`` (the curve) in ``--out``.
Budgets: 2**20 multiples (2M = 2,097,152 tokens, the grid's 128 steps of 16 x 1024).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from statistics import mean

from experiments.lm_runs import add_run_args, cells_of, parse_tokens, plan, rows_of
from hlnas.cli.args import space_from_args
from hlnas.analysis.paper import spearman
from hlnas.errors import HlnasError

# two cells of each kind the grid holds: pure and hybrid, every mixer, the Transformer; 10 of the 31
DEFAULT_CELLS = ("transformer", "gated_deltanet:pure", "gated_deltanet:6:1", "hgrn2:6:1", "hgrn:pure", "hgrn:6:1",
                 "gla:3:1", "deltanet:12:1", "retnet:pure", "retnet:6:1")
# (N, 4N) for N from 0.125M to 1M: four pairs, 4N at most 4M, inside one pass over english-large's 6.7M train tokens
DEFAULT_BUDGETS = "0.125M,0.25M,0.5M,1M,2M,4M"


def kendall(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of paired values."""
    conc = disc = ta = tb = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ta += 1
            elif db == 0:
                tb += 1
            elif da * db > 0:
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ta) * (conc + disc + tb))
    return (conc - disc) / denom if denom else float("nan")


def losses(rows: list[dict]) -> dict[int, dict[str, dict[int, float]]]:
    """budget -> cell label -> seed -> val loss, over the runs that finished with a finite loss."""
    out: dict = {}
    for r in rows:
        v = r.get("val_loss")
        if r.get("status") == "ok" and v is not None and math.isfinite(v):
            out.setdefault(r["tokens"], {}).setdefault(f"{r['mixer']} {r['ratio']}", {})[r["seed"]] = v
    return out


def _rho(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    r, _ = spearman(a, b, permutations=0)
    return None if math.isnan(r) else r


def agreement(rows: list[dict], threshold: float = 0.9) -> dict:
    """For every measured pair (N, 4N): rho and tau of the seed-mean val loss over the cells both have, rho per seed,
    and the rho between seeds at N; the pick (see the module docstring)."""
    vl = losses(rows)
    budgets = sorted(vl)
    seeds = sorted({s for b in vl.values() for c in b.values() for s in c})
    pairs = []
    for n in budgets:
        if 4 * n not in vl:
            continue
        lo, hi = vl[n], vl[4 * n]
        cells = sorted(c for c in lo if c in hi and set(lo[c]) == set(hi[c]) and lo[c])
        a, b = [mean(lo[c].values()) for c in cells], [mean(hi[c].values()) for c in cells]
        per_seed = {}
        for s in seeds:
            both = [c for c in cells if s in lo[c] and s in hi[c]]
            per_seed[s] = _rho([lo[c][s] for c in both], [hi[c][s] for c in both])
        between = None
        if len(seeds) >= 2:
            both = [c for c in cells if seeds[0] in lo[c] and seeds[1] in lo[c]]
            between = _rho([lo[c][seeds[0]] for c in both], [lo[c][seeds[1]] for c in both])
        pairs.append({"n": n, "next": 4 * n, "cells": len(cells), "rho": _rho(a, b),
                      "tau": kendall(a, b) if len(cells) >= 2 else None, "per_seed": per_seed, "seeds_rho": between})
    ok = [p["rho"] is not None and p["rho"] >= threshold for p in pairs]
    first = next((p["n"] for p, good in zip(pairs, ok) if good), None)
    stays = next((p["n"] for i, p in enumerate(pairs) if all(ok[i:])), None)
    return {"pairs": pairs, "seeds": seeds, "threshold": threshold, "first": first, "pick": stays}


def cost(rows: list[dict]) -> dict[int, dict]:
    """Per budget: training seconds per run (mean, max), GPU-seconds estimated as wall / the runs sharing the device,
    and the cards they ran on."""
    out: dict = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("train_wall_s") is not None:
            d = out.setdefault(r["tokens"], {"s": [], "gpu": [], "cards": set()})
            d["s"].append(r["train_wall_s"])
            d["gpu"].append(r["train_wall_s"] / (r.get("concurrency") or 1))
            d["cards"].add(r.get("device_name") or "unrecorded")
    return {b: {"mean": mean(d["s"]), "max": max(d["s"]), "gpu_mean": mean(d["gpu"]), "n": len(d["s"]),
                "cards": sorted(d["cards"])} for b, d in sorted(out.items())}


def _g(x, spec="+.3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def train_split_tokens(source: str) -> int | None:
    """Tokens in a built corpus's train split (None for a source that is not one: generated text never repeats)."""
    from hlnas.data.token_corpus import TokenCorpus, is_token_corpus

    return TokenCorpus(source).n_tokens("train") if is_token_corpus(source) else None


def report(rows: list[dict], threshold: float, what: str, train_tokens: int | None = None) -> str:
    """The agreement table, the pick and the cost; with ``train_tokens`` (the corpus's train split) each pair also says
    how many passes over the split 4N takes: beyond one the larger run sees its text again, and its loss ranks how well
    a candidate memorises as much as how well it models language."""
    ag, c = agreement(rows, threshold), cost(rows)
    n_cells = len({(r["mixer"], r["ratio"]) for r in rows})
    lines = [f"# How many tokens the LM objective needs to rank ({what})", "",
             f"{n_cells} candidates, seeds {', '.join(map(str, ag['seeds']))} (each seed its own initialisation and data "
             f"order); rank agreement of the seed-mean validation loss at N with 4N.", "",
             "| N (tokens) | 4N | passes over the train split at 4N | candidates | Spearman rho | Kendall tau | "
             "rho per seed | rho between seeds at N |",
             "|---|---|---|---|---|---|---|---|"]
    for p in ag["pairs"]:
        per = ", ".join(f"s{s} {_g(v, '+.2f')}" for s, v in p["per_seed"].items())
        passes = "-" if not train_tokens else f"{p['next'] / train_tokens:.2f}"
        lines.append(f"| {p['n']:,} | {p['next']:,} | {passes} | {p['cells']} | {_g(p['rho'])} | {_g(p['tau'])} | {per} | "
                     f"{_g(p['seeds_rho'])} |")
    repeated = [p for p in ag["pairs"] if train_tokens and p["next"] > train_tokens]
    if repeated:
        at = ", ".join(format(p["next"], ",") for p in repeated)
        lines += ["", f"The train split holds {train_tokens:,} tokens: at 4N = {at} the runs read it more than once, so "
                  "those losses rank memorising as well as language modelling; a pick there rests on repeated text."]
    if ag["pick"] is not None:
        pick = f"**{ag['pick']:,} tokens**: the smallest N whose ranking agrees with 4N's at rho >= {threshold}, and every larger pair too"
        if ag["first"] != ag["pick"]:
            pick += f" (the first pair to reach it, N = {ag['first']:,}, has a larger pair below it)"
    else:
        pick = f"none: no measured N agrees with 4N at rho >= {threshold} from there on; measure larger budgets"
    lines += ["", f"Pick: {pick}.", "", "## Cost", "",
              "| budget | runs | training s per run (mean) | max | GPU-s per run (wall / runs sharing the device) | cards |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {b:,} | {d['n']} | {d['mean']:.1f} | {d['max']:.1f} | {d['gpu_mean']:.1f} | {', '.join(d['cards'])} |"
              for b, d in c.items()]
    failed = [r for r in rows if r.get("status") != "ok"]
    if failed:
        lines += ["", f"Failed runs ({len(failed)}): " + "; ".join(f"{r['mixer']} {r['ratio']} {r['tokens']:,} s{r['seed']}: "
                                                                 f"{(r.get('error') or '')[:120]}" for r in failed)]
    return "\n".join(lines) + "\n"


def write_curve(rows: list[dict], threshold: float, path) -> None:
    ag = agreement(rows, threshold)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["n_tokens", "next_tokens", "candidates", "rho", "tau", *(f"rho_seed{s}" for s in ag["seeds"]), "rho_between_seeds"])
        for p in ag["pairs"]:
            w.writerow([p["n"], p["next"], p["cells"], p["rho"], p["tau"], *(p["per_seed"].get(s) for s in ag["seeds"]),
                        p["seeds_rho"]])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default="paper_grid_lm_english", help="the space whose LM scale is measured (a YAML file or name)")
    ap.add_argument("--cells", default=",".join(DEFAULT_CELLS), help="comma-separated mixer:ratio cells (transformer alone)")
    ap.add_argument("--budgets", default=DEFAULT_BUDGETS, help=f"comma-separated token budgets (default {DEFAULT_BUDGETS})")
    ap.add_argument("--threshold", type=float, default=0.9, help="the rank agreement the pick needs (default 0.9)")
    ap.add_argument("--out", required=True, help="folder for runs.jsonl, budget.md, budget.csv")
    add_run_args(ap)
    ap.add_argument("--analyse", action="store_true", help="only write the table from the runs already in --out")
    args = ap.parse_args(argv)
    try:
        space = space_from_args(args)
        cells = cells_of(space, [c.strip() for c in args.cells.split(",") if c.strip()])
        budgets = [parse_tokens(b) for b in args.budgets.split(",") if b.strip()]
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        runs = plan(space, cells, budgets, seeds)
        n_pairs = sum(4 * b in budgets for b in budgets)
        if len(cells) < 8 or n_pairs < 4 or len(seeds) < 2:
            print(f"lm_budget: note: {len(cells)} candidates, {n_pairs} (N, 4N) pairs, {len(seeds)} seeds; the measurement "
                  "that picks a budget needs >= 8, >= 4 and 2", file=sys.stderr)
        rows = rows_of(args, space, runs)
    except HlnasError as e:
        print(f"lm_budget: error: {e}", file=sys.stderr)
        return 2
    what = f"space {space.name}, corpus {space.data.source}, {space.model.target_params or 'no'} target params"
    text = report(rows, args.threshold, what, train_split_tokens(space.data.source))
    with open(f"{args.out}/budget.md", "w") as fh:
        fh.write(text)
    write_curve(rows, args.threshold, f"{args.out}/budget.csv")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
