"""When each run of the grid's boundary cells left MQAR's no-recall plateau, per seed: the curves and a table.

At 24:1 and 12:1 the grid's two seeds disagreed in 4 cells (session 26, ``compare.py``'s ``seeds split``): one seed
learned, the other sat on the plateau for the whole 4000-step budget. The final recall says only which side of the
budget a take-off fell; the curves say when it came, which is what more seeds or a longer budget would have to beat.

    python -m experiments.paper_grid.take_off --storage sqlite:///experiments/paper_grid/results/h200_2026-12-05c.db \\
        --study paper_grid_h200_lr --seed-study paper_grid_h200_lr_s1 --out experiments/results/<folder>

writes ``take_off.md`` (per cell and seed: the take-off step, the step it reached its best, the final corrected
recall) and ``take_off.png`` (corrected recall against steps, a panel per mixer, a colour per ratio, a dash per seed).
Curves are each trial's stored checks (``hlnas_checks``, else its stored recall run), corrected for the no-recall
baseline (0 = no recall), so the take-off level, 0.1 corrected, is well above the plateau (0-0.02 here).

``--by-placement`` reads a placement study (``placement_h200_lr`` and its ``_s1``): a row per (mixer and ratio,
placement) and seed, a panel per mixer and ratio, a colour per placement; whether a placement delays the take-off
or only the climb to the stop after it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hlnas.analysis.figure_style import write_png

__all__ = ["TAKE_OFF", "take_off_step", "cell_curves", "table", "figure", "main"]

TAKE_OFF = 0.1  # corrected recall: the K=64 plateau sits at 0-0.02 corrected, a run that learns passes 0.1 in a few checks
DASHES = ("solid", "dash", "dot", "dashdot")
RATIO_COLORS = {"24:1": "#d62728", "12:1": "#1f77b4", "6:1": "#2ca02c", "3:1": "#9467bd", "pure": "#7f7f7f"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def take_off_step(steps, values, level: float = TAKE_OFF) -> int | None:
    """The first check whose corrected recall exceeds ``level``; None if none does."""
    return next((s for s, v in zip(steps, values) if v > level), None)


def cell_curves(studies: dict[int, object], ratios: tuple[str, ...],
                by_placement: bool = False) -> dict[tuple[str, str], dict[int, tuple]]:
    """(mixer, ratio) -> seed -> (steps, corrected recall) of the COMPLETE trials at ``ratios``; ``studies`` maps a
    seed to its :class:`hlnas.analysis.pareto.StudyData`. ``by_placement``: ("mixer ratio", placement) keys instead, in
    :data:`hlnas.model.layout.PLACEMENTS`' order, then the explicit sets."""
    from hlnas.analysis.calibration_figures import curves_info
    from hlnas.model.layout import PLACEMENTS, Layout, placement_of
    from hlnas.analysis.paper import mixer_and_ratio

    out: dict[tuple[str, str], dict[int, tuple]] = {}
    for seed, data in studies.items():
        rec = {r.number: r for r in data.records}
        for ln in curves_info(data, "recall").lines:
            mixer, ratio = mixer_and_ratio(rec[ln.number])
            if ln.status != "ok" or ratio not in ratios or mixer is None:
                continue
            key = (f"{mixer} {ratio}", placement_of(Layout.parse(rec[ln.number].layout)) or "") if by_placement \
                else (mixer, ratio)
            out.setdefault(key, {})[seed] = (ln.steps, ln.values)
    if by_placement:
        rank = {p: i for i, p in enumerate(PLACEMENTS)}
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], rank.get(kv[0][1], len(rank)), kv[0][1])))
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], ratios.index(kv[0][1]))))


def table(curves: dict[tuple[str, str], dict[int, tuple]], names: tuple[str, str] = ("mixer", "ratio")) -> str:
    """Markdown: a row per cell and seed; ``names``: the headers of the key's two parts."""
    lines = [f"| {names[0]} | {names[1]} | seed | took off (corrected > 0.1) at step | best corrected (at step) | "
             "final corrected | checks to |", "|---|---|---|---|---|---|---|"]
    for (mixer, ratio), seeds in curves.items():
        for seed, (steps, values) in sorted(seeds.items()):
            t = take_off_step(steps, values)
            best = max(range(len(values)), key=values.__getitem__)
            lines.append(f"| {mixer} | {ratio} | {seed} | {'never' if t is None else t} | {values[best]:.3f} "
                         f"({steps[best]}) | {values[-1]:.3f} | {steps[-1]} |")
    return "\n".join(lines)


def figure(curves: dict[tuple[str, str], dict[int, tuple]]):
    """A panel per mixer (a key's first part): corrected recall against steps, a colour per ratio (its second part: a
    placement with ``--by-placement``), a dash per seed."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    mixers = list(dict.fromkeys(m for m, _ in curves))
    seconds = list(dict.fromkeys(r for _, r in curves))
    color = {r: RATIO_COLORS.get(r, PALETTE[i % len(PALETTE)]) for i, r in enumerate(seconds)}
    fig = make_subplots(rows=1, cols=len(mixers), subplot_titles=mixers, shared_yaxes=True, horizontal_spacing=0.03)
    shown = set()
    for (mixer, ratio), seeds in curves.items():
        col = mixers.index(mixer) + 1
        for seed, (steps, values) in sorted(seeds.items()):
            key = (ratio, seed)
            fig.add_trace(go.Scatter(
                x=steps, y=values, mode="lines", name=f"{ratio}, seed {seed}", legendgroup=f"{ratio}{seed}",
                showlegend=key not in shown, line=dict(color=color[ratio], width=2,
                                                      dash=DASHES[seed % len(DASHES)]),
                hovertemplate=f"{mixer} {ratio} seed {seed}<br>step %{{x}}: %{{y:.3f}}<extra></extra>"), row=1, col=col)
            shown.add(key)
        fig.add_hline(y=TAKE_OFF, line=dict(color="#999999", dash="dot", width=1), row=1, col=col)
    last = max(steps[-1] for seeds in curves.values() for steps, _ in seeds.values())
    fig.update_xaxes(range=[0, last])  # one step axis for every panel: a take-off's step is compared across mixers
    fig.update_yaxes(range=[-0.03, 1.03])
    fig.update_yaxes(title_text="recall (corrected; 0 = no recall)", row=1, col=1)
    fig.update_xaxes(title_text="recall-model steps")
    fig.update_layout(title="When each run left the no-recall plateau (dotted: the take-off level, 0.1)",
                      template="plotly_white", legend=dict(orientation="h", y=-0.2), width=240 + 260 * len(mixers),
                      height=460)
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", required=True, help="the study database, e.g. sqlite:///FILE.db")
    ap.add_argument("--study", required=True, help="seed 0's study")
    ap.add_argument("--seed-study", action="append", default=[], metavar="NAME",
                    help="another seed's study (seed 1, 2, ... in the order given); repeatable")
    ap.add_argument("--ratios", default="24:1,12:1", help="the ratios to draw, comma-separated (default 24:1,12:1)")
    ap.add_argument("--out", required=True, help="the folder for take_off.md and the figure")
    ap.add_argument("--by-placement", action="store_true", help="a placement study: a row and colour per placement")
    ap.add_argument("--format", choices=("png", "html"), default="png", help="the figure's: take_off.png (default) or "
                    "the interactive take_off.html")
    args = ap.parse_args(argv)
    from hlnas.analysis.pareto import StorageError, UnknownStudyError, load_study, study_data

    ratios = tuple(r.strip() for r in args.ratios.split(",") if r.strip())
    try:
        studies = {i: study_data(load_study(args.storage, n)) for i, n in enumerate([args.study, *args.seed_study])}
    except (StorageError, UnknownStudyError) as e:
        print(f"take_off.py: {e}", file=sys.stderr)
        return 2
    curves = cell_curves(studies, ratios, args.by_placement)
    if not curves:
        print(f"take_off.py: no complete trial at ratios {', '.join(ratios)} in those studies", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "take_off.md").write_text(
        f"# Take-off per cell and seed: {', '.join(ratios)}\n\nStudies: {', '.join(d.name for d in studies.values())} "
        f"(seeds 0-{len(studies) - 1}). Recall corrected for its no-recall baseline (0 = no recall); a run that "
        f"reached the target stopped there (its last check).\n\n"
        f"{table(curves, ('mixer, ratio', 'placement') if args.by_placement else ('mixer', 'ratio'))}\n")
    fig, path = figure(curves), out / f"take_off.{args.format}"
    fig.write_html(path, include_plotlyjs="cdn") if args.format == "html" else write_png(fig, path, scale=2)
    print(f"wrote {out / 'take_off.md'} and {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
