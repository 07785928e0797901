"""Comparing samplers on a tabular benchmark (:mod:`hlnas.analysis.tabular`): runs of several samplers over seeds, their
hypervolume-vs-evaluations curves and the evaluations each needs to reach a share of the table's volume
(:class:`Comparison`, :func:`compare`), a sampler named on the command line (:func:`load_sampler`), and the files
``hlnas bench-samplers`` writes (:func:`write_outputs`)."""

from __future__ import annotations

import csv
import dataclasses
import io
import importlib
import importlib.util
import os
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hlnas.errors import ConfigError, did_you_mean
from hlnas.outputs import write_atomic
from hlnas.search.samplers import SAMPLERS
from hlnas.analysis.tabular import DEFAULT_SAMPLERS, SamplerRun, TabularBenchmark, run_sampler, sampler_label

__all__ = ["Comparison", "compare", "load_sampler", "write_outputs"]


# -- comparing samplers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Runs of several samplers over seeds on one benchmark; curves padded to ``n_evals`` with their last value
    (a run ends early only when the space is exhausted, so its hypervolume stays where it is)."""

    bench: TabularBenchmark
    n_evals: int
    seeds: tuple[int, ...]
    runs: Mapping[str, tuple[SamplerRun, ...]]
    fractions: tuple[float, ...] = (0.95, 1.0)

    def rescored(self, bench: TabularBenchmark) -> "Comparison":
        """The same runs scored on ``bench`` (the same table, e.g. ``self.bench.with_scale("front")``): the
        hypervolume curves are recomputed from the evaluated layouts, nothing is run again."""
        if bench.space.fingerprint() != self.bench.space.fingerprint() or set(bench.table) != set(self.bench.table):
            raise ConfigError("rescored() needs a benchmark over the same space and rows")
        runs = {}
        for label, rs in self.runs.items():
            runs[label] = tuple(dataclasses.replace(r, hv=tuple(bench.hypervolume(r.layouts[: i + 1]) / bench.max_hypervolume
                                                                  for i in range(len(r.layouts)))) for r in rs)
        return dataclasses.replace(self, bench=bench, runs=runs)

    def curves(self, label: str) -> list[list[float]]:
        out = []
        for r in self.runs[label]:
            h = list(r.hv[: self.n_evals]) or [0.0]
            out.append(h + [h[-1]] * (self.n_evals - len(h)))
        return out

    def mean_std(self, label: str) -> tuple[list[float], list[float]]:
        cols = list(zip(*self.curves(label)))
        return ([statistics.fmean(c) for c in cols], [statistics.stdev(c) if len(c) > 1 else 0.0 for c in cols])

    def rows(self) -> list[dict]:
        """Long format: one row per sampler and evaluation count, with the mean and std hypervolume over seeds."""
        out = []
        for label in self.runs:
            mean, std = self.mean_std(label)
            out += [{"sampler": label, "evals": i + 1, "hv_mean": m, "hv_std": s} for i, (m, s) in enumerate(zip(mean, std))]
        return out

    def checkpoints(self) -> list[int]:
        n = self.n_evals
        return sorted({c for c in (5, 10, 15, 20, 30, 50, 100) if c < n} | {n})

    def summary(self) -> list[dict]:
        """Per sampler: hypervolume (mean, std) at the :meth:`checkpoints`, its mean over all evaluation counts
        (area under the curve / n_evals), and evaluations to reach each fraction of the maximum (mean, std over the
        seeds that reached it, and how many did)."""
        out = []
        for label, runs in self.runs.items():
            mean, std = self.mean_std(label)
            row = {"sampler": label, "seeds": len(runs),
                   "hv_at": {c: (mean[c - 1], std[c - 1]) for c in self.checkpoints()},
                   "auc": statistics.fmean(mean), "asked": statistics.fmean(r.asked for r in runs),
                   "repeats": statistics.fmean(r.repeats for r in runs), "evals_to": {}}
            for f in self.fractions:
                got = [n for n in (r.evals_to(f) for r in runs) if n is not None and n <= self.n_evals]
                row["evals_to"][f] = (statistics.fmean(got) if got else None,
                                      statistics.stdev(got) if len(got) > 1 else (0.0 if got else None), len(got))
            out.append(row)
        return out

    def to_markdown(self) -> str:
        cps = self.checkpoints()
        head = ["sampler", *(f"HV@{c}" for c in cps), "mean HV", *(f"evals to {f:.0%}" for f in self.fractions), "asked"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in self.summary():
            cells = [row["sampler"], *(f"{m:.3f} ± {s:.3f}" for m, s in row["hv_at"].values()), f"{row['auc']:.3f}"]
            for f in self.fractions:
                m, s, n = row["evals_to"][f]
                cells.append("never" if m is None else f"{m:.1f} ± {s:.1f}" + (f" ({n}/{row['seeds']} seeds)" if n < row["seeds"] else ""))
            cells.append(f"{row['asked']:.0f}")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def plot(self):
        """Plotly figure: mean hypervolume against evaluations per sampler, with a ± std band."""
        import plotly.graph_objects as go

        palette = {"nsga2": "#1f77b4", "tpe": "#ff7f0e", "gp": "#2ca02c", "random": "#7f7f7f", "grid": "#d62728"}
        extra = iter(("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"))
        fig = go.Figure()
        xs = list(range(1, self.n_evals + 1))
        for label in self.runs:
            color = palette.get(label) or next(extra, "#444444")
            mean, std = self.mean_std(label)
            hi = [min(m + s, 1.0) for m, s in zip(mean, std)]
            lo = [max(m - s, 0.0) for m, s in zip(mean, std)]
            rgb = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
            fig.add_trace(go.Scatter(x=xs + xs[::-1], y=hi + lo[::-1], fill="toself", fillcolor=f"rgba{(*rgb, 0.15)}",
                                     line=dict(width=0), hoverinfo="skip", showlegend=False, legendgroup=label))
            dash = {"random": "dash", "grid": "dot"}.get(label, "solid")  # random and NSGA-II share their first generation
            fig.add_trace(go.Scatter(x=xs, y=mean, mode="lines", name=label, legendgroup=label,
                                     line=dict(color=color, width=2, dash=dash),
                                     customdata=std, hovertemplate=f"{label}: %{{y:.3f}} ± %{{customdata:.3f}} after %{{x}}<extra></extra>"))
        fig.add_hline(y=1.0, line=dict(color="#999", dash="dot", width=1))
        b = self.bench
        sub = (f"{b.name}: {b.n_candidates} candidates, {' vs '.join(b.objectives)}; mean ± std over {len(self.seeds)} seeds; "
               f"objectives scaled to [0, 1] over the {'whole table' if b.scale == 'table' else 'Pareto front'}, reference 1.1")
        fig.update_layout(title=dict(text=f"Hypervolume vs evaluations<br><sup>{sub}</sup>"), template="plotly_white",
                          xaxis=dict(title="distinct candidates evaluated", range=[1, self.n_evals]),
                          yaxis=dict(title="hypervolume (fraction of the table's)", range=[0, 1.05]),
                          margin=dict(l=60, r=20, t=80, b=50), legend=dict(x=0.99, y=0.02, xanchor="right", yanchor="bottom"))
        return fig


def compare(bench: TabularBenchmark, samplers: Sequence | Mapping = DEFAULT_SAMPLERS, n_evals: int | None = None,
            seeds: int | Sequence[int] = 5, *, fractions: Sequence[float] = (0.95, 1.0),
            on_run: Callable[[SamplerRun], None] | None = None) -> Comparison:
    """Run every sampler for every seed. ``samplers``: names, sampler instances/classes/factories, or a mapping
    label -> one of those. ``seeds``: a count (0..K-1) or the seeds. A sampler *instance* is reused for every seed
    (its own state carries over); pass a class or factory to seed each run."""
    n_evals = bench.n_candidates if n_evals is None else n_evals
    seeds = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)
    if not seeds:
        raise ConfigError("compare needs at least one seed")
    items = list(samplers.items()) if isinstance(samplers, Mapping) else [(sampler_label(s), s) for s in samplers]
    labels = [lab for lab, _ in items]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"sampler labels repeat: {labels}; pass a mapping label -> sampler")
    runs = {}
    for label, spec in items:
        out = []
        for seed in seeds:
            r = run_sampler(bench, spec, n_evals, seed, label=label)
            out.append(r)
            if on_run:
                on_run(r)
        runs[label] = tuple(out)
    return Comparison(bench=bench, n_evals=n_evals, seeds=seeds, runs=runs, fractions=tuple(fractions))


def load_sampler(text: str):
    """A sampler named on the command line: a built-in name, or ``module:attr`` / ``path/file.py:attr`` naming an
    optuna sampler instance, class, or factory ``seed -> sampler``."""
    if ":" not in text:
        if text not in SAMPLERS:
            raise ConfigError(f"unknown sampler '{text}'.{did_you_mean(text, SAMPLERS)} Allowed: {', '.join(SAMPLERS)}, "
                              "or module:attr / file.py:attr for your own")
        return text
    where, _, attr = text.rpartition(":")
    try:
        if where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(where).stem, where)
            if spec is None or not Path(where).is_file():
                raise ConfigError(f"sampler '{text}': no file {where}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except ImportError as e:
        raise ConfigError(f"sampler '{text}': cannot import {where}: {e}") from None
    if not hasattr(module, attr):
        raise ConfigError(f"sampler '{text}': {where} has no attribute '{attr}'")
    return getattr(module, attr)


def _csv_text(header: list[str], rows) -> str:
    """A CSV table as text (csv's own quoting and line ends), to be written in one piece."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def write_outputs(comparison: Comparison, out_dir: str | os.PathLike, *, png: bool = False, html_js: str = "inline",
                  stem: str = "hv_vs_evals") -> list[Path]:
    """Write ``<stem>.html`` (plotly.js inlined, or ``html_js="cdn"`` for a small file), ``<stem>.csv`` (mean/std
    per sampler and evaluation count), ``<stem>_runs.csv`` (every run's curve) and with ``png`` ``<stem>.png``
    (kaleido; needs Chromium). Returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig = comparison.plot()
    paths = [out / f"{stem}.html", out / f"{stem}.csv", out / f"{stem}_runs.csv"]
    # each file whole or not at all (a full disk: one DiskFull line naming it)
    write_atomic(paths[0], fig.to_html(include_plotlyjs=True if html_js == "inline" else "cdn"))
    write_atomic(paths[1], _csv_text(["sampler", "evals", "hv_mean", "hv_std"],
                                     ([row["sampler"], row["evals"], f"{row['hv_mean']:.6f}", f"{row['hv_std']:.6f}"]
                                      for row in comparison.rows())))
    write_atomic(paths[2], _csv_text(["sampler", "seed", "asked", "repeats", "evals", "hv", "layout"],
                                     ([label, r.seed, r.asked, r.repeats, i, f"{h:.6f}", lay]
                                      for label, runs in comparison.runs.items() for r in runs
                                      for i, (h, lay) in enumerate(zip(r.hv, r.layouts), start=1))))
    if png:
        from hlnas.analysis.figure_style import write_png
        from hlnas.analysis.report import ReportError, find_chromium

        if find_chromium() is None:
            raise ReportError("PNG export needs a Chromium/Chrome browser (kaleido drives one headless) and none was "
                              "found; install one (Debian/Ubuntu: apt-get install -y chromium) or leave out --png")
        paths.append(out / f"{stem}.png")
        write_png(fig, paths[-1], width=1000, height=600, scale=2)
    return paths
