"""Does placement move recall? A placement study's CSV (collect.py, both seeds) -> the answer of issue #20 point 5.

    python -m experiments.paper_grid.collect --storage sqlite:///.gpu_state/h200.db --study placement_h200_lr \
        --seed-study placement_h200_lr_s1 --out DIR/placement.csv
    python -m experiments.paper_grid.placement --table DIR/placement.csv --out DIR

Per (mixer, ratio), the placements of its attention layers (collect.py's ``placement`` column: ``paper``, ``front``,
``back``, ``middle``, ``spread`` or ``explicit:i,j``) hold the same number of attention layers, so the same KV cache:
only where they sit differs. For each measure (the final ``recall``, corrected for its no-recall baseline, and the
graded ``recall_auc``) it asks the calibration's question of the best and the worst placement by seed mean: is the
best above the worst in every seed, and are their means apart by more than twice the larger seed spread (max - min
over seeds, at least 0.01: ``hlnas.calibration.outlook.pure_below``)? ``yes`` then; ``no`` when not; ``undecided``
when either has fewer than two seeds. The LM half's ``val_loss`` (lower is better) gets the same question, so a
placement that buys recall with LM quality shows as both (rows without an LM half, a calibration's recall-only runs,
have none). Each other placement is also set against ``paper`` by the same rule (``above``,
``below`` or ``tie``). Raw recall is printed beside its no-recall baseline; a placement at or below it in a seed is
marked ``no recall``.

Writes ``placement.md`` (the tables and verdicts) and ``placement.png`` (raw recall with the baseline, and recall_auc,
per placement and seed) into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean

from experiments.paper_grid.compare import SPREAD_FLOOR, TableError, _f, _g, check_columns, read_table
from hlnas.calibration.outlook import pure_below
from hlnas.analysis.figure_style import write_png
from hlnas.model.layout import PLACEMENTS

MEASURES = ("recall", "recall_auc", "val_loss")
LOWER_IS_BETTER = {"val_loss"}
_VALUES = ("recall", "recall_raw", "recall_baseline", "recall_auc", "mqar_steps_to_target", "val_loss")


def groups(rows: list[dict]) -> dict[tuple[str, str], dict[str, dict]]:
    """(mixer, ratio) -> placement -> ``{"layers": attention layers, "seeds": {seed: values}}``, over the rows scored
    ok with a placement (hybrids of one mixer; pure models and the Transformer have none); groups in the table's order,
    placements in :data:`hlnas.model.layout.PLACEMENTS`' order, then the explicit sets."""
    check_columns(rows)
    if "placement" not in rows[0]:
        raise TableError("the table has no 'placement' column (collect.py writes it since 2026-12-05: collect again)")
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for i, r in enumerate(rows, start=2):
        if r["status"] != "ok" or not r.get("placement"):
            continue
        try:
            vals = {k: _f(r.get(k)) for k in _VALUES}
        except ValueError as e:
            raise TableError(f"row {i}: {e}") from None
        if vals["recall"] is None:
            continue
        cell = out.setdefault((r["mixer"], r["ratio"]), {}).setdefault(
            r["placement"], {"layers": r.get("attention_layers") or "", "layout": r.get("layout") or "", "seeds": {}})
        cell["seeds"][str(r.get("seed") or "0")] = vals
    # one order in every group, table and panel: hlnas.model.layout's strategies, then the explicit sets
    rank = {name: i for i, name in enumerate(PLACEMENTS)}
    return {key: dict(sorted(places.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
            for key, places in out.items()}


def _per_seed(cell: dict, measure: str) -> dict[str, float]:
    return {s: v[measure] for s, v in cell["seeds"].items() if v.get(measure) is not None}


def compare_pair(low: dict, high: dict, measure: str) -> dict:
    """``high`` above ``low`` on ``measure`` by the calibration's rule: every seed, and the means apart by more than
    twice the larger seed spread. ``holds`` is None when either has fewer than two seeds (no spread to judge by)."""
    lo, hi = _per_seed(low, measure), _per_seed(high, measure)
    if not lo or not hi:
        return {"holds": None, "gap": None, "need": None}
    holds, gap, need = pure_below(lo, hi, SPREAD_FLOOR)
    return {"holds": holds if min(len(lo), len(hi)) >= 2 else None, "gap": gap, "need": need}


def verdict(places: dict[str, dict], measure: str) -> dict:
    """Best and worst placement by seed mean (lowest best for :data:`LOWER_IS_BETTER`) and whether placement moves
    ``measure``, the highest mean above the lowest by :func:`compare_pair`: yes / no / undecided."""
    means = {p: mean(xs.values()) for p, c in places.items() if (xs := _per_seed(c, measure))}
    if len(means) < 2:
        return {"answer": "undecided", "why": "fewer than two placements scored", "best": None, "worst": None}
    order = sorted(means, key=means.get)  # stable: two placements even where every mean is equal
    best, worst = (order[0], order[-1]) if measure in LOWER_IS_BETTER else (order[-1], order[0])
    pair = compare_pair(places[order[0]], places[order[-1]], measure)
    answer = "undecided" if pair["holds"] is None else ("yes" if pair["holds"] else "no")
    why = (f"best {best} {means[best]:.3f}, worst {worst} {means[worst]:.3f}: gap {abs(pair['gap']):.3f}"
           + ("" if pair["need"] is None else f" vs twice the spread {pair['need']:.3f}")
           + (" (fewer than two seeds)" if pair["holds"] is None else ""))
    return {"answer": answer, "why": why, "best": best, "worst": worst, "means": means, **pair}


def versus_paper(places: dict[str, dict], name: str, measure: str) -> str:
    """``above`` / ``below`` the paper placement beyond the spread, ``tie`` within it, ``-`` without two seeds (for
    ``val_loss`` above is worse)."""
    if name == "paper" or "paper" not in places:
        return "-"
    up = compare_pair(places["paper"], places[name], measure)
    down = compare_pair(places[name], places["paper"], measure)
    if up["holds"] is None:
        return "-"
    return "above" if up["holds"] else "below" if down["holds"] else "tie"


LEARNED, NEVER = 0.5, 0.1  # corrected recall: above LEARNED in every seed learned; under NEVER (take_off.py's take-off
# level: the K=64 plateau sits at 0-0.02 corrected) in every seed never left the no-recall plateau


def first_attention_split(places: dict[str, dict]) -> dict:
    """Does the depth of the first attention layer decide whether a placement learns recall? Each placement whose
    corrected recall is above :data:`LEARNED` in every seed counts as learned, each under :data:`NEVER` in every seed as
    never. ``split``: ``early`` when every learned placement's first attention layer comes before every never one's
    (the H200 protocol's HGRN-2 6:1), ``late`` when after (the CPU twin, where attention in layer 0 never learned),
    False when they interleave, None when one side is empty (nothing to split)."""
    learned, never = [], []
    for c in places.values():
        rec = list(_per_seed(c, "recall").values())
        first = min((int(i) for i in str(c["layers"]).split()), default=None)
        if not rec or first is None:
            continue
        if min(rec) > LEARNED:
            learned.append(first)
        elif max(rec) < NEVER:
            never.append(first)
    d = {"split": None, "learned": sorted(learned), "never": sorted(never)}
    if learned and never:
        d["split"] = "early" if max(learned) < min(never) else "late" if max(never) < min(learned) else False
    return d


def _split_text(d: dict) -> str:
    learned, never = (", ".join(map(str, d[k])) or "none" for k in ("learned", "never"))
    firsts = f"First attention layer of the placements that learned in every seed: {learned}; that never did: {never}"
    if d["split"] == "early":
        return (f"{firsts}: **recall came only with an attention layer by layer {max(d['learned'])}** (none learned "
                f"with the first at {min(d['never'])} or later).")
    if d["split"] == "late":
        return (f"{firsts}: **recall came only with the first attention layer at {min(d['learned'])} or later** "
                f"(none learned with it at {max(d['never'])} or earlier).")
    return f"{firsts}." if d["split"] is None else f"{firsts}: the first attention layer's depth does not separate them."


def _seeds_text(cell: dict, measure: str, spec: str = ".3f") -> str:
    return " / ".join(_g(v.get(measure), spec) for _, v in sorted(cell["seeds"].items()))


def _no_recall(cell: dict) -> str:
    s = [seed for seed, v in sorted(cell["seeds"].items()) if v["recall"] <= 0.0]
    return "" if not s else "no recall" if len(s) == len(cell["seeds"]) else f"no recall in seed {', '.join(s)}"


def report(rows: list[dict], source: str = "the table") -> tuple[str, dict]:
    """The markdown and ``{(mixer, ratio): {measure: verdict}}``."""
    gs = groups(rows)
    if not gs:
        raise TableError("no hybrid row scored ok with a placement: nothing to compare")
    seeds = sorted({s for places in gs.values() for c in places.values() for s in c["seeds"]})
    out = ["# Does placement move recall? (issue #20 point 5)", "",
           f"From `{source}`; seeds {', '.join(seeds)}. Per mixer and ratio every placement has the same number of "
           "attention layers (the same KV cache). Raw recall per seed (seed " + " / ".join(seeds) + ") beside its "
           "no-recall baseline; corrected recall and `recall_auc` are 0 at the baseline. Verdicts: the best placement "
           "above the worst in every seed and by more than twice the larger seed spread (at least 0.01), as "
           "`hlnas calibrate` separates a pure model from its hybrid; `vs paper`: the same rule against the paper "
           "placement.", "",
           "| mixer | ratio | placement moves recall | placement moves recall_auc | placement moves val_loss (LM) |",
           "|---|---|---|---|---|"]
    verdicts = {key: {m: verdict(places, m) for m in MEASURES} for key, places in gs.items()}
    for (mixer, ratio), v in verdicts.items():
        out.append(f"| {mixer} | {ratio} | " + " | ".join(f"**{v[m]['answer']}**: {v[m]['why']}" for m in MEASURES) + " |")
    for (mixer, ratio), places in gs.items():
        out += ["", f"## {mixer} {ratio}", "",
                "| placement | attention layers | raw recall | no-recall | corrected (mean) | vs paper | recall_auc | "
                "mean | vs paper | steps to target | val_loss | vs paper | |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, c in places.items():
            rec, auc = _per_seed(c, "recall"), _per_seed(c, "recall_auc")
            base = {v["recall_baseline"] for v in c["seeds"].values() if v.get("recall_baseline") is not None}
            steps = " / ".join("never" if v.get("mqar_steps_to_target") is None else f"{v['mqar_steps_to_target']:.0f}"
                               for _, v in sorted(c["seeds"].items()))
            out.append(f"| {name} | {c['layers']} | {_seeds_text(c, 'recall_raw')} | "
                       f"{', '.join(f'{b:.3f}' for b in sorted(base)) or '-'} | {_g(mean(rec.values()))} | "
                       f"{versus_paper(places, name, 'recall')} | {_seeds_text(c, 'recall_auc')} | "
                       f"{_g(mean(auc.values()) if auc else None)} | {versus_paper(places, name, 'recall_auc')} | "
                       f"{steps} | {_seeds_text(c, 'val_loss')} | {versus_paper(places, name, 'val_loss')} | "
                       f"{_no_recall(c)} |")
        out += ["", _split_text(first_attention_split(places))]
    moved = {m: sum(v[m]["answer"] == "yes" for v in verdicts.values()) for m in MEASURES}
    decided = {m: sum(v[m]["answer"] != "undecided" for v in verdicts.values()) for m in MEASURES}
    out += ["", f"Placement moves the final recall beyond the seed spread in {moved['recall']} of {decided['recall']} "
                f"decided (mixer, ratio) groups, `recall_auc` in {moved['recall_auc']} of {decided['recall_auc']} and "
                f"the LM's `val_loss` in {moved['val_loss']} of {decided['val_loss']}, of {len(verdicts)}."]
    return "\n".join(out) + "\n", verdicts


def figure(rows: list[dict]):
    """Raw recall (the no-recall baseline dashed), recall_auc and the LM's val_loss per placement, a column per
    (mixer, ratio), a marker per seed."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from hlnas.analysis.figure_style import MIXER_COLORS

    gs = groups(rows)
    keys = list(gs)
    fig = make_subplots(rows=3, cols=len(keys), shared_yaxes=True, horizontal_spacing=0.03, vertical_spacing=0.12,
                        subplot_titles=[f"{m} {r}" for m, r in keys])
    symbols = ("circle", "diamond", "square", "triangle-up")
    seeds = sorted({s for places in gs.values() for c in places.values() for s in c["seeds"]})
    for col, key in enumerate(keys, start=1):
        places = gs[key]
        names = list(places)
        for row, measure in ((1, "recall_raw"), (2, "recall_auc"), (3, "val_loss")):
            for i, seed in enumerate(seeds):
                xs = [n for n in names if places[n]["seeds"].get(seed, {}).get(measure) is not None]
                if not xs:
                    continue
                fig.add_trace(go.Scatter(
                    x=xs, y=[places[n]["seeds"][seed][measure] for n in xs], mode="markers", name=f"seed {seed}",
                    legendgroup=f"seed {seed}", showlegend=col == 1 and row == 1,
                    marker=dict(symbol=symbols[i % len(symbols)], size=9, color=MIXER_COLORS.get(key[0], "#444")),
                    hovertext=[places[n]["layout"] for n in xs]), row=row, col=col)
            # an explicit placement's name lists its layers, too long for a tick beside the next column's: the
            # layers are in its hover text and in placement.md
            fig.update_xaxes(tickvals=names, ticktext=[n.split(":")[0] for n in names], row=row, col=col)
            if row == 1:
                base = [v["recall_baseline"] for n in names for v in places[n]["seeds"].values()
                        if v.get("recall_baseline") is not None]
                if base:
                    fig.add_hline(y=max(base), line_dash="dash", line_color="#888", row=1, col=col)
    fig.update_yaxes(title_text="recall (raw; dashed: no-recall baseline)", row=1, col=1, range=[0, 1.05])
    fig.update_yaxes(title_text="recall_auc (corrected)", row=2, col=1, range=[0, 1.05])
    losses = [v["val_loss"] for places in gs.values() for c in places.values() for v in c["seeds"].values()
              if v.get("val_loss") is not None]
    pad = 0.1 * (max(losses) - min(losses)) + 0.05 if losses else 0.0
    fig.update_yaxes(title_text="val_loss (LM half; lower is better)", row=3, col=1,
                     range=[min(losses) - pad, max(losses) + pad] if losses else None)
    fig.update_layout(title="Placement of the attention layers at a fixed ratio: recall and the LM half per seed",
                      template="plotly_white", legend=dict(orientation="h", y=-0.12),
                      width=300 + 260 * len(keys), height=1050)
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True, help="a CSV written by collect.py from a placement study (both seeds)")
    ap.add_argument("--out", help="folder for placement.md and placement.png")
    ap.add_argument("--no-png", action="store_true", help="skip the figure (it needs Chromium for kaleido)")
    args = ap.parse_args(argv)
    try:
        rows = read_table(args.table)
        text, _ = report(rows, args.table)
    except TableError as e:
        print(f"placement.py: {args.table}: {e}", file=sys.stderr)
        return 2
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "placement.md").write_text(text)
        if not args.no_png:
            write_png(figure(rows), out / "placement.png", scale=2)  # at the figure's own size
    return 0


if __name__ == "__main__":
    sys.exit(main())
