"""What ``hlnas validate`` compares: a proxy's runs and a reference table of at-scale results.

* **The proxy** (:class:`Proxy`): one :class:`Run` per candidate and seed, read from a results CSV
  (:func:`read_proxy_csv`: columns ``mixer``, ``ratio`` and the scored measure; optional ``seed``, ``status``,
  ``layout``, ``recall``, ``recall_raw``, ``recall_baseline``, GPU-seconds and card columns) or from stored studies,
  one study per seed (:func:`read_proxy_studies`: the trials scored ok; a reused copy of a trial is not a run).
* **The reference** (:class:`Reference`): a value per cell, a cell being (mixer, ratio) or a layout string. Shipped:
  ``table7``, the paper's RULER average by ratio for DeltaNet, GatedDeltaNet, GLA and HGRN2 (arXiv 2507.06457,
  :mod:`hlnas.analysis.paper`), and ``table7+transformer``, the same with the Transformer's 0.423 (the paper's
  Table 5). Or a CSV of the user's own at-scale results (:func:`read_reference_csv`: ``mixer``, ``ratio`` or
  ``layout``, ``value``).

Mixers are named as hlnas names them (``gated_deltanet``); the spellings of papers (``GatedDeltaNet``, ``HGRN-2``)
and the aliases of :data:`hlnas.model.catalog.ALIASES` are accepted. The all-attention model is mixer ``transformer``,
ratio ``full``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hlnas.errors import HlnasError, LayoutError, did_you_mean
from hlnas.model.catalog import canonical, linear_mixer_names
from hlnas.model.layout import Layout, format_ratio, parse_ratio

__all__ = ["ValidationError", "Run", "Proxy", "Reference", "REFERENCES", "TRANSFORMER", "FULL", "COST_COLUMNS", "STUDY_COST",
           "mixer_name", "ratio_name", "layout_cell", "read_proxy_csv", "read_proxy_studies",
           "read_reference_csv", "paper_reference", "load_reference"]

TRANSFORMER, FULL = "transformer", "full"
#: the shipped reference tables, by the name ``--reference`` takes
REFERENCES = ("table7", "table7+transformer")
STUDY_COST = "mqar_s + train_wall_s"  # what a stored trial's GPU-seconds are
#: GPU-seconds columns of a results CSV, best first, with what each one is (and a stored trial's)
COST_COLUMNS = {
    "gpu_s_util": "the card's sampled utilisation split among the runs sharing it (measured)",
    "gpu_s_est": "wall seconds / the runs that shared the card (an estimate)",
    "gpu_s": "wall seconds of the recall proxy + LM training (overstates a shared card's cost)",
    "wall_s": "wall seconds of the run (overstates a shared card's cost)",
    STUDY_COST: "wall seconds of the recall proxy (split among its replicas) + LM training, else of the trial "
                "(overstates a shared card's cost)",
}
_CARD_COLUMNS = ("device_name", "mqar_device_name")


class ValidationError(HlnasError, ValueError):
    """A proxy or reference table hlnas validate cannot read, or two that share no cell."""


@dataclass(frozen=True)
class Run:
    """One candidate at one seed: the scored ``value``; ``recall`` (baseline-corrected, 0 at the no-recall baseline)
    judges whether the run learned; ``raw`` and ``baseline`` are the recall before correction and its no-recall
    baseline; ``gpu_s`` what the run cost, on ``card``."""

    mixer: str
    ratio: str
    seed: str
    value: float
    layout: str | None = None
    recall: float | None = None
    raw: float | None = None
    baseline: float | None = None
    gpu_s: float | None = None
    card: str | None = None


@dataclass(frozen=True)
class Proxy:
    """The runs of a proxy, with what they are: ``measure`` (the scored column), ``cost_column`` (what ``gpu_s`` is;
    None when nothing records it) and ``skipped`` (rows or trials not scored ok, or without the measure)."""

    name: str
    measure: str
    runs: tuple[Run, ...]
    cost_column: str | None = None
    skipped: int = 0


@dataclass(frozen=True)
class Reference:
    """At-scale values by cell: ``(mixer, ratio, layout)``, layout None where the table names a ratio only."""

    name: str
    values: Mapping[tuple[str, str, str | None], float] = field(default_factory=dict)


# -- names ----------------------------------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def mixer_name(text: str, where: str) -> str:
    """A mixer as hlnas names it, or ``transformer``; :class:`ValidationError` naming the allowed ones."""
    allowed = [*linear_mixer_names(), TRANSFORMER]
    squashed = {_squash(n): n for n in allowed} | {"attention": TRANSFORMER}
    name = canonical(str(text).strip())
    got = squashed.get(_squash(name)) if name not in allowed else name
    if got is None:
        raise ValidationError(f"{where}: unknown mixer {str(text).strip()!r}.{did_you_mean(name, allowed)} "
                              f"Allowed: {', '.join(allowed)}")
    return got


def ratio_name(text: str, mixer: str, where: str) -> str:
    """``pure``, ``r:1``, ``a/n`` (attention layers / layers) or, for the Transformer, ``full``."""
    t = str(text or "").strip().lower()
    if mixer == TRANSFORMER:
        if t in ("", FULL, TRANSFORMER):
            return FULL
        raise ValidationError(f"{where}: the transformer's ratio is {text!r}; allowed: full (or blank)")
    if "/" in t:
        a, _, n = t.partition("/")
        if a.isdigit() and n.isdigit() and 0 < int(a) < int(n):
            return f"{int(a)}/{int(n)}"
    else:
        try:
            return format_ratio(parse_ratio(t))
        except LayoutError:
            pass
    raise ValidationError(f"{where}: ratio {text!r} is not allowed; write pure, r:1 with an integer r >= 2 (24:1, 6:1, "
                          f"...) or a/n attention layers of n")


def layout_cell(text: str, where: str) -> tuple[str, str, str]:
    """(mixer, ratio, layout string) of a compact layout; mixers joined by ``+`` where it has several."""
    try:
        layout = Layout.parse(str(text))
    except LayoutError as e:
        raise ValidationError(f"{where}: {e}") from None
    linear = layout.linear_mixers
    if not linear:
        return TRANSFORMER, FULL, str(layout)
    return "+".join(linear), layout.ratio, str(layout)


# -- CSVs -----------------------------------------------------------------------------------------------------------


def _read_csv(path) -> tuple[list[str], list[dict]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            return [c.strip() for c in reader.fieldnames or []], rows
    except FileNotFoundError:
        raise ValidationError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValidationError(f"{path}: cannot be read as a CSV ({e})") from None


def _number(text, where: str) -> float | None:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValidationError(f"{where} is {text!r}, not a number") from None
    if not math.isfinite(v):
        raise ValidationError(f"{where} is {text!r}, not a finite number")
    return v


def _need(columns: Sequence[str], path, need: Sequence[str], what: str) -> None:
    lacking = [c for c in need if c not in columns]
    if lacking:
        raise ValidationError(f"{path}: {what} needs column(s) {', '.join(lacking)}; it has: {', '.join(columns) or 'none'}")


def _row_cell(row: dict, where: str) -> tuple[str, str, str | None]:
    """(mixer, ratio, layout) of a row: from ``mixer`` and ``ratio``, or from ``layout`` where those are blank."""
    layout, given = (row.get("layout") or "").strip() or None, (row.get("mixer") or "").strip()
    if layout:
        cell = layout_cell(layout, where)
        if given and mixer_name(given, where) != cell[0]:
            raise ValidationError(f"{where}: mixer {given!r} but layout {layout} is {cell[0]}; make them agree or leave "
                                  "the mixer blank")
        return cell
    if not given:
        raise ValidationError(f"{where}: no mixer (give a mixer, or a layout string in column layout)")
    mixer = mixer_name(given, where)
    return mixer, ratio_name(row.get("ratio"), mixer, where), None


def read_proxy_csv(path, measure: str = "recall") -> Proxy:
    """A results CSV, one row per candidate and seed (``hlnas validate --csv``). Rows whose ``status`` is not ``ok``
    or whose measure is blank are skipped (counted in ``skipped``); ``seed`` defaults to 0."""
    columns, rows = _read_csv(path)
    return proxy_from_rows(columns, rows, path, measure)


def proxy_from_rows(columns: Sequence[str], rows: Sequence[dict], path, measure: str = "recall") -> Proxy:
    """``read_proxy_csv`` on rows already in memory (``csv.DictReader``'s: column name to text); ``path`` names them
    in errors and in the result."""
    _need(columns, path, [measure], f"a proxy table scored on {measure!r}")
    if "layout" not in columns:
        _need(columns, path, ["mixer", "ratio"], "a proxy table without a layout column")
    cost = next((c for c in COST_COLUMNS if c in columns and any((r.get(c) or "").strip() for r in rows)), None)
    runs, skipped = [], 0
    for line, row in enumerate(rows, start=2):
        where = f"{path} line {line}"
        value = _number(row.get(measure), f"{where}: column {measure}")
        if value is None or (row.get("status") or "ok").strip() != "ok":
            skipped += 1
            continue
        mixer, ratio, layout = _row_cell(row, where)
        num = {c: _number(row.get(c), f"{where}: column {c}") for c in ("recall", "recall_raw", "recall_baseline")}
        runs.append(Run(mixer, ratio, (row.get("seed") or "0").strip(), value, layout, num["recall"],
                        num["recall_raw"], num["recall_baseline"],
                        None if cost is None else _number(row.get(cost), f"{where}: column {cost}"),
                        next((row[c].strip() for c in _CARD_COLUMNS if (row.get(c) or "").strip()), None)))
    return Proxy(str(Path(path).name), measure, tuple(runs), cost, skipped)


def read_reference_csv(path) -> Reference:
    """The user's at-scale results: ``value`` per (``mixer``, ``ratio``) or per ``layout``, one row per cell."""
    columns, rows = _read_csv(path)
    _need(columns, path, ["value"], "a reference table")
    if "layout" not in columns:
        _need(columns, path, ["mixer", "ratio"], "a reference table without a layout column")
    values: dict[tuple[str, str, str | None], float] = {}
    for line, row in enumerate(rows, start=2):
        where = f"{path} line {line}"
        value = _number(row.get("value"), f"{where}: column value")
        if value is None:
            raise ValidationError(f"{where}: column value is blank; give every reference cell a value")
        cell = _row_cell(row, where)
        if cell in values:
            raise ValidationError(f"{where}: cell {' '.join(c for c in cell if c)} is given twice; one value per cell")
        values[cell] = value
    if not values:
        raise ValidationError(f"{path}: a reference table needs at least one row")
    return Reference(str(Path(path).name), values)


# -- the shipped reference and stored studies -----------------------------------------------------------------------


def paper_reference(name: str = "table7") -> Reference:
    """The paper's Table 7 (20 cells), with its Transformer (Table 5) for ``table7+transformer``."""
    from hlnas.analysis.paper import PAPER, recall_by_ratio, transformer_recall

    t7 = recall_by_ratio()
    values = {(m, q, None): v for m in t7 if m != "average" for q, v in t7[m].items()}
    if name == "table7+transformer":
        values[(TRANSFORMER, FULL, None)] = transformer_recall()
        return Reference(f"{PAPER} Table 7 RULER average, and Table 5's Transformer", values)
    return Reference(f"{PAPER} Table 7 RULER average", values)


def load_reference(spec: str) -> Reference:
    """A shipped table by name (:data:`REFERENCES`) or a reference CSV by path."""
    if spec in REFERENCES:
        return paper_reference(spec)
    if not Path(spec).is_file():
        raise ValidationError(f"reference {spec!r} is neither a shipped table ({', '.join(REFERENCES)}) nor a CSV file "
                              "(columns mixer, ratio or layout, value)")
    return read_reference_csv(spec)


def _study_seed(attrs: Mapping) -> str | None:
    """The training seed of a study's stored space (``scale.train.seed``), else None."""
    space = attrs.get("hlnas_space")
    train = space.get("scale", {}).get("train", {}) if isinstance(space, Mapping) else {}
    seed = train.get("seed") if isinstance(train, Mapping) else None
    return None if seed is None else str(seed)


def _trial_gpu_s(a: Mapping) -> float | None:
    """The recall proxy's seconds (split among the runs trained with it as replicas) + the LM's; else ``wall_s``."""
    mqar, lm = _num(a.get("mqar_s")), _num(a.get("train_wall_s"))
    if mqar is None and lm is None:
        return _num(a.get("wall_s"))
    # studies stored while the seed replicas existed record how many runs shared one recall model's seconds
    return (mqar or 0.0) / int(a.get("mqar_replicas") or 1) + (lm or 0.0)


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def read_proxy_studies(storage: str, names: Sequence[str], measure: str | None = None) -> Proxy:
    """Stored studies as one proxy, each study one seed (its space's training seed, else its name). ``measure``
    defaults to the metric behind the first study's ``recall`` objective (``recall`` or the graded ``recall_auc``)."""
    from hlnas.analysis.pareto import load_study, study_data

    data = [study_data(load_study(storage, n)) for n in names]
    measure = measure or data[0].objective_metric("recall")
    seeds = [_study_seed(d.user_attrs) for d in data]
    if None in seeds or len(set(seeds)) < len(seeds):  # the seed cannot tell them apart: their names do
        seeds = list(names)
    runs, skipped = [], 0
    for d, seed in zip(data, seeds):
        for r in d.records:
            if r.status == "pending" or r.attrs.get("reused_from") is not None:
                continue
            a, value = r.attrs, _num(r.attrs.get(measure))
            if r.status != "ok" or value is None or not r.layout:
                skipped += 1
                continue
            mixer, ratio, layout = layout_cell(r.layout, f"study {d.name!r} trial {r.number}")
            runs.append(Run(mixer, ratio, seed, value, layout, _num(a.get("recall")), _num(a.get("recall_raw")),
                            _num(a.get("recall_baseline")), _trial_gpu_s(a),
                            a.get("device_name") or a.get("mqar_device_name")))
    cost = STUDY_COST if any(r.gpu_s is not None for r in runs) else None
    return Proxy(", ".join(names), measure, tuple(runs), cost, skipped)
