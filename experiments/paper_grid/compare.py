"""A grid CSV (collect.py: one row per candidate and seed) against the paper -> the comparisons of issue #20.

    python experiments/paper_grid/compare.py --table experiments/paper_grid/results/grid_h200_<date>.csv \
        --out experiments/paper_grid/results/compare_h200_<date>.md

Writes markdown:

* **the cells**: per (mixer, ratio), over the seeds scored ``ok``: raw recall beside its no-recall baseline, the
  corrected ``recall`` and the graded ``recall_auc`` (seed mean and spread, max - min), steps to target, val loss;
  a cell at or below its baseline in every seed is marked ``no recall`` (in some seeds: ``no recall in seed ...``);
  a cell where some seeds learned the task (corrected recall >= 0.5) and others did not is marked ``seeds split``;
* **Spearman rho against the paper's Table 7** (4 mixers x 5 ratios, the Transformer is not in Table 7) over every
  cell both have, for ``recall`` and ``recall_auc`` (seed means), computed by ``hlnas validate``
  (:mod:`hlnas.analysis.validate`): n, rho with a bootstrap 95% interval (cells resampled with replacement, 2000
  times, seed 0), beside it the same for the attention share alone (a predictor that trains nothing) and the partial
  rho with the share held fixed, the mixer order within a ratio (Kendall tau), rho when each cell keeps one seed
  drawn at random; then per measure the saturated cells, the seeds' agreement and the split cells;
* **the paper's three findings** tested as a table, each with the numbers behind its verdict (``yes``, ``no`` or
  ``undecided``: a difference inside twice the seed spread is no evidence either way). The seed spread of a cell is
  max - min over its seeds, at least 0.01 (``hlnas calibrate``'s floor; 0.01 also for a cell with one seed):
  (i) LM quality flat across ratios: per mixer, the val loss range over its ratios within twice its largest
      val-loss seed spread; yes when more than half the mixers with two val-loss seeds are flat (the between-mixer
      range is shown beside);
  (ii) recall rises with the attention share: per mixer, Spearman of recall vs attention share > 0 and the highest
      share's recall above the lowest share's by more than twice the larger spread; yes when more than half the
      mixers rise, no when at most a quarter do, else undecided;
  (iii) the best standalone mixer is not the best hybrid: the best pure mixer vs the best mixer at 3:1, and averaged
      over the hybrid ratios; every pure mixer within twice the spread of the best counts as a best one (a tie);
      yes when another mixer wins by more than twice the spread over the hybrid of every best pure mixer, no when a
      best pure mixer is also the best hybrid, ahead of the runner-up by more than twice the spread;
* **cost**: GPU-seconds per candidate (mean, max) and per grid seed, against the target of at most 30 GPU-s per
  candidate on average (``gpu_s_util``, the measured utilisation's share, when collect.py had ``--util``; else
  ``gpu_s_est``, wall / concurrency, when it had ``--concurrency``; else the wall seconds ``gpu_s``, which overstate
  a shared GPU's cost).
Recall is compared only by order with the paper: the study is a proxy.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import Counter
from statistics import mean

from hlnas.analysis.paper import PAPER, attention_share, lm_by_ratio, recall_by_ratio
from hlnas.analysis.rankstats import spearman_rho
from hlnas.analysis.validate import LEARNED, seeds_split, validate
from hlnas.analysis.validation_data import Proxy, Run, ValidationError, mixer_name, paper_reference, ratio_name
from hlnas.analysis.validation_report import rho_text, saturation_line, seed_draws_text, seed_lines, within_ratio_text

RATIOS = ("pure", "24:1", "12:1", "6:1", "3:1")
HYBRID = RATIOS[1:]
MEASURES = ("recall", "recall_auc")
REQUIRED = ("mixer", "ratio", "status", "recall", "recall_raw", "recall_baseline")
SPREAD_FLOOR = 0.01  # hlnas.calibration.protocol's: two equal seeds are not "separated" by 0
TARGET_GPU_S = 30.0  # issue #20 point 7: per candidate, on average
BOOTSTRAP = 2000


class TableError(ValueError):
    """A table compare.py cannot read (missing columns, bad numbers)."""


def _f(x) -> float | None:
    if x is None or (isinstance(x, str) and not x.strip()):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _g(x, spec=".3f") -> str:
    return "-" if x is None else format(x, spec)


def read_table(path) -> list[dict]:
    """A collect.py CSV as rows; a missing file is a :class:`TableError` ("no such file"), as a bad table is."""
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        raise TableError("no such file") from None


def check_columns(rows: list[dict], where: str = "the table") -> None:
    have = list(rows[0]) if rows else []
    if not rows:
        raise TableError(f"{where} has no rows")
    lacking = [c for c in REQUIRED if c not in have]
    if lacking:
        raise TableError(f"{where} lacks column(s) {', '.join(lacking)} (collect.py writes them); it has: {', '.join(have)}")


# -- cells: a (mixer, ratio) over its seeds -------------------------------------------------------


def cells(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(mixer, ratio) -> per-seed values of the rows scored ok (``runs``, each with its ``seed``), their seed means and
    spreads."""
    by: dict[tuple[str, str], list[dict]] = {}
    for i, r in enumerate(rows, start=2):
        if r["status"] != "ok":
            continue
        try:
            vals = {k: _f(r.get(k)) for k in ("recall", "recall_raw", "recall_baseline", "recall_auc", "val_loss",
                                             "mqar_steps_to_target")}
        except ValueError as e:
            raise TableError(f"row {i}: {e}") from None
        if vals["recall"] is None:
            continue
        vals["seed"] = r.get("seed") or "0"
        by.setdefault((r["mixer"], r["ratio"]), []).append(vals)
    out = {}
    for key, runs in by.items():
        c = {"seeds": [v["seed"] for v in runs], "n": len(runs), "runs": runs}
        for k in ("recall", "recall_raw", "recall_baseline", "recall_auc", "val_loss", "mqar_steps_to_target"):
            xs = [v[k] for v in runs if v[k] is not None]
            c[k] = mean(xs) if xs else None
            c[k + "_n"] = len(xs)
            c[k + "_spread"] = (max(xs) - min(xs)) if len(xs) >= 2 else None
        # at or below the baseline: the corrected recall is 0 (max(0, (raw - b) / (1 - b)))
        c["no_recall_seeds"] = [v["seed"] for v in runs if v["recall"] <= 0.0]
        c["learned_seeds"] = [v["seed"] for v in runs if v["recall"] >= LEARNED]
        c["seeds_split"] = seeds_split([v["recall"] for v in runs])
        out[key] = c
    return out


def _steps(c: dict, measured: bool = True) -> str:
    """Steps to target over the seeds that reached it, saying how many did: a mean over the ones that learned alone
    would hide a seed that never got there (RetNet 6:1 on 2026-12-04: 2900 and never). ``measured``: the table records
    steps to target at all (older protocols did not: there a blank is unknown, not never)."""
    got, n = c.get("mqar_steps_to_target_n") or 0, c["n"]
    if not got:
        return "never" if n and measured else "-"
    return _g(c["mqar_steps_to_target"], ".0f") + ("" if got == n else f" ({got} of {n} seeds; the rest never)")


def spread(c: dict, measure: str) -> float:
    s = c.get(measure + "_spread")
    return max(s if s is not None else 0.0, SPREAD_FLOOR)


def recall_text(c: dict, measure: str = "recall") -> str:
    """A cell's recall with its no-recall baseline beside it (the corrected measures' own no-recall is 0)."""
    if measure == "recall":
        txt = (f"{_g(c['recall'])} (raw {_g(c['recall_raw'])}, no-recall {_g(c['recall_baseline'])})")
    else:
        txt = f"{_g(c.get(measure))} (no-recall 0)"
    return txt + (" **no recall**" if c.get(measure) is not None and c[measure] <= 0.0 else "")


def _mark(c: dict) -> str:
    s, learned = c["no_recall_seeds"], c.get("learned_seeds", [])
    marks = []
    if s:
        marks.append("no recall" if len(s) == c["n"] else f"no recall in seed {', '.join(map(str, s))}")
    if c.get("seeds_split"):
        # one seed learned the task and another did not: the cell's mean stands for neither (session 25: GatedDeltaNet
        # 24:1 at 0.017 and 0.950, RetNet 12:1 at 0.984 and 0.019)
        marks.append(f"**seeds split**: learned (recall >= {LEARNED}) in seed {', '.join(map(str, learned))} only")
    return "; ".join(marks)


# -- Table 7, beside the attention share alone (hlnas validate's statistics) ----------------------------------


def validation(cs: dict, measure: str, reference: str = "table7"):
    """:func:`hlnas.analysis.validate.validate` of the cells' ``measure`` (each seed a run) against the shipped
    ``reference``; None when fewer than 3 cells are in common (or none has the measure)."""
    runs = []
    for (m, q), c in cs.items():
        try:
            mixer = mixer_name(m, f"cell {m} {q}")
            ratio = ratio_name(q, mixer, f"cell {m} {q}")
        except ValidationError as e:
            raise TableError(str(e)) from None
        runs += [Run(mixer, ratio, str(v["seed"]), v[measure], recall=v["recall"], raw=v["recall_raw"],
                     baseline=v["recall_baseline"]) for v in c["runs"] if v.get(measure) is not None]
    try:
        return validate(Proxy("the grid", measure, tuple(runs)), paper_reference(reference), learned=LEARNED,
                        resamples=BOOTSTRAP)
    except ValidationError:
        return None


def table7_rho(cs: dict, measure: str) -> dict:
    """rho with Table 7 and its interval (``n``, ``rho``, ``lo``, ``hi``), the attention share's alone (``share``) and
    the partial rho with the share held fixed (``partial``), over ``cells``, of Table 7's ``of``."""
    v = validation(cs, measure)
    of = sum(1 for m, row in recall_by_ratio().items() if m != "average" for q in row)
    if v is None:
        return {"n": 0, "rho": None, "lo": None, "hi": None, "share": None, "partial": None, "cells": [], "of": of,
                "validation": None}
    r = v.proxy_rho
    return {"n": r.n, "rho": r.rho, "lo": r.lo, "hi": r.hi, "share": v.share_rho, "partial": v.partial_rho,
            "cells": [(c.mixer, c.ratio) for c in v.shared], "of": of, "validation": v}


def table7_lines(cs: dict) -> list[str]:
    """The Table 7 section: per measure rho, the attention share's rho, the partial rho, the mixer order within a
    ratio and rho over seed choices; then each measure's saturation, seed consistency and split cells."""
    out = ["| measure | n | rho [95%] | attention share alone [95%] | partial rho, share held fixed [95%] | "
           "Kendall tau within a ratio | rho, one seed per cell at random | cells |", "|---|---|---|---|---|---|---|---|"]
    details = []
    for measure in MEASURES:
        r = table7_rho(cs, measure)
        v = r["validation"]
        if v is None:
            continue
        out.append(f"| {measure} | {r['n']} of {r['of']} | {rho_text(v.proxy_rho)} | {rho_text(v.share_rho)} | "
                   f"{rho_text(v.partial_rho)} | {within_ratio_text(v)} | {seed_draws_text(v)} | "
                   f"{', '.join(f'{m} {q}' for m, q in r['cells'])} |")
        details += ["", f"{measure}:", saturation_line(v), *seed_lines(v, draws=False)]  # the draws are in the table
    return out + details


# -- the paper's three findings ---------------------------------------------------------------------


def _mixers(cs: dict) -> list[str]:
    return list(dict.fromkeys(m for m, q in cs if q in RATIOS))


def lm_flat(cs: dict) -> dict:
    """(i) Per mixer: val loss range over its ratios vs twice its largest val-loss seed spread."""
    per, means = {}, {}
    for m in _mixers(cs):
        have = [q for q in RATIOS if (m, q) in cs and cs[(m, q)]["val_loss"] is not None]
        if len(have) < 2:
            continue
        vl = [cs[(m, q)]["val_loss"] for q in have]
        spreads = [cs[(m, q)]["val_loss_spread"] for q in have if cs[(m, q)]["val_loss_spread"] is not None]
        sp = max(max(spreads), SPREAD_FLOOR) if spreads else None
        rng = max(vl) - min(vl)
        means[m] = mean(vl)
        per[m] = {"ratios": have, "range": rng, "spread": sp, "flat": None if sp is None else rng <= 2 * sp}
    between = (max(means.values()) - min(means.values())) if len(means) >= 2 else None
    judged = [m for m, v in per.items() if v["flat"] is not None]
    flat = [m for m in judged if per[m]["flat"]]
    verdict = ("undecided" if not judged else "yes" if len(flat) > len(judged) / 2 else "no")
    return {"per_mixer": per, "between_mixers": between, "judged": judged, "flat": flat, "verdict": verdict}


def rises(cs: dict, measure: str) -> dict:
    """(ii) Per mixer: Spearman of the measure vs attention share, and the rise lowest -> highest share vs the spread."""
    per = {}
    for m in _mixers(cs):
        have = [q for q in RATIOS if (m, q) in cs and cs[(m, q)].get(measure) is not None]
        if len(have) < 3:
            continue
        share = [attention_share(q) for q in have]
        vals = [cs[(m, q)][measure] for q in have]
        rho = spearman_rho(share, vals)
        first, last = cs[(m, have[0])], cs[(m, have[-1])]
        gap, sp = last[measure] - first[measure], max(spread(first, measure), spread(last, measure))
        per[m] = {"ratios": have, "rho": None if math.isnan(rho) else rho, "from": have[0], "to": have[-1], "gap": gap,
                  "spread": sp, "rises": (not math.isnan(rho)) and rho > 0 and gap > 2 * sp}
    up = [m for m, v in per.items() if v["rises"]]
    n = len(per)
    verdict = "undecided" if not n else "yes" if len(up) > n / 2 else "no" if len(up) <= n / 4 else "undecided"
    return {"per_mixer": per, "rising": up, "verdict": verdict}


def best_pure_vs_hybrid(cs: dict, measure: str, how: str) -> dict:
    """(iii) The best pure mixer vs the best hybrid mixer, ``how`` = '3:1' or 'average' (mean over its hybrid ratios)."""
    pure = {m: cs[(m, "pure")] for m in _mixers(cs) if (m, "pure") in cs and cs[(m, "pure")].get(measure) is not None}
    hyb: dict[str, tuple[float, float]] = {}  # mixer -> (value, spread)
    for m in _mixers(cs):
        have = [cs[(m, q)] for q in (HYBRID if how == "average" else (how,)) if (m, q) in cs and cs[(m, q)].get(measure) is not None]
        if have:
            hyb[m] = (mean(c[measure] for c in have), max(spread(c, measure) for c in have))
    out = {"how": how, "pure": None, "hybrid": None, "verdict": "undecided"}
    if not pure or not hyb:
        return out
    bp = max(pure, key=lambda m: pure[m][measure])
    bh = max(hyb, key=lambda m: hyb[m][0])
    # the best standalone may be a tie: every pure mixer within twice the spread of the best counts as best
    tied = [m for m in pure if pure[bp][measure] - pure[m][measure] <= 2 * max(spread(pure[bp], measure), spread(pure[m], measure))]
    if bh in tied:
        bp = bh  # the best hybrid is one of the best standalone mixers: a 'no' if it leads the others
    out.update(pure=bp, pure_value=pure[bp][measure], pure_cell=pure[bp], hybrid=bh, hybrid_value=hyb[bh][0],
               pure_tied=[m for m in tied if m != bp])
    scored = [m for m in tied if m in hyb]
    if not scored:
        out["note"] = f"{' / '.join(tied)} {'has' if len(tied) == 1 else 'have'} no {how} hybrid scored"
        return out
    if bh == bp:  # 'no' needs the lead over the runner-up beyond twice the spread, as 'yes' needs its margin
        others = [m for m in hyb if m != bp]
        if not others:
            out["note"] = f"no other mixer has a {how} hybrid scored"
            return out
        ru = max(others, key=lambda m: hyb[m][0])
        margin, sp = hyb[bp][0] - hyb[ru][0], max(hyb[bp][1], hyb[ru][1])
        out.update(own=hyb[bp][0], runner_up=ru, runner_up_value=hyb[ru][0], margin=margin, spread=sp)
        out["verdict"] = "no" if margin > 2 * sp else "undecided"
        return out
    ref = max(scored, key=lambda m: hyb[m][0])  # 'yes' must beat the hybrid of every tied-best standalone mixer
    margin, sp = hyb[bh][0] - hyb[ref][0], max(hyb[bh][1], hyb[ref][1])
    out.update(pure=ref, pure_value=pure[ref][measure], pure_cell=pure[ref], own=hyb[ref][0], margin=margin, spread=sp,
               pure_tied=[m for m in tied if m != ref])
    out["verdict"] = "yes" if margin > 2 * sp else "undecided"
    return out


def _fmt_cell(cs, m, q, measure) -> str:
    return f"{m} {q} {recall_text(cs[(m, q)], measure)}"


def findings_table(cs: dict) -> tuple[list[str], dict]:
    res = {"lm_flat": lm_flat(cs)}
    lines = ["| finding | verdict | the numbers behind it |", "|---|---|---|"]
    f = res["lm_flat"]
    per = "; ".join(f"{m} range {v['range']:.3f} vs 2x spread {_g(None if v['spread'] is None else 2 * v['spread'])}"
                    + ("" if v["flat"] is None else " flat" if v["flat"] else " not flat") for m, v in f["per_mixer"].items())
    lines.append(f"| (i) LM quality flat across ratios | {f['verdict']} | flat (val loss range over ratios within 2x its "
                 f"seed spread) for {len(f['flat'])} of {len(f['judged'])} mixers with 2 val-loss seeds; {per or 'no mixer with 2 ratios'}; "
                 f"range between the mixers' mean val loss {_g(f['between_mixers'])} |")
    for measure in MEASURES:
        if not any(c.get(measure) is not None for c in cs.values()):
            continue
        r = rises(cs, measure)
        res[f"rises_{measure}"] = r
        per = "; ".join(f"{m} rho {_g(v['rho'], '+.2f')}, {_fmt_cell(cs, m, v['from'], measure)} -> {v['to']} "
                        f"{recall_text(cs[(m, v['to'])], measure)}, gap {v['gap']:+.3f} vs 2x spread {2 * v['spread']:.3f}"
                        f"{' rises' if v['rises'] else ''}" for m, v in r["per_mixer"].items())
        lines.append(f"| (ii) {measure} rises with the attention share | {r['verdict']} | {len(r['rising'])} of "
                     f"{len(r['per_mixer'])} mixers rise beyond 2x the seed spread; {per or 'no mixer with 3 ratios'} |")
    for measure in MEASURES:
        if not any(c.get(measure) is not None for c in cs.values()):
            continue
        for how in ("3:1", "average"):
            b = best_pure_vs_hybrid(cs, measure, how)
            res[f"best_{measure}_{how}"] = b
            what = "at 3:1" if how == "3:1" else "averaged over 24:1..3:1"
            if b["pure"] is None:
                nums = "no pure model or no hybrid scored"
            else:
                best = (recall_text(cs[(b["hybrid"], "3:1")], measure) if how == "3:1" else f"{b['hybrid_value']:.3f}")
                nums = f"best pure: {_fmt_cell(cs, b['pure'], 'pure', measure)}"
                if b.get("pure_tied"):
                    nums += f" (tied within 2x spread with {', '.join(b['pure_tied'])})"
                nums += f"; best hybrid {what}: {b['hybrid']} {best}"
                if "runner_up" in b:
                    nums += (f"; {b['pure']}'s own {b['own']:.3f} leads {b['runner_up']}'s {b['runner_up_value']:.3f} by "
                             f"{b['margin']:+.3f} vs 2x spread {2 * b['spread']:.3f}")
                elif "margin" in b:
                    nums += (f"; {b['pure']}'s own {b['own']:.3f}, margin {b['margin']:+.3f} vs 2x spread "
                             f"{2 * b['spread']:.3f}")
                else:
                    nums += f"; {b.get('note', '')}"
            lines.append(f"| (iii) best standalone mixer is not the best hybrid ({measure}, {what}) | {b['verdict']} | {nums} |")
    return lines, res


# -- cost -----------------------------------------------------------------------------------------


def cost(rows: list[dict], target: float = TARGET_GPU_S) -> dict:
    """GPU-seconds per candidate (mean, max) and per grid seed, from the rows that trained the LM and the recall
    proxy (recall-only rows, e.g. calibration's extra seeds, are counted apart)."""
    # the best measure given: the utilisation's share (measured), wall / concurrency (an estimate), wall seconds
    col = next((c for c in ("gpu_s_util", "gpu_s_est") if any(_f(r.get(c)) is not None for r in rows)), "gpu_s")
    per_seed: dict[str, dict] = {}
    unmeasured = []  # rows that ran (a wall time) but have no value in the column: not counted, and said so
    for r in rows:
        g = _f(r.get(col))
        if g is None:
            if _f(r.get("gpu_s")) is not None:
                unmeasured.append(f"{r.get('mixer')} {r.get('ratio')} seed {r.get('seed') or '0'}")
            continue
        s = per_seed.setdefault(str(r.get("seed") or "0"), {"full": [], "recall_only": []})
        (s["full"] if _f(r.get("train_wall_s")) is not None else s["recall_only"]).append((g, r))
    full = [g for s in per_seed.values() for g, _ in s["full"]]
    conc = next((r.get("concurrency") for r in rows if r.get("concurrency")), None)
    out = {"column": col, "concurrency": conc, "per_seed": {}, "target": target,
           "mean": mean(full) if full else None, "max": max(full) if full else None, "n": len(full),
           "unmeasured": unmeasured}
    for seed, s in per_seed.items():
        g = [x for x, _ in s["full"]]
        top = max(s["full"], key=lambda t: t[0])[1] if s["full"] else None
        out["per_seed"][seed] = {"n": len(g), "total": sum(g), "mean": mean(g) if g else None, "max": max(g) if g else None,
                                 "max_of": None if top is None else f"{top['mixer']} {top['ratio']}",
                                 "recall_only_n": len(s["recall_only"]), "recall_only_total": sum(x for x, _ in s["recall_only"])}
    out["meets"] = None if out["mean"] is None else out["mean"] <= target
    # the card each counted run trained on: a study's calls may land on different cards, whose seconds differ
    out["cards"] = dict(Counter(r.get("device_name") or "unrecorded" for s in per_seed.values()
                                for _, r in (*s["full"], *s["recall_only"])).most_common())
    return out


def cost_lines(c: dict) -> list[str]:
    what = {"gpu_s_util": "`gpu_s_util` = the GPU's sampled utilisation split among the jobs active at each sample "
                          "(collect.py --util; measured)",
            "gpu_s_est": f"`gpu_s_est` = wall seconds / {c['concurrency']} (runs sharing the GPU; an estimate)"}.get(
        c["column"], "`gpu_s` = wall seconds of the recall proxy + LM training (overstates the cost when runs shared the GPU)")
    lines = [f"GPU-seconds per candidate: {what}.", "",
             "| seed | candidates (LM + recall) | total | mean | max | recall-only runs (total) |", "|---|---|---|---|---|---|"]
    for seed, s in sorted(c["per_seed"].items()):
        lines.append(f"| {seed} | {s['n']} | {s['total']:.0f} | {_g(s['mean'], '.1f')} | {_g(s['max'], '.1f')}"
                     f"{'' if s['max_of'] is None else ' (' + s['max_of'] + ')'} | {s['recall_only_n']} ({s['recall_only_total']:.0f}) |")
    if c["mean"] is None:
        lines += ["", "No candidate with both parts of its cost recorded: the target cannot be checked."]
    else:
        lines += ["", f"Mean {c['mean']:.1f}, max {c['max']:.1f} over {c['n']} candidate runs: "
                      f"{'meets' if c['meets'] else 'misses'} the target of <= {c['target']:.0f} GPU-s per candidate on average."]
    if c.get("unmeasured"):
        lines += ["", f"Not counted: {len(c['unmeasured'])} run(s) with wall seconds but no `{c['column']}` "
                      f"({', '.join(c['unmeasured'])}): the utilisation files do not cover a run they need."]
    if c.get("cards"):
        known = [k for k in c["cards"] if k != "unrecorded"]
        parts = [f"{k} {n}" if k != "unrecorded" else f"{n} unrecorded (runs from before hlnas stored the card)"
                 for k, n in c["cards"].items()]
        lines += ["", "Cards (runs counted above): " + ", ".join(parts)
                  + (". **Seconds of different cards are mixed.**" if len(known) > 1 else ".")]
    return lines


# -- the report -----------------------------------------------------------------------------------


def compare(rows: list[dict]) -> str:
    check_columns(rows)
    cs = cells(rows)
    seeds = sorted({str(r.get("seed") or "0") for r in rows})
    out = [f"# The study's grid against the paper ({PAPER})", "",
           f"{len(cs)} cells scored ok over seeds {', '.join(seeds)}. Spread = max - min over the seeds (floor "
           f"{SPREAD_FLOOR} in the findings). Corrected recall and recall_auc are 0 at the no-recall baseline.", "",
           "## The cells", "",
           "| mixer | ratio | seeds | recall raw | no-recall | recall (corrected) | spread | recall_auc | spread | steps to target "
           "| val loss | spread | |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    measured = any(c.get("mqar_steps_to_target_n") for c in cs.values())
    for (m, q), c in sorted(cs.items(), key=lambda kv: (_mixers(cs).index(kv[0][0]) if kv[0][0] in _mixers(cs) else 99,
                                                        RATIOS.index(kv[0][1]) if kv[0][1] in RATIOS else 9)):
        out.append(f"| {m} | {q} | {c['n']} | {_g(c['recall_raw'])} | {_g(c['recall_baseline'])} | {_g(c['recall'])} | "
                   f"{_g(c['recall_spread'])} | {_g(c['recall_auc'])} | {_g(c['recall_auc_spread'])} | "
                   f"{_steps(c, measured)} | {_g(c['val_loss'])} | {_g(c['val_loss_spread'])} | {_mark(c)} |")
    t7 = recall_by_ratio()
    out += ["", "## Spearman rank correlation with the paper's Table 7 (RULER average), beside the attention share", "",
            f"Every (mixer, ratio) cell both have (Table 7: {', '.join(m for m in t7 if m != 'average')} x 5 ratios), seed "
            f"means; 95% intervals: {BOOTSTRAP} bootstrap resamples of the cells (seed 0). The attention share alone is "
            "a predictor that trains nothing (pure 0, r:1 1/r); the partial rho holds it fixed. Computed by "
            "`hlnas validate` (hlnas.analysis.validate); split cells: a seed with corrected recall >= "
            f"{LEARNED} and another below.", ""]
    out += table7_lines(cs)
    missing = [f"{m} {q}" for m in t7 if m != "average" for q in RATIOS if (m, q) not in cs]
    out += ["", f"Table 7 cells not scored here: {', '.join(missing) if missing else 'none'}.", "",
            "## The paper's three findings at this scale", ""]
    lines, _ = findings_table(cs)
    out += lines
    lm6 = lm_by_ratio()
    paper = [f"{m} rho {spearman_rho([attention_share(q) for q in RATIOS], [t7[m][q] for q in RATIOS]):+.2f}"
             for m in t7 if m != "average"]
    pp = {m: t7[m]["pure"] for m in t7 if m != "average"}
    p3 = {m: t7[m]["3:1"] for m in t7 if m != "average"}
    out += ["", f"The paper (Table 7, recall vs attention share): {'; '.join(paper)}. Best pure {max(pp, key=pp.get)}, "
                f"best 3:1 {max(p3, key=p3.get)}. Table 6 LM range over ratios: "
                + "; ".join(f"{m} {max(v.values()) - min(v.values()):.3f}" for m, v in lm6.items() if m != "average") + ".",
            "", "## Cost (issue #20 point 7)", ""]
    out += cost_lines(cost(rows))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True, help="a CSV written by collect.py")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    try:
        text = compare(read_table(args.table))
    except TableError as e:
        print(f"compare.py: {args.table}: {e}", file=sys.stderr)
        return 2
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
