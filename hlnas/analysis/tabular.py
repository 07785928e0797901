"""A tabular benchmark: compare samplers on a table of results (look-up instead of training), on a CPU in seconds.

A :class:`TabularBenchmark` maps every candidate of a :class:`~hlnas.space.SearchSpace` (a layout) to its
objective values, read from a results table: a CSV with one row per candidate (:meth:`TabularBenchmark.from_csv`,
e.g. the CSV of a grid run), or the paper's published RULER recall (:meth:`TabularBenchmark.from_paper`).
:func:`run_sampler` runs the search's own loop (:func:`hlnas.search.loop.search_loop`) on an in-memory optuna study
with a :class:`LookupExecutor`, which answers each trial from the table instead of training it, and records the
hypervolume after each distinct evaluation. :func:`hlnas.analysis.comparison.compare` does that for several samplers and seeds, and
:func:`hlnas.analysis.comparison.write_outputs` / ``hlnas bench-samplers`` print the table and plot hypervolume against
evaluations.

Rules (those of the search loop in :mod:`hlnas.search.loop`, one worker):

* **The space is the set of table rows.** Every row must be a candidate of the space and, by default
  (``missing="error"``), every candidate of the space must have a row; a :class:`~hlnas.errors.ConfigError`
  lists the candidates without one. With ``missing="infeasible"`` such candidates are told FAIL like a
  candidate that breaks a constraint in a real search: nothing is evaluated and they do not count as an
  evaluation; so are candidates that break one of the space's ``constraints``. A row whose objective values are
  blank or not finite is a *failed* candidate (a training that produced no score): it counts as an evaluation
  and adds no volume.
* **An evaluation is a distinct layout.** Parameters that give an already evaluated layout (a repeat proposal,
  or e.g. any ratio with mixer ``transformer``) are told the stored values, as the search does, and are not
  counted. After every :data:`~hlnas.search.loop.REPEATS_BEFORE_FALLBACK` (10) repeats in a row an untried
  candidate, picked at random, is enqueued, so every sampler ends; a run stops after ``n_evals`` evaluations, when
  the space is exhausted, or after :data:`~hlnas.search.loop.MAX_REPEATS` repeats in a row.
* **Samplers** are built by name exactly as ``hlnas search`` builds them (``nsga2``, ``tpe``, ``gp``,
  ``random``, ``grid``: every candidate enqueued in :meth:`SearchSpace.grid` order, so its curve does not
  depend on the seed). Any ``optuna.samplers.BaseSampler`` instance, sampler class, or factory
  ``seed -> sampler`` works too.
* **Hypervolume.** Each objective is turned into a minimized one and scaled to [0, 1] by the best and worst
  values of the table's feasible rows (0 = the table's best); the reference point is 1.1 in every objective (10% beyond
  the table's worst value, as :func:`hlnas.analysis.pareto.hypervolume_history` does by default). Curves are reported
  as a fraction of the table's maximum hypervolume (the volume of all feasible rows: a row that breaks
  one of the space's ``constraints`` or whose ``status`` column says failed/infeasible adds none), so 1.0 means the whole front
  was found and curves of different tables are on one scale. With the table's scale one good hybrid already
  holds most of the volume (the worst rows, e.g. a pure GLA, stretch the box), so curves start high;
  ``scale="front"`` scales by the front's own best and worst values instead (the ideal and nadir points, a usual
  choice in multi-objective benchmarks), so only rows near the front add volume and the curves spread out.
  :meth:`hlnas.analysis.comparison.Comparison.rescored` re-scores finished runs on another scale without running them again.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from hlnas.errors import ConfigError, HlnasError, did_you_mean
from hlnas.search.executors import InlineExecutor
from hlnas.analysis import tabular_rows as table_rows
from hlnas.model.layout import TRANSFORMER, Layout
from hlnas import metrics as metric_table
from hlnas.analysis.pareto import dominates, hypervolume
from hlnas.search.loop import LoopSettings, search_loop
from hlnas.search.samplers import SAMPLERS, make_sampler
from hlnas.space import SearchSpace, space_from_dict
from hlnas.search.trial import TrialResult, TrialSpec
from hlnas.overrides import is_number

__all__ = ["TabularBenchmark", "SamplerRun", "LookupExecutor", "run_sampler", "sampler_label", "DEFAULT_SAMPLERS", "MISSING",
           "SCALES"]  # fmt: skip

DEFAULT_SAMPLERS = SAMPLERS
MISSING = ("error", "infeasible")
SCALES = ("table", "front")
KV_COLUMNS = ("kv_cache_bytes", "kv_cache_bytes_4k")  # "kv_cache_bytes" reads the first one the CSV has
REFERENCE = 1.1  # in scaled objectives: 10% beyond the table's worst value
_DIRECTION_WORDS = {"max": "maximize", "maximize": "maximize", "min": "minimize", "minimize": "minimize"}



def _parse_objective(spec: str) -> tuple[str, str]:
    """``"recall"`` or ``"val_loss:min"`` -> (column, direction)."""
    name, _, word = spec.partition(":")
    if word:
        if word.lower() not in _DIRECTION_WORDS:
            raise ConfigError(f"objective {spec!r}: direction '{word}' is not allowed; allowed: max, min, maximize, minimize")
        return name, _DIRECTION_WORDS[word.lower()]
    d = metric_table.direction_of(name)
    if d is None:
        raise ConfigError(f"objective '{name}' has no known direction; write it as '{name}:max' or '{name}:min'")
    return name, d


@dataclass(frozen=True, eq=False)
class TabularBenchmark:
    """Candidates of ``space`` -> objective values, looked up from ``table`` (layout string -> row).

    Build it with :meth:`from_csv`, :meth:`from_paper` or :meth:`from_rows`; direct construction validates too.
    """

    name: str
    space: SearchSpace
    table: Mapping[str, Mapping[str, Any]]  # layout string -> row (the row's columns; objective columns are floats or None)
    objectives: tuple[str, ...] = ("recall", "kv_cache_bytes")  # columns of the rows
    directions: tuple[str, ...] = ("maximize", "minimize")
    missing: str = "error"  # what a candidate of the space without a row is: "error" or "infeasible"
    source: str = ""
    scale: str = "table"  # objectives scaled to [0, 1] by the whole table's best/worst, or by the front's ("front")
    _params: dict = field(init=False, repr=False)  # layout -> the first grid point giving it
    _lo: tuple = field(init=False, repr=False)
    _hi: tuple = field(init=False, repr=False)
    _max_hv: float = field(init=False, repr=False)
    _violating: frozenset = field(init=False, repr=False)  # rows whose candidate breaks one of the space's constraints

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ConfigError(f"scale={self.scale!r} is not allowed; allowed: {', '.join(SCALES)}")
        if self.missing not in MISSING:
            raise ConfigError(f"missing={self.missing!r} is not allowed; allowed: {', '.join(MISSING)}")
        if len(self.objectives) != len(self.directions) or not self.objectives:
            raise ConfigError(f"{len(self.objectives)} objectives for {len(self.directions)} directions")
        for d in self.directions:
            if d not in ("maximize", "minimize"):
                raise ConfigError(f"direction {d!r} is not allowed; allowed: maximize, minimize")
        params = {}
        for p in self.space.grid():
            params.setdefault(str(self.space.layout(p)), p)
        outside = [lay for lay in self.table if lay not in params]
        if outside:
            raise ConfigError(f"benchmark '{self.name}': {len(outside)} row(s) are not candidates of space '{self.space.name}': "
                              f"{', '.join(outside[:5])}{' ...' if len(outside) > 5 else ''}")
        absent = [lay for lay in params if lay not in self.table]
        if absent and self.missing == "error":
            shown = ", ".join(table_rows.describe(Layout.parse(lay)) for lay in absent[:8])
            raise ConfigError(f"benchmark '{self.name}': {len(absent)} of the {len(params)} candidates of space "
                              f"'{self.space.name}' have no row: {shown}{' ...' if len(absent) > 8 else ''}. The benchmark's "
                              "space must be the set of table rows: give a space holding only the rows' candidates, or "
                              "missing='infeasible' (--missing infeasible) to treat these as infeasible")
        for lay, row in self.table.items():
            for col in self.objectives:
                if col not in row:
                    raise ConfigError(f"benchmark '{self.name}': row {lay} has no column '{col}'")
                v = row[col]
                if v is not None and (not is_number(v)):
                    raise ConfigError(f"benchmark '{self.name}': row {lay}, column '{col}': {v!r} is not a number")
                must = None if v is None else table_rows.impossible(col, v)
                if must:
                    raise ConfigError(f"benchmark '{self.name}': row {lay}, column '{col}': {v!r} cannot be; it must be {must}")
        object.__setattr__(self, "_params", params)
        object.__setattr__(self, "_violating", table_rows.violating(self.space, self.table, params))
        # the scale, the front and the maximum hypervolume are those of the rows a search can reach: a row that breaks
        # one of the space's constraints, or is marked failed/infeasible, is never an evaluation that adds volume
        pts = [self._signed(lay) for lay in self.table if lay not in self._violating]
        pts = [p for p in pts if p is not None]
        if not pts:
            raise ConfigError(f"benchmark '{self.name}': no feasible row has finite values for all of {', '.join(self.objectives)}")
        if self.scale == "front":
            pts = [self._signed(lay) for lay in self.front()]
        k = len(self.objectives)
        object.__setattr__(self, "_lo", tuple(min(p[i] for p in pts) for i in range(k)))
        object.__setattr__(self, "_hi", tuple(max(p[i] for p in pts) for i in range(k)))
        object.__setattr__(self, "_max_hv", self.hypervolume(lay for lay in self.table if lay not in self._violating))

    # -- constructors ----------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], *, space: SearchSpace | str | None = None,
                  objectives: Sequence[str] = ("recall", "kv_cache_bytes"), missing: str = "error",
                  name: str | None = None, source: str = "") -> "TabularBenchmark":
        """Rows as dicts (CSV text values or numbers): the columns :meth:`from_csv` describes."""
        where = source or name or "rows"
        rows = [dict(r) for r in rows]
        if not rows:
            raise ConfigError(f"{where}: the table has no rows")
        columns = list(dict.fromkeys(k for r in rows for k in r))
        specs = [_parse_objective(o) for o in objectives]
        cols, lacking = [], []
        for col, _ in specs:
            if col == "kv_cache_bytes" and col not in columns:
                col = next((c for c in KV_COLUMNS if c in columns), col)
            cols.append(col)
            if col not in columns:
                lacking.append(col if col != "kv_cache_bytes" else " or ".join(KV_COLUMNS))
        if "layout" not in columns and "mixer" not in columns:
            lacking.insert(0, "layout (or mixer with ratio and placement/attention_layers)")
        if lacking:
            raise ConfigError(f"{where}: missing column(s): {'; '.join(lacking)}. The table has: {', '.join(columns)}. "
                              "Needed: layout (or mixer + ratio, with placement or attention_layers for non-paper "
                              "placements) and one column per objective")
        if isinstance(space, str):
            from hlnas.space import load_space

            space = load_space(space)
        n_layers = space.n_layers if space is not None else None
        table: dict[str, dict] = {}
        first_row: dict[str, int] = {}
        for i, raw in enumerate(rows, start=2):  # row 1 is the CSV header
            try:
                layout = table_rows.row_layout(raw, n_layers)
            except HlnasError as e:
                raise ConfigError(f"{where}, row {i}: {e}") from None
            key = str(layout)
            if key in table:
                raise ConfigError(f"{where}: rows {first_row[key]} and {i} describe the same layout {key}")
            row = dict(raw)
            row["layout"] = key
            for src, col in zip((s for s, _ in specs), cols):
                try:
                    row[src] = table_rows.number(raw.get(col))
                except ValueError:
                    raise ConfigError(f"{where}, row {i}, column '{col}': {raw.get(col)!r} is not a number") from None
            table[key] = row
            first_row[key] = i
        if space is None:
            space = table_rows.infer_space([Layout.parse(k) for k in table], name or "table")
        return cls(name=name or space.name, space=space, table=table, objectives=tuple(s for s, _ in specs),
                   directions=tuple(d for _, d in specs), missing=missing, source=source)

    @classmethod
    def from_csv(cls, path: str | os.PathLike, *, space: SearchSpace | str | None = None,
                 objectives: Sequence[str] = ("recall", "kv_cache_bytes"), missing: str = "error",
                 name: str | None = None) -> "TabularBenchmark":
        """A results CSV, one row per candidate.

        A row's candidate comes from its ``layout`` string (e.g. ``ZZZZZAZZZZZA...``), else from ``mixer`` and
        ``ratio`` with ``placement`` (paper, front, ..., or ``explicit:0,12``) or ``attention_layers``
        (``5;11;17;23`` or ``[5, 11, 17, 23]``); without them the paper placement. Objectives name columns
        (``recall``, ``kv_cache_bytes``, ``val_loss``, ``ruler_avg``, ...; ``kv_cache_bytes`` reads
        ``kv_cache_bytes_4k`` when the CSV has no plain one; ``"col:max"``/``"col:min"`` for other columns).
        Other columns are kept in the rows. ``space`` (a :class:`SearchSpace`, a YAML path or a shipped
        name) is the space the rows came from; by default it is inferred from the rows: their mixers, ratios,
        placements (the first of paper, front, back, middle, spread that gives each row, else an explicit
        attention set) and the Transformer if a row is one.
        """
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"results table '{path}' is a directory; give a CSV file")
        if not p.is_file():
            raise ConfigError(f"results table '{path}' not found")
        try:
            with p.open(newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header, rows = next(reader, None), []
                for record in reader:
                    if not record:  # a blank line, as csv.DictReader skips it
                        continue
                    if len(record) != len(header):  # DictReader would fill None or a None key: a row misread
                        raise ConfigError(f"results table '{path}', row {reader.line_num}: {len(record)} fields, the "
                                          f"header has {len(header)}; give each row one value per column")
                    rows.append(dict(zip(header, record)))
        except (UnicodeDecodeError, csv.Error) as e:
            raise ConfigError(f"results table '{path}' is not a CSV text file ({e}); give a CSV with one row per candidate") from None
        return cls.from_rows(rows, space=space, objectives=objectives, missing=missing,
                             name=name or p.stem, source=str(path))

    @classmethod
    def from_paper(cls, preset_name: str = "paper-1.3b", kv_context: int = 4096) -> "TabularBenchmark":
        """The paper's published recall (arXiv 2507.06457): Table 7's RULER average for its 4 mixers (GLA, HGRN-2,
        DeltaNet, GatedDeltaNet) x 5 ratios with the paper placement, plus the Transformer (Table 5's 0.423; Table 7
        has no Transformer column). 21 candidates; the space is exactly these (HGRN and RetNet, which the paper
        omits for insignificant recall, are not in it). KV-cache bytes are hlnas's own cost model
        (:func:`hlnas.model.cost.layout_metrics`) for ``preset_name`` at ``kv_context`` tokens, batch 1, bf16."""
        from hlnas.analysis import paper
        from hlnas.model.catalog import PAPER_MIXERS
        from hlnas.model.layout import PAPER_RATIOS
        from hlnas.model.cost import layout_metrics

        table7 = paper.recall_by_ratio()
        mixers = [m for m in PAPER_MIXERS if m in table7]
        for m in mixers:
            if set(table7[m]) != set(PAPER_RATIOS):
                raise HlnasError(f"paper Table 7 lacks ratios for {m}: has {sorted(table7[m])}")
        space = space_from_dict({
            "name": "paper_table7", "mixers": mixers, "ratios": list(PAPER_RATIOS), "placements": ["paper"],
            "transformer": True, "layers": 24,
            "scale": {"preset": preset_name, "kv_context": kv_context, "score": {"objectives": ["ruler"]}},
            "objectives": [{"name": "recall", "metric": "recall"}, {"name": "kv_cache", "metric": "kv_cache_bytes"}],
            "sampler": "grid"}, where="TabularBenchmark.from_paper")  # fmt: skip
        model = space.model
        rows = []
        for p in space.grid():
            layout = space.layout(p)
            cost = layout_metrics(str(layout), model, kv_context, "paper")
            if p["mixer"] == TRANSFORMER:
                ratio, recall, src = TRANSFORMER, paper.transformer_recall(), paper.paper_label(5)
            else:
                ratio, recall, src = p["ratio"], table7[p["mixer"]][p["ratio"]], paper.paper_label(7)
            rows.append({"mixer": p["mixer"], "ratio": ratio, "layout": str(layout),
                         "attention_layers": cost["attention_layers"], "recall": recall,
                         "kv_cache_bytes": cost["kv_cache_bytes"], "params": cost["params"],
                         "state_bytes": cost["state_bytes"], "source": src})
        return cls.from_rows(rows, space=space, name="paper_table7",
                             source=f"{paper.PAPER} Table 7 (+ Table 5 Transformer); KV bytes: {preset_name} at {kv_context} tokens")

    def with_scale(self, scale: str) -> "TabularBenchmark":
        """The same table with objectives scaled by the whole table ("table") or by its Pareto front ("front")."""
        return TabularBenchmark(name=self.name, space=self.space, table=self.table, objectives=self.objectives,
                                directions=self.directions, missing=self.missing, source=self.source, scale=scale)

    # -- look-ups --------------------------------------------------------------------------------
    @property
    def n_candidates(self) -> int:
        """Distinct layouts of the space (rows, plus candidates without a row when missing='infeasible')."""
        return len(self._params)

    @property
    def max_hypervolume(self) -> float:
        """The hypervolume of every feasible row (scaled objectives, reference 1.1 each): 1.0 on the relative scale.
        Rows that break one of the space's constraints or are marked failed/infeasible (``status``) add nothing."""
        return self._max_hv

    def layout_of(self, params: Mapping[str, Any]) -> str:
        return str(self.space.layout(dict(params)))

    def params_of(self, layout: str) -> dict:
        return dict(self._params[layout])

    def values(self, layout: str) -> tuple[float, ...] | None:
        """The objective values of a row (None: no row, a failed row, or a row marked failed/infeasible)."""
        row = self.table.get(layout)
        if row is None or table_rows.marked(row) is not None:
            return None
        vals = tuple(row[c] for c in self.objectives)
        if any(v is None or not math.isfinite(v) for v in vals):
            return None
        return tuple(float(v) for v in vals)

    def _signed(self, layout: str) -> tuple[float, ...] | None:
        vals = self.values(layout)
        return None if vals is None else tuple(-v if d == "maximize" else v for v, d in zip(vals, self.directions))

    def scaled(self, layout: str) -> tuple[float, ...] | None:
        """A row's objectives minimized and scaled by the table's (or, ``scale="front"``, the front's) best -> 0 and
        worst -> 1; with the front's scale, rows worse than the front's worst value land beyond 1."""
        p = self._signed(layout)
        if p is None:
            return None
        return tuple((v - a) / (b - a) if b > a else 0.0 for v, a, b in zip(p, self._lo, self._hi))

    def hypervolume(self, layouts) -> float:
        """Hypervolume of these rows in scaled objectives (reference 1.1 in each); rows without values add nothing."""
        pts = [q for q in (self.scaled(lay) for lay in layouts) if q is not None]
        return hypervolume(pts, (REFERENCE,) * len(self.objectives))

    def front(self) -> list[str]:
        """The table's Pareto front (layouts), sorted by the scaled objectives."""
        pts = {lay: self._signed(lay) for lay in self.table if lay not in self._violating}
        pts = {k: v for k, v in pts.items() if v is not None}
        mins = ("minimize",) * len(self.objectives)
        out = [k for k, v in pts.items() if not any(dominates(w, v, mins) for w in pts.values())]
        return sorted(out, key=lambda k: pts[k])

    def describe(self) -> str:
        failed = sum(self.values(lay) is None for lay in self.table)
        no_row = self.n_candidates - len(self.table)
        obj = ", ".join(f"{d} {o}" for o, d in zip(self.objectives, self.directions))
        extra = (f", {failed} failed row(s)" if failed else "") + (f", {no_row} candidate(s) without a row (infeasible)" if no_row else "")
        return (f"{self.name}: {len(self.table)} rows over space '{self.space.name}' ({self.n_candidates} candidates{extra}); "
                f"objectives: {obj}; front: {len(self.front())} rows")


def sampler_label(spec) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, type):
        return spec.__name__
    if isinstance(spec, optuna.samplers.BaseSampler):
        return type(spec).__name__
    return getattr(spec, "__name__", type(spec).__name__)


def _make_sampler(spec, seed: int, n_objectives: int) -> tuple[optuna.samplers.BaseSampler, bool]:
    """(sampler, enqueue the whole grid first)."""
    if isinstance(spec, str):
        if spec not in SAMPLERS:
            raise ConfigError(f"unknown sampler '{spec}'.{did_you_mean(spec, SAMPLERS)} Allowed: {', '.join(SAMPLERS)} "
                              "(or an optuna sampler instance, class, or factory seed -> sampler)")
        return make_sampler(spec, seed, n_objectives), spec == "grid"  # the search's own sampler settings
    if isinstance(spec, optuna.samplers.BaseSampler):
        return spec, False
    if isinstance(spec, type) and issubclass(spec, optuna.samplers.BaseSampler):
        return spec(seed=seed), False
    if callable(spec):
        s = spec(seed)
        if not isinstance(s, optuna.samplers.BaseSampler):
            raise ConfigError(f"sampler factory {sampler_label(spec)} returned {type(s).__name__}, not an optuna sampler")
        return s, False
    raise ConfigError(f"sampler {spec!r}: give a name ({', '.join(SAMPLERS)}), an optuna sampler instance or class, "
                      "or a factory seed -> sampler")


@dataclass(frozen=True)
class SamplerRun:
    """One sampler run. ``hv[i]`` is the hypervolume (fraction of the table's maximum) after ``i + 1`` evaluations."""

    sampler: str
    seed: int
    hv: tuple[float, ...]
    layouts: tuple[str, ...]  # the evaluated layouts, in order
    asked: int  # trials asked, repeats and infeasible ones included
    repeats: int  # proposals of an already evaluated (or failed/infeasible) layout: told the stored result
    infeasible: int  # proposals of candidates without a row (missing='infeasible'), not evaluated
    exhausted: bool  # every candidate was evaluated or infeasible

    def evals_to(self, fraction: float) -> int | None:
        """Evaluations until the hypervolume first reaches ``fraction`` of the maximum (None: not in this run)."""
        for i, v in enumerate(self.hv):
            if v >= fraction - 1e-9:
                return i + 1
        return None


class LookupExecutor(InlineExecutor):
    """An :class:`~hlnas.search.executors.Executor` that trains nothing: ``submit(spec)`` answers at once from ``bench``'s
    table. A row with finite objective values is ``ok`` (its objective columns as the metrics), a row without is
    ``failed`` (a training that gave no score), a candidate without a row is ``infeasible``."""

    def __init__(self, bench: TabularBenchmark) -> None:
        super().__init__(run=self.result)
        self.bench = bench

    def result(self, spec: TrialSpec) -> TrialResult:
        b = self.bench
        row = b.table.get(spec.layout)
        if row is None:
            msg = f"no row for {spec.layout} in table '{b.name}'"
            return TrialResult(spec.number, "infeasible", {"status": "infeasible", "error_kind": "no_row", "error": msg},
                               "no_row", msg)
        metrics = {c: row[c] for c in b.objectives}
        if table_rows.marked(row) == "infeasible":  # as a trial whose training could not run (e.g. OOM): not an evaluation
            msg = f"row {spec.layout} is marked infeasible in table '{b.name}'"
            return TrialResult(spec.number, "infeasible", {"status": "infeasible", "error_kind": "marked", "error": msg},
                               "marked", msg)
        if b.values(spec.layout) is None:
            msg = f"row {spec.layout} lacks a finite value of {', '.join(b.objectives)}"
            return TrialResult(spec.number, "failed", {**metrics, "status": "failed", "error_kind": "no_score", "error": msg},
                               "no_score", msg)
        return TrialResult(spec.number, "ok", {**metrics, "status": "ok"})


def run_sampler(bench: TabularBenchmark, sampler="nsga2", n_evals: int | None = None, seed: int = 0,
                *, label: str | None = None) -> SamplerRun:
    """Run the search loop on an in-memory optuna study over ``bench``'s space, with a :class:`LookupExecutor`, for
    ``n_evals`` distinct evaluations (default: every candidate) and return the hypervolume after each; see the module
    docstring for the rules."""
    n_evals = bench.n_candidates if n_evals is None else n_evals
    if n_evals < 1:
        raise ConfigError(f"n_evals must be >= 1, got {n_evals}")
    k = len(bench.objectives)
    evaluated, points, hv = [], [], []
    tried: set[str] = set()  # evaluated or infeasible: the loop proposes them for evaluation no more
    counts = {"repeats": 0, "infeasible": 0}
    ref = (REFERENCE,) * k

    def record(kind: str, data: dict) -> None:  # the loop's events -> the benchmark's bookkeeping
        if kind == "reused" or (kind == "infeasible" and "from" in data):  # a repeat of a known layout
            counts["repeats"] += 1
        elif kind == "infeasible":  # broke one of the space's constraints: not evaluated
            counts["infeasible"] += 1
            tried.add(data["layout"])
        elif kind == "finished":
            layout = data["layout"]
            tried.add(layout)
            if data["status"] == "infeasible":  # no row: not evaluated, not counted
                counts["infeasible"] += 1
                return
            evaluated.append(layout)
            if data["status"] == "ok":
                points.append(bench.scaled(layout))
            hv.append(hypervolume(points, ref) / bench.max_hypervolume if points else 0.0)

    with _quiet():
        smp, grid = _make_sampler(sampler, seed, k)
        study = optuna.create_study(directions=list(bench.directions), sampler=smp)
        study.set_user_attr("hlnas_objectives", [{"name": c, "metric": c, "direction": d}  # what front_rows reads
                                                 for c, d in zip(bench.objectives, bench.directions)])
        # the search's target counts COMPLETE trials; the benchmark's counts a failed row too, hence the extra stop
        search_loop(study, bench.space, LookupExecutor(bench), LoopSettings(
            n_trials=n_evals, seed=seed, objectives=bench.objectives, on_event=record, enqueue_grid=grid,
            unique=bench.n_candidates, stop=lambda: len(evaluated) >= n_evals))
    asked = sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
    return SamplerRun(sampler=label or sampler_label(sampler), seed=seed, hv=tuple(hv), layouts=tuple(evaluated), asked=asked,
                     repeats=counts["repeats"], infeasible=counts["infeasible"], exhausted=len(tried) >= bench.n_candidates)


class _quiet:
    """optuna's INFO logs and experimental-feature warnings off for the duration."""

    def __enter__(self):
        self.level = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)

    def __exit__(self, *exc):
        self.warnings.__exit__(*exc)
        optuna.logging.set_verbosity(self.level)
