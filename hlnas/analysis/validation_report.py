"""A :class:`hlnas.analysis.validate.Validation` as text (what ``hlnas validate`` prints) and as a JSON record.

Every recall value is printed beside its no-recall baseline where the source records one: a corrected recall of 0
means "at the baseline", and the raw value says how far the baseline is from 0.
"""

from __future__ import annotations

from hlnas.analysis.validate import Cell, Correlation, Validation

__all__ = ["validation_text", "validation_record", "cell_text", "rho_text", "within_ratio_text", "saturation_line",
           "seed_lines", "seed_draws_text", "summary_lines"]


def _g(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def rho_text(c: Correlation) -> str:
    """``+0.615 [+0.20, +0.85]``: rho and its bootstrap interval."""
    if c.rho is None:
        return "undefined (a column is constant)"
    ci = "" if c.lo is None else f" [{c.lo:+.2f}, {c.hi:+.2f}]"
    return f"{c.rho:+.3f}{ci}" + (f" ({c.dropped} tied resamples dropped)" if c.dropped else "")


def cell_text(c: Cell, measure: str) -> str:
    """A cell's proxy value with its raw recall and no-recall baseline beside it, where the runs record them."""
    extra = [f"raw {c.raw:.3f}" if c.raw is not None else "", f"no-recall {c.baseline:.3f}" if c.baseline is not None else ""]
    extra = ", ".join(e for e in extra if e)
    return f"{c.name} {measure} {c.value:.3f}" + (f" ({extra})" if extra else "")


def _runs_text(c: Cell, on: str) -> str:
    vals = ", ".join(f"seed {r.seed} {(r.recall if on == 'recall' and r.recall is not None else r.value):.3f}"
                     for r in c.runs)
    base = f", no-recall {c.baseline:.3f}" if c.baseline is not None else ""
    return f"{c.name} ({vals}{base})"


def within_ratio_text(v: Validation) -> str:
    """``mean +0.21 over 5 ratios (pure +0.55, ...)``: Kendall tau of the mixer order at each ratio."""
    w = v.within_ratio
    if w["mean"] is None:
        return "no ratio with 2 mixers in common"
    per = ", ".join(f"{q} {d['tau']:+.2f}" + (" (tied)" if d["tied"] else "") for q, d in w["per_ratio"].items())
    return f"mean {w['mean']:+.2f} over {len(w['per_ratio'])} ratios ({per})"


def saturation_line(v: Validation) -> str:
    s = v.saturation
    flag = (f"**saturated**: more than {s['max_fraction']:.0%} of the cells tie with the best" if s["saturated"]
            else f"not saturated (at most {s['max_fraction']:.0%})")
    return (f"- saturation: {s['count']} of {s['of']} proxy cells ({s['fraction']:.0%}) within {s['tolerance']} of the "
            f"best, {cell_text(s['best'], v.proxy.measure)}; {s['shared_count']} of the {s['shared_of']} cells in "
            f"common: {flag}")


def summary_lines(v: Validation) -> list[str]:
    """rho of the proxy, of the attention share alone, the partial rho, the mixer order within a ratio, saturation."""
    return [
        f"- Spearman rho, proxy {v.proxy.measure} vs reference: {rho_text(v.proxy_rho)} (n = {v.proxy_rho.n})",
        f"- Spearman rho, attention share alone (trains nothing) vs reference: {rho_text(v.share_rho)}",
        *([f"- Spearman rho, the share then recurrent-state bytes at {v.settings['state_preset']} (trains nothing) vs "
           f"reference: {rho_text(v.state_rho)}"] if v.state_rho is not None else []),
        f"- partial rho, proxy vs reference with the attention share held fixed: {rho_text(v.partial_rho)}",
        f"- mixer order within a ratio, Kendall tau: {within_ratio_text(v)}",
        saturation_line(v),
    ]


def seed_lines(v: Validation, *, draws: bool = True) -> list[str]:
    """Seed self-consistency, split cells and (``draws``) the spread of rho over seed choices."""
    sd, m = v.seeds, v.proxy.measure
    if len(sd["seeds"]) < 2:
        return [f"- seeds: one ({', '.join(sd['seeds'])}): seed consistency, split cells and the seed-choice spread "
                "need two"]
    pairs = "; ".join(f"seeds {p['seeds'][0]} and {p['seeds'][1]}: {_g(p['rho'], '+.3f')} over {p['n']} cells"
                      for p in sd["pairs"]) or "no pair with 3 cells"
    on = "corrected recall" if sd["judged_on"] == "recall" else m
    split = sd["split"]
    listed = ": " + "; ".join(_runs_text(c, sd["judged_on"]) for c in split) if split else ""
    lines = [f"- seed self-consistency (Spearman rho between seeds): {_g(sd['consistency'], '+.3f')} ({pairs})",
             f"- split cells (a seed with {on} >= {sd['learned']}, another below): {len(split)}{listed}"]
    if draws:
        lines.append(f"- rho vs reference with one seed per cell, drawn at random: {seed_draws_text(v)}")
    return lines


def seed_draws_text(v: Validation) -> str:
    """rho with the reference when each cell keeps one seed drawn at random: ``+0.34 to +0.73 (median ...)``."""
    d = v.seeds["draws"]
    if not d:
        return "no cell in common has two seeds"
    return f"{d['min']:+.2f} to {d['max']:+.2f} (median {d['median']:+.2f}, {d['draws']} draws)"


def _cost_lines(c: dict) -> list[str]:
    if c["mean"] is None:
        return ["- GPU-seconds per candidate: not recorded by this source"]
    cards = ", ".join(f"{k} {n}" for k, n in c["cards"].items())
    return [f"- GPU-seconds per candidate run: mean {c['mean']:.1f}, max {c['max']:.1f} ({c['max_of']}), total "
            f"{c['total']:.0f} over {c['n']} of {c['runs']} runs; `{c['column']}` = {c['what']}; cards: {cards}"]


def validation_text(v: Validation) -> str:
    """The whole report: what was compared, the statistics, and a table of the cells in common."""
    p, r, m = v.proxy, v.reference, v.proxy.measure
    shared = v.shared
    st = v.settings
    head = [f"# Proxy {p.name} ({m}) against {r.name}", "",
            f"{len(p.runs)} runs over seeds {', '.join(v.seeds['seeds'])} in {len(v.cells)} cells"
            + (f" ({p.skipped} skipped: not scored ok, or no {m})" if p.skipped else "")
            + f"; {len(shared)} cells in common with the reference's {len(r.values)}. Intervals: 95% percentile bootstrap, "
              f"{st['resamples']} resamples of the cells, seed {st['seed']}.", ""]
    lines = head + summary_lines(v) + seed_lines(v) + _cost_lines(v.cost)
    only = [c.name for c in v.cells if c.reference is None]
    lines += ["", f"Not in the reference: {', '.join(only) or 'none'}. Not in the proxy: "
                  f"{', '.join(v.unmatched_reference) or 'none'}.", "",
              f"| cell | reference | proxy {m} | raw recall | no-recall | per seed | attention share | |",
              "|---|---|---|---|---|---|---|---|"]
    near = set(v.saturation["cells"])
    for c in sorted(shared, key=lambda c: (c.mixer, c.share)):
        flags = [f for f, on in (("split", c in v.seeds["split"]), ("saturated", c.name in near)) if on]
        seeds = ", ".join(f"{x.seed}: {x.value:.3f}" for x in c.runs)
        lines.append(f"| {c.name} | {c.reference:.3f} | {c.value:.3f} | {_g(c.raw)} | {_g(c.baseline)} | {seeds} | "
                     f"{c.share:.3f} | {', '.join(flags)} |")
    return "\n".join(lines) + "\n"


def _corr(c: Correlation) -> dict:
    return c._asdict()


def validation_record(v: Validation) -> dict:
    """The numbers as plain JSON types (``hlnas validate --json``)."""
    s, sd = v.saturation, v.seeds
    return {
        "proxy": v.proxy.name, "measure": v.proxy.measure, "reference": v.reference.name, "runs": len(v.proxy.runs),
        "skipped": v.proxy.skipped, "cells": len(v.cells), "cells_in_common": len(v.shared),
        "rho": _corr(v.proxy_rho), "share_rho": _corr(v.share_rho), "partial_rho": _corr(v.partial_rho),
        "state_rho": None if v.state_rho is None else _corr(v.state_rho), "within_ratio": v.within_ratio,
        "saturation": {**{k: s[k] for k in ("tolerance", "count", "of", "fraction", "shared_count", "shared_of",
                                            "max_fraction", "saturated", "cells")},
                       "best": s["best"].name, "best_value": s["best"].value},
        "seeds": {"seeds": sd["seeds"], "pairs": sd["pairs"], "consistency": sd["consistency"],
                  "learned": sd["learned"], "judged_on": sd["judged_on"],
                  "split": [c.name for c in sd["split"]], "draws": sd["draws"]},
        "cost": v.cost, "not_in_proxy": list(v.unmatched_reference),
        "not_in_reference": [c.name for c in v.cells if c.reference is None], "settings": v.settings,
        "cell_values": [{"cell": c.name, "layout": c.layout, "reference": c.reference, "value": c.value, "raw": c.raw,
                         "baseline": c.baseline, "share": c.share, "seeds": {r.seed: r.value for r in c.runs}}
                        for c in v.cells],
    }
