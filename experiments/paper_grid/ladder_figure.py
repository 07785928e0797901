"""Steps to target against the number of attention layers, per mixer and seed: the figure of a recall protocol's
ladder (issue #20 point 3's graded check, drawn rather than tabled).

    python experiments/paper_grid/ladder_figure.py \
        --storage sqlite:///experiments/paper_grid/results/h200_2026-12-03.db --study paper_grid_h200_shift \
        --sweep experiments/results/mqar_ladder_h200_2026-12-04/call1/recall_sweep.jsonl \
        --sweep experiments/results/mqar_ladder_h200_2026-12-04/call2/recall_sweep.jsonl \
        --budget 4000 --mixers gla hgrn hgrn2 --out experiments/results/mqar_ladder_h200_2026-12-04/ladder.png

Points come from a calibration's stored runs (``--study``: its pure, hybrid and ladder runs, at the rate each kept)
and from recall sweeps' jsonl files (``experiments/recall_sweep.py``). Runs at different learning rates are different
points: each rate is a row of panels (``--lrs`` picks rows). Of two rows of the same layout, seed and rate the one
that says more counts: a decided run (reached or never) over an undecided one, the further of two undecided ones,
else the later file's, so a case run again after its paused state was lost counts once. Each point is one run:
- reached the target: a filled dot at its steps;
- trained its whole schedule without reaching it: a cross at the schedule's end (never);
- paused or cut before its schedule's end: an open triangle at the steps it had (undecided).
Only runs trained under one step schedule (``--budget``) and one protocol belong in one figure: a sweep that mixes
variants (say HGRN-2 with 8 heads beside the default) is drawn once per variant, picked by tag (``--tags``), and a
sweep row of another protocol than the calibration's (``--study``, its stored space) is refused.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import NamedTuple

from hlnas.analysis.figure_style import write_png
from hlnas.model.layout import Layout


class Point(NamedTuple):
    mixer: str
    attention_layers: int
    seed: int
    steps: int  # to target (reached), or the steps trained (never, undecided)
    outcome: str  # "reached", "never" or "undecided"
    lr: float


Key = tuple[str, int, float]  # (layout, seed, learning rate)


def _point(layout: str, seed: int, lr: float, to_target, steps_done, budget: int) -> Point | None:
    """One run's point; None for the all-attention control, which is on no mixer's ladder."""
    parsed = Layout.parse(layout)
    if not parsed.linear_mixers:
        return None
    if len(parsed.linear_mixers) != 1:
        raise SystemExit(f"layout {layout!r} has {len(parsed.linear_mixers)} linear mixers; a ladder figure needs one")
    mixer, n_attention = parsed.linear_mixers[0], len(parsed.attention_layers)
    if to_target is not None:
        return Point(mixer, n_attention, seed, int(to_target), "reached", float(lr))
    done = int(steps_done or 0)
    return Point(mixer, n_attention, seed, done, "never" if done >= budget else "undecided", float(lr))


def says_more(new: Point, old: Point | None) -> bool:
    """Whether ``new`` should replace ``old`` (same layout, seed and rate): a run started again from step 0 on a
    fresh machine that got less far than its lost predecessor must not hide what the predecessor showed."""
    if old is None:
        return True
    new_decided, old_decided = new.outcome != "undecided", old.outcome != "undecided"
    if new_decided != old_decided:
        return new_decided
    return new_decided or new.steps >= old.steps  # two decided runs: the later; two undecided: the further


#: a sweep row's settings that make its protocol (beside its layout, seed and rate): one figure, one protocol
PROTOCOL_KEYS = ("task", "vt", "kv_pairs", "seq_len", "vocab", "d_model", "n_heads", "residual_init", "mixer_hparams",
                 "batch")


def _protocol_parts(r: dict, mixers) -> list[tuple[str, object]]:
    """A protocol's parts as compared: its settings whole (:data:`PROTOCOL_KEYS`), then ``mixer_hparams`` of each of
    ``mixers``."""
    hp = r.get("mixer_hparams") or {}
    return [("settings", {k: r.get(k) for k in PROTOCOL_KEYS if k != "mixer_hparams"}),
            *((f"mixer_hparams.{m}", hp.get(m)) for m in sorted(set(mixers)))]


def _same_protocol(r: dict, where: str, seen: dict) -> None:
    """Refuse a row whose protocol differs from the rows before it (``seen``: part -> (first row's name, value)). The
    settings are compared whole, ``mixer_hparams`` per mixer the row's layout has: a GLA run's protocol does not
    depend on HGRN-2's settings, so GLA rows of one sweep and 8-head HGRN-2 rows of another share a figure, while
    1-head and 8-head HGRN-2 rows do not."""
    name = r.get("tag") or r["layout"]
    for part, value in _protocol_parts(r, Layout.parse(r["layout"]).mixers):
        first = seen.setdefault(part, (name, value))
        if value != first[1]:
            raise SystemExit(f"{where}: {name} ran another protocol than {first[0]} ({part}: {first[1]!r} vs {value!r}): "
                             "one figure per protocol")


@functools.cache
def _study_attrs(storage: str, study: str) -> dict:
    """The study's user attrs, loaded once: the protocol and the runs both read them."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=study, storage=storage).user_attrs


def calibration_protocol(storage: str, study: str) -> dict:
    """The calibration's recall protocol as :func:`_same_protocol`'s ``seen`` (its stored space's ``score.mqar``), so
    sweep rows of another protocol are refused beside its runs; empty (nothing checked) for a study without a stored
    space or on another task than MQAR (a VT sweep row records its task otherwise)."""
    from hlnas.space import space_from_dict

    raw = _study_attrs(storage, study).get("hlnas_space")
    if not raw:
        return {}
    space = space_from_dict(raw, where=f"study '{study}'")  # the stored space read as hlnas reads it everywhere
    mqar = space.score.mqar
    if mqar.task != "mqar":
        return {}
    row = {"task": "mqar", "vt": None, **{k: getattr(mqar, k) for k in ("kv_pairs", "seq_len", "vocab", "batch")},
           **{k: mqar.model.get(k) for k in ("d_model", "n_heads", "residual_init", "mixer_hparams")}}
    return {part: (f"calibration {study}", value) for part, value in _protocol_parts(row, [*space.mixers, "attention"])}


def sweep_points(paths: list[Path], budget: int, tags: list[str] | None = None, seen: dict | None = None) -> dict[Key, Point]:
    """The sweeps' rows by (layout, seed, lr), merged by :func:`says_more`. Failed rows, the all-attention control's
    (on no mixer's ladder) and, with ``tags``, rows whose tag contains none of them are skipped. A row's ``steps`` are
    the steps it trained; its ``schedule`` (rows since 2026-12-04) must equal ``budget``, and its protocol
    (:data:`PROTOCOL_KEYS`, :func:`_same_protocol`) the rows' before it: a variant (say HGRN-2 with other heads) is
    another figure. ``seen``: a protocol the rows must match from the start (:func:`calibration_protocol`)."""
    out: dict[Key, Point] = {}
    seen = dict(seen or {})
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r.get("status") not in ("ok", "paused"):
                continue
            key = (r["layout"], int(r["seed"]), float(r["lr"]))
            new = _point(*key, r.get("steps_to_target"), r.get("cut_at") or r.get("steps"), budget)
            if new is None or (tags and not any(t in (r.get("tag") or "") for t in tags)):
                continue
            _same_protocol(r, str(path), seen)
            if r.get("schedule") not in (None, budget):
                raise SystemExit(f"{path}: {r.get('tag') or r['layout']} ran a {r['schedule']}-step schedule, not "
                                 f"--budget {budget}: one figure per schedule")
            if says_more(new, out.get(key)):
                out[key] = new
    return out


def calibration_points(storage: str, study: str, budget: int) -> dict[Key, Point]:
    """A calibration's stored runs (``hlnas_calibration`` of the study) by (layout, seed, the rate the run kept), the
    control left out."""
    cal = _study_attrs(storage, study).get("hlnas_calibration") or {}
    out = {}
    for r in (cal.get("runs") or {}).values():
        if r.get("status") != "ok":
            continue
        key = (r["layout"], int(r["seed"]), float(r["mqar_lr"]))
        point = _point(*key, r.get("mqar_steps_to_target"), r.get("mqar_steps_done"), budget)
        if point is not None:
            out[key] = point
    return out


def figure(points: list[Point], mixers: list[str], budget: int):
    """One panel per (rate, mixer): rates in rows, highest first, mixers in columns."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ticks = sorted({p.attention_layers for p in points})
    lrs = sorted({p.lr for p in points}, reverse=True)
    one_lr = len(lrs) == 1  # then the rate goes in the title once: six panels' "mixer, lr 0.0005" titles overlapped
    fig = make_subplots(rows=len(lrs), cols=len(mixers), shared_yaxes=True, shared_xaxes=True,
                        subplot_titles=[m if one_lr else f"{m}, lr {lr:g}" for lr in lrs for m in mixers],
                        vertical_spacing=0.08)
    style = {"reached": ("circle", "#1f77b4", "reached 0.98"), "never": ("x", "#d62728", "never (whole budget)"),
             "undecided": ("triangle-up-open", "#7f7f7f", "paused or cut (undecided)")}
    shown = set()  # each outcome in the legend once, from the first panel that has it
    for row, lr in enumerate(lrs, start=1):
        for col, mixer in enumerate(mixers, start=1):
            for outcome, (symbol, color, name) in style.items():
                mine = [p for p in points if p.mixer == mixer and p.lr == lr and p.outcome == outcome]
                if not mine:
                    continue
                # seeds side by side around their x, so equal steps stay visible
                xs = [p.attention_layers + 0.15 * (p.seed - 2) for p in mine]
                fig.add_trace(go.Scatter(x=xs, y=[p.steps for p in mine], mode="markers", name=name,
                                         marker=dict(symbol=symbol, color=color, size=10),
                                         showlegend=outcome not in shown, legendgroup=outcome,
                                         text=[f"seed {p.seed}" for p in mine]), row=row, col=col)
                shown.add(outcome)
            fig.add_hline(y=budget, line_dash="dot", line_color="#999", row=row, col=col)
            fig.update_xaxes(tickvals=ticks, range=[min(ticks) - 0.8, max(ticks) + 0.8], row=row, col=col)
        fig.update_yaxes(title_text=f"steps to 0.98 (budget {budget})", row=row, col=1)
    # one x-axis title for the whole row of panels (one per panel ran into its neighbours')
    fig.add_annotation(text="attention layers (0: pure)", xref="paper", yref="paper", x=0.5, y=-0.16,
                       showarrow=False, font=dict(size=14))
    title = "Recall readiness against attention layers, per seed" + (f" (lr {lrs[0]:g})" if one_lr else "")
    fig.update_layout(template="plotly_white", title=title, margin=dict(b=90))
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--storage", help="the calibration's storage URL (with --study)")
    p.add_argument("--study", help="a calibration study whose pure, hybrid and ladder runs join the figure")
    p.add_argument("--sweep", action="append", default=[], type=Path, help="a recall_sweep.jsonl (repeatable)")
    p.add_argument("--budget", type=int, required=True, help="the runs' step schedule (one per figure)")
    p.add_argument("--mixers", nargs="+", required=True)
    p.add_argument("--lrs", nargs="+", type=float, help="only these learning rates (default: every rate in the runs)")
    p.add_argument("--tags", nargs="+", help="only sweep rows whose tag contains one of these (say one variant's)")
    p.add_argument("--out", type=Path, required=True, help="a .png (kaleido, needs Chromium) or .html")
    a = p.parse_args(argv)
    if bool(a.storage) != bool(a.study):
        p.error("--storage and --study go together")
    pts = calibration_points(a.storage, a.study, a.budget) if a.study else {}
    protocol = calibration_protocol(a.storage, a.study) if a.study else {}
    for key, point in sweep_points(a.sweep, a.budget, a.tags, protocol).items():
        if says_more(point, pts.get(key)):
            pts[key] = point
    points = [x for x in pts.values() if x.mixer in a.mixers and (not a.lrs or x.lr in a.lrs)]
    if not points:
        p.error(f"no runs of mixers {a.mixers}{f' at lr {a.lrs}' if a.lrs else ''} in the given study and sweeps")
    fig = figure(points, a.mixers, a.budget)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.out.suffix == ".html":
        fig.write_html(a.out)
    else:
        write_png(fig, a.out, width=1100, height=120 + 330 * len({x.lr for x in points}), scale=2)
    print(f"wrote {a.out} ({len(points)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
