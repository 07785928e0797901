"""A grid CSV (collect.py, both seeds) as one figure: each mixer's recall against the attention ratio, a marker per
seed, so a cell whose seeds disagree shows as two markers far apart rather than as one misleading mean.

    python -m experiments.paper_grid.grid_figure --table experiments/results/grid_h200_lr_<date>/grid.csv \
        --out experiments/results/grid_h200_lr_<date>/grid_seeds.png

Top row: raw recall with the no-recall baseline dashed (a marker at or under it is no recall). Bottom row:
``recall_auc``, the graded measure (corrected: 0 is the baseline). The line joins the seed means. A cell marked
``seeds split`` by compare.py (corrected recall >= 0.5 in some seeds only) is ringed. The Transformer, which has no
ratio, is drawn in its own column.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean

from experiments.paper_grid.compare import RATIOS, TableError, cells, check_columns, read_table, seeds_split
from hlnas.analysis.figure_style import write_png

__all__ = ["series", "figure", "main"]

SYMBOLS = ("circle", "diamond", "square", "triangle-up", "cross")


def series(rows: list[dict]) -> dict[str, dict[str, dict[str, dict]]]:
    """mixer -> ratio (in RATIOS order; 'full' for the Transformer) -> seed -> that run's recall_raw, recall_baseline,
    recall and recall_auc; rows not scored ok are left out."""
    check_columns(rows)
    order = {q: i for i, q in enumerate((*RATIOS, "full"))}
    out: dict[str, dict[str, dict[str, dict]]] = {}
    for (mixer, ratio), c in sorted(cells(rows).items(), key=lambda kv: order.get(kv[0][1], len(order))):
        if ratio in order:  # compare.cells read the rows: the ones scored ok, with a recall
            out.setdefault(mixer, {})[ratio] = {str(v["seed"]): v for v in c["runs"]}
    return out


def split(cell: dict[str, dict]) -> bool:
    """compare.py's ``seeds split`` (:func:`~experiments.paper_grid.compare.seeds_split`) of one cell's seeds."""
    return seeds_split([v["recall"] for v in cell.values()])


def figure(rows: list[dict]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from hlnas.analysis.figure_style import MIXER_COLORS

    data = series(rows)
    if not data:
        raise TableError("no row scored ok with a recall: nothing to draw")
    mixers = sorted(data, key=lambda m: (m == "transformer", m))
    seeds = sorted({s for cells in data.values() for c in cells.values() for s in c})
    fig = make_subplots(rows=2, cols=len(mixers), shared_yaxes=True, horizontal_spacing=0.02, vertical_spacing=0.1,
                        subplot_titles=mixers)
    for col, m in enumerate(mixers, start=1):
        cells, color = data[m], MIXER_COLORS.get(m, "#444")
        ratios = list(cells)
        axis = list(RATIOS) if m != "transformer" else ratios  # None at an untrained ratio breaks the line there
        for row, measure in ((1, "recall_raw"), (2, "recall_auc")):
            means = [mean(v[measure] for v in cells[q].values() if v[measure] is not None)
                     if q in cells and any(v[measure] is not None for v in cells[q].values()) else None for q in axis]
            fig.add_trace(go.Scatter(x=axis, y=means, mode="lines", line=dict(color=color, width=1.5),
                                     showlegend=False, hoverinfo="skip"), row=row, col=col)
            for i, seed in enumerate(seeds):
                xs = [q for q in ratios if seed in cells[q] and cells[q][seed][measure] is not None]
                fig.add_trace(go.Scatter(
                    x=xs, y=[cells[q][seed][measure] for q in xs], mode="markers", name=f"seed {seed}",
                    legendgroup=f"seed {seed}", showlegend=col == 1 and row == 1,
                    marker=dict(symbol=SYMBOLS[i % len(SYMBOLS)], size=9, color=color)), row=row, col=col)
            ringed = [q for q in ratios if split(cells[q])]
            if ringed:
                fig.add_trace(go.Scatter(
                    x=ringed, y=[max(v[measure] or 0.0 for v in cells[q].values()) for q in ringed], mode="markers",
                    name="seeds split", legendgroup="split", showlegend=False,
                    marker=dict(symbol="circle-open", size=20, color="#d62728", line=dict(width=2))), row=row, col=col)
        if m != "transformer":  # every ratio on the axis, so an untrained cell shows as a gap, not a shorter axis
            for row in (1, 2):
                fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(RATIOS), range=[-0.5, 4.5],
                                 row=row, col=col)
        base = [v["recall_baseline"] for c in cells.values() for v in c.values() if v["recall_baseline"] is not None]
        if base:
            fig.add_hline(y=max(base), line_dash="dash", line_color="#888", row=1, col=col)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="seeds split (ringed)",
                             marker=dict(symbol="circle-open", size=14, color="#d62728", line=dict(width=2))), row=1, col=1)
    fig.update_yaxes(title_text="recall (raw; dashed: no-recall baseline)", row=1, col=1, range=[-0.02, 1.05])
    fig.update_yaxes(title_text="recall_auc (corrected)", row=2, col=1, range=[-0.02, 1.05])
    fig.update_layout(title="The grid per mixer against the attention ratio: every seed a marker, the line through their means",
                      template="plotly_white", legend=dict(orientation="h", y=-0.1),
                      width=260 + 230 * len(mixers), height=720)
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", required=True, help="a CSV written by collect.py (one row per candidate and seed)")
    ap.add_argument("--out", required=True, help="the PNG to write (.html for the interactive figure)")
    args = ap.parse_args(argv)
    try:
        fig = figure(read_table(args.table))
    except TableError as e:
        print(f"grid_figure.py: {args.table}: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".html":
        fig.write_html(out, include_plotlyjs="cdn")
    else:
        write_png(fig, out, scale=2)  # at the figure's own size
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
