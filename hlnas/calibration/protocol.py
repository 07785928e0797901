"""Controls before a search spends its budget: is the space's recall protocol measuring recall?

Under the space's exact scale and protocol, :func:`plan` trains the all-attention control, each of the
space's linear mixers pure, and each one's 3:1 hybrid (paper placement), for ``seeds`` seeds. The
protocol is **valid** when

1. the all-attention control reaches ``control_min`` (0.9) raw recall at the training length, and
2. every pure model and every hybrid is separated from its no-recall baseline, or from its partner
   (a mixer's pure model from its hybrid), by more than twice its seed spread (max - min over seeds,
   never taken below ``spread_floor``, so equal results are never "separated").

Two further checks grade the protocol, each reported per mixer and part of validity where the space asks
(``pure_below_min_mixers``, ``graded_min_mixers``):

3. **pure below its hybrid**: in every seed the pure model's recall is below its hybrid's, and the means differ
   by more than twice the larger seed spread (a gap inside the spread is no evidence);
4. **graded**: along the mixer's ladder of attention shares (pure, ``graded_ratios``, the hybrid) the graded
   measure (``recall_auc`` where the protocol scores it, else recall) never falls by more than twice the seed
   spread and rises from pure to the hybrid by more than that. A mixer whose pure model already learns the
   task ties its hybrid ("flat"): reported, not counted.

A recall number that fails these says nothing about recall: ``hlnas search`` refuses to start on an
invalid protocol (:class:`CalibrationFailed` names the failed control, by how much, and which settings to
change). The verdict is stored with the study; seed-0 runs of layouts in the space become its trials.

This module plans and judges (which checks can still pass from part of the runs: ``hlnas.calibration.outlook``);
running the plan is the study loop's (``hlnas.search.study``), through the same executor as the trials. A run is a
:class:`~hlnas.search.trial.TrialSpec` with a negative number.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlnas.errors import ConfigError, HlnasError
from hlnas.settings import CalibrationConfig
from hlnas.model.layout import TRANSFORMER, build_layout, parse_ratio
# the verdict as text lives beside it; imported here so ``hlnas.calibration.protocol`` keeps naming every part of the verdict
from hlnas.calibration.outlook import graded_short, pure_below, pure_below_ruled_out, pure_below_short, spread
from hlnas.calibration.text import (TABLE_COLUMNS, advice, format_table, hop_lines, missing_seeds, mixer_lines,
                                    summary, table_cells)

__all__ = ["CalibrationConfig", "CalibrationRun", "CalibrationFailed", "plan", "verdict", "format_table", "table_cells",
           "summary", "advice", "TABLE_COLUMNS", "graded_value", "mixer_lines", "hop_lines", "run_summary",
           "training_length_recall"]


class CalibrationFailed(HlnasError):
    """The space's recall protocol failed its controls (the message says which, by how much, what to change)."""


@dataclass(frozen=True)
class CalibrationRun:
    key: str  # "<role>:<mixer>:s<seed>"; a ladder run's role part names its ratio: "ladder6to1:gla:s0"
    role: str  # control | pure | hybrid | ladder (a graded ratio) | extra (trained and reported, not judged)
    mixer: str  # linear mixer, or 'transformer' for the control
    layout: str
    seed: int
    params: dict | None  # the space point with this layout (seed 0 becomes a trial), or None
    ratio: str | None = None  # pure, the hybrid's or the ladder's ratio; None for the control


def _point(space, layout: str, mixer: str, ratio: str | None) -> dict | None:
    """The space's parameters that build ``layout``, if the space holds it (hetero spaces: never)."""
    if space.hetero_ratio:
        return None
    dims = space.params()
    if mixer not in dims["mixer"]:
        return None
    guesses = []
    if mixer == TRANSFORMER:
        guesses.append({"mixer": mixer, "ratio": dims["ratio"][0] if dims["ratio"] else "pure",
                        "placement": dims["placement"][0] if dims["placement"] else "paper"})
    elif ratio in dims["ratio"]:
        for placement in dims["placement"]:
            guesses.append({"mixer": mixer, "ratio": ratio, "placement": placement})
    if "attention" in dims:  # the calibration's hybrids hold full attention (the control's kind)
        if "full" not in dims["attention"]:
            return None
        guesses = [{**g, "attention": "full"} for g in guesses]
    for params in guesses:
        try:
            if str(space.layout(params)) == layout:
                return {k: v for k, v in params.items() if k in dims}
        except HlnasError:
            continue
    return None


def plan(space) -> list[CalibrationRun]:
    """The runs of the space's calibration: control, then per mixer pure and hybrid, each over the seeds."""
    cfg = space.calibration
    r = parse_ratio(cfg.hybrid_ratio)
    if space.n_layers % r:
        raise ConfigError(f"calibration.hybrid_ratio={cfg.hybrid_ratio!r} needs a depth that is a multiple of {r}; "
                          f"the space has layers={space.n_layers}. Set calibration.hybrid_ratio to a ratio dividing it")
    ladder = [g for g in cfg.graded_ratios if g != cfg.hybrid_ratio]
    extra = [g for g in cfg.extra_ratios if g != cfg.hybrid_ratio and g not in ladder]
    for name, ratios in (("graded_ratios", ladder), ("extra_ratios", extra)):
        for g in ratios:
            if space.n_layers % parse_ratio(g):
                raise ConfigError(f"calibration.{name}: {g!r} needs a depth that is a multiple of {parse_ratio(g)}; "
                                  f"the space has layers={space.n_layers}")
    stray = [m for m in cfg.mixer_order if m not in space.mixers]
    if stray:
        raise ConfigError(f"calibration.mixer_order: {', '.join(map(repr, stray))} not among the space's mixers; "
                          f"allowed: {', '.join(space.mixers)}")
    groups = [("control", TRANSFORMER, str(build_layout(TRANSFORMER, None, space.n_layers)), None)]
    for m in space.mixers:
        groups.append(("pure", m, str(build_layout(m, "pure", space.n_layers)), "pure"))
        groups.append(("hybrid", m, str(build_layout(m, cfg.hybrid_ratio, space.n_layers, "paper")), cfg.hybrid_ratio))
        groups += [("ladder", m, str(build_layout(m, g, space.n_layers, "paper")), g) for g in ladder]
        groups += [("extra", m, str(build_layout(m, g, space.n_layers, "paper")), g) for g in extra]
    runs = []
    for seed in range(cfg.seeds):
        for role, mixer, layout, ratio in groups:
            tag = f"{role}{ratio.replace(':', 'to')}" if role in ("ladder", "extra") else role
            runs.append(CalibrationRun(f"{tag}:{mixer}:s{seed}", role, mixer, layout, seed,
                                       _point(space, layout, mixer, ratio) if seed == 0 else None, ratio))
    return runs


def training_length_recall(metrics: dict) -> tuple[float | None, float | None]:
    """(raw recall, strongest no-recall baseline) of a run at the length it trained on: the fresh-model MQAR
    score, the mixed-in MQAR score at 1x, or RULER's average (its first length)."""
    src = metrics.get("recall_source")
    if src == "mqar_mixed_acc":
        mixed = metrics.get("mqar_mixed") or {}
        by_len, bases = mixed.get("by_length") or {}, mixed.get("baselines_by_length") or {}
        if by_len:
            first = min(by_len, key=int)
            b = bases.get(first) or {}
            return by_len[first], (max(b.values()) if b else metrics.get("recall_baseline"))
    return metrics.get("recall_raw"), metrics.get("recall_baseline")


def run_summary(run: CalibrationRun, status: str, metrics: dict) -> dict:
    """What the study stores of one calibration run."""
    raw, base = training_length_recall(metrics)
    keep = ("recall", "recall_raw", "recall_baseline", "recall_baseline_name", "recall_source", "recall_auc", "mqar_lr",
            "mqar_steps_done", "mqar_steps_to_target", "mqar_by_hop", "val_loss", "error_kind", "error", "wall_s",
            "train_wall_s", "mqar_s", "device_name", "mqar_device_name")
    return {"key": run.key, "role": run.role, "mixer": run.mixer, "layout": run.layout, "seed": run.seed, "ratio": run.ratio,
            "status": status, "raw_train_length": raw, "baseline_train_length": base,
            **{k: metrics[k] for k in keep if k in metrics}}


def _mean_by_hop(summaries: list[dict]) -> dict[str, dict] | None:
    """Per hop count of the query (VT protocols), the seeds' mean test accuracy and the strongest no-recall baseline
    of those queries; None where the runs store no split (MQAR, older studies)."""
    splits = [r["mqar_by_hop"] for r in summaries if r.get("mqar_by_hop")]
    if not splits:
        return None
    hops = sorted({h for s in splits for h in s}, key=int)
    return {h: {"acc": sum(s[h]["acc"] for s in splits if h in s) / sum(h in s for s in splits),
                "baseline": max(s[h]["baseline"] for s in splits if h in s)} for h in hops}


def _tag(key: str) -> str:
    return key.split(":", 1)[0]


def graded_value(summary: dict) -> float | None:
    """A run's graded measure: the fresh-model MQAR's learning AUC where the protocol scores it, else its recall."""
    v = summary.get("recall_auc")
    return float(v) if v is not None else (float(summary["recall"]) if summary.get("recall") is not None else None)


def verdict(space, runs: dict[str, dict], stopped: str | None = None) -> dict:
    """Judge stored run summaries (``key -> run_summary``): rows, failures, per-mixer checks, and ``valid``.
    ``stopped``: the calibration stopped early for this reason (:func:`hopeless`), so runs it did not train are
    missing without counting as failures; the reason is the first failure (kind ``stopped``)."""
    return _judge(space, runs, stopped)[0]


def _judge(space, runs: dict[str, dict], stopped: str | None = None) -> tuple[dict, list[dict]]:
    """:func:`verdict`, and its failures as found: each with its ``kind``, ``message`` and, for a row's, the ``row``."""
    cfg, planned = space.calibration, plan(space)
    rows, failures = [], []
    if stopped:
        n = len(planned) - len(runs)
        failures.append({"kind": "stopped", "message": f"{stopped}: the verdict cannot be valid, so the {n} runs not "
                                                        "stored were not trained"})
    by_group: dict[tuple[str, str], list[dict]] = {}
    for r in runs.values():
        by_group.setdefault((_tag(r["key"]), r["mixer"]), []).append(r)
    expected = {}
    for p in planned:
        expected.setdefault((_tag(p.key), p.mixer), p)
    for (tag, mixer), p in expected.items():
        rows.append(_row(p, sorted(by_group.get((tag, mixer), []), key=lambda r: r["seed"]), cfg))
    index = {(r["role"], r["mixer"]): r for r in rows if r["role"] not in ("ladder", "extra")}
    for row in rows:
        if len(row["recall"]) < cfg.seeds:
            # not trained because of the stop, or a run not judged (extra): nothing the verdict rests on
            if (stopped and not row["failed_runs"]) or row["role"] == "extra":
                row["verdict"] = "missing"
                continue
            failures.append({"row": row, "kind": "missing",
                             "message": missing_seeds(_name(row), row, cfg.seeds)})
            row["verdict"] = "missing"
            continue
        if row["role"] == "ladder":
            row["verdict"] = "graded"  # on the ladder only: judged by the graded check below
            continue
        if row["role"] == "extra":
            row["verdict"] = "reported"  # trained for the study (calibration.extra_ratios), not judged
            continue
        if row["role"] == "control":
            short = _control_short(row["layout"], min(row["recall"]), f"(seeds {_vals(row)})", cfg)
            row["verdict"] = "FAIL" if short else "pass"
            if short:
                failures.append({"row": row, "kind": "control", "message": short})
            continue
        partner = index.get(("hybrid" if row["role"] == "pure" else "pure", row["mixer"]))
        need = 2 * row["spread"]
        above = row["mean"] - row["baseline"]
        apart = None
        if partner and partner.get("mean") is not None:
            apart = abs(row["mean"] - partner["mean"])
            need_pair = 2 * max(row["spread"], partner["spread"])
        sep_base, sep_pair = above > need, apart is not None and apart > need_pair
        final = partner is not None and len(partner["recall"]) >= cfg.seeds  # else its partner may still separate it
        row.update(above_baseline=above, apart_from_partner=apart,
                   verdict="pass" if sep_base or sep_pair else "FAIL" if final else "open")
        if row["verdict"] != "pass":
            msg = (f"{_name(row)} ({row['layout']}) scored {row['mean']:.3f} (seeds {_vals(row)}), {above:+.3f} from its "
                   f"no-recall baseline {row['baseline']:.3f}")
            if apart is not None:
                msg += f" and {apart:.3f} from its {'hybrid' if row['role'] == 'pure' else 'pure model'} ({partner['mean']:.3f})"
            msg += f": neither is more than twice the seed spread ({need:.3f})"
            failures.append({"row": row, "kind": "separation", "message": msg})
    mixers = {m: _mixer_checks(m, rows, cfg) for m in space.mixers}
    for row in rows:  # the pure/hybrid rows carry the pair's answer (the table's last lines)
        if row["role"] in ("pure", "hybrid") and mixers[row["mixer"]]["pure_below"] is not None:
            row["pure_below"] = mixers[row["mixer"]]["pure_below"]
    n_below = sum(1 for c in mixers.values() if c["pure_below"])
    n_graded = sum(1 for c in mixers.values() if c["graded"] == "rises")
    # a stopped calibration lacks the pairs to judge, unless what stopped it was this check's certain failure
    certain, certain_graded = (pure_below_short(space, runs), graded_short(space, mixers)) if stopped else (None, None)
    if n_below < cfg.pure_below_min_mixers and (not stopped or certain):
        failures.append({"kind": "pure_below", "message": certain or (
                         f"the pure model sits below its {cfg.hybrid_ratio} hybrid "
                         f"beyond twice the seed spread, in every seed, for {n_below} mixer(s) "
                         f"({', '.join(m for m, c in mixers.items() if c['pure_below']) or 'none'}); "
                         f"calibration.pure_below_min_mixers={cfg.pure_below_min_mixers}")})
    if n_graded < cfg.graded_min_mixers and (not stopped or certain_graded):
        failures.append({"kind": "graded", "message": certain_graded or f"the graded measure rises with the attention "
                         f"share, without falling beyond twice the seed spread, for {n_graded} mixer(s) "
                         f"({', '.join(m for m, c in mixers.items() if c['graded'] == 'rises') or 'none'}); "
                         f"calibration.graded_min_mixers={cfg.graded_min_mixers}"})
    return ({"valid": not failures, "rows": rows, "failures": [f["message"] for f in failures],
            "kinds": sorted({f["kind"] for f in failures}), "config": cfg.to_dict(), "mixers": mixers,
            "pure_below_mixers": n_below, "graded_mixers": n_graded}, failures)


def _row(p, got: list[dict], cfg) -> dict:
    """One planned layout's row of the table from its stored runs ``got`` (seeds in order): the scored seeds' recall,
    mean, spread, baseline and graded measure, and the runs that failed."""
    ok = [r for r in got if r["status"] == "ok" and r.get("raw_train_length") is not None]
    vals = [float(r["raw_train_length"]) for r in ok]
    bases = [float(r["baseline_train_length"] or 0.0) for r in ok]
    graded = [g for g in (graded_value(r) for r in ok) if g is not None]
    return {"role": p.role, "mixer": p.mixer, "layout": p.layout, "ratio": p.ratio, "seeds": [r["seed"] for r in ok],
            "recall": vals, "mean": sum(vals) / len(vals) if vals else None, "spread": spread(vals, cfg.spread_floor),
            "baseline": max(bases) if bases else None, "failed_runs": [r["key"] for r in got if r not in ok],
            "lr": [r.get("mqar_lr") for r in ok], "graded": graded,
            "graded_mean": sum(graded) / len(graded) if graded else None,
            "graded_spread": spread(graded, cfg.spread_floor), "by_hop": _mean_by_hop(ok)}


def hopeless(space, runs: dict[str, dict]) -> str | None:
    """Why the verdict can no longer be valid, whatever the runs not yet stored would score; None while it can. Four
    cases are certain from part of the runs (a run that failed to run is not counted: it may run again):

    * a control seed scored below ``calibration.control_min``, which the verdict asks of every seed;
    * a pure model or hybrid failed its separation with every seed of it and of its partner scored;
    * fewer mixers than ``calibration.pure_below_min_mixers`` can still have their pure model below its hybrid
      (:func:`pure_below_ruled_out` says why each is out);
    * fewer mixers than ``calibration.graded_min_mixers`` can still have a rising graded measure (a mixer is out once
      its whole ladder is scored and it falls or stays flat)."""
    for r in sorted(runs.values(), key=lambda r: r["key"]):
        raw = r.get("raw_train_length")
        if r["role"] == "control" and r["status"] == "ok" and raw is not None:
            short = _control_short(r["layout"], float(raw), f"on seed {r['seed']}", space.calibration)
            if short:
                return short
    judged = _judge(space, runs)
    return _separation_short(space, judged) or pure_below_short(space, runs) or graded_short(space, judged[0]["mixers"])


def _separation_short(space, judged: tuple[dict, list[dict]]) -> str | None:
    """A pure model or hybrid whose separation failed for good: the row and its partner have every seed scored (a run
    that failed to run may run again, so its row is not final), and neither the baseline nor the partner is more than
    twice the seed spread away. The verdict's own message, or None. ``judged``: :func:`_judge` of the runs."""
    seeds = space.calibration.seeds
    v, failures = judged
    final = {(r["role"], r["mixer"]) for r in v["rows"] if len(r["recall"]) >= seeds and not r["failed_runs"]}
    for f in failures:
        row = f.get("row")
        if f["kind"] != "separation" or (row["role"], row["mixer"]) not in final:
            continue
        if ("hybrid" if row["role"] == "pure" else "pure", row["mixer"]) in final:  # its partner is final too
            return f["message"]
    return None


def progress(space, runs: dict[str, dict]) -> dict:
    """Where a calibration still running stands: runs stored of those planned, the verdict of the rows so far, why it
    can no longer pass (:func:`hopeless`, or None), and per required check the mixers that can still pass it."""
    cfg, v = space.calibration, verdict(space, runs)
    return {"stored": len(runs), "planned": len(plan(space)), "verdict": v, "cannot_pass": hopeless(space, runs),
            "pure_below_min_mixers": cfg.pure_below_min_mixers, "graded_min_mixers": cfg.graded_min_mixers,
            "pure_below_open": [m for m in space.mixers if not pure_below_ruled_out(m, runs, cfg)],
            "graded_open": [m for m in space.mixers if v["mixers"][m]["graded"] not in ("falls", "flat")]}


def _control_short(layout: str, worst: float, seeds: str, cfg) -> str | None:
    """The one rule for the control: every seed must reach ``control_min`` raw recall at the training length. How far
    ``worst`` fell short, as a message (``seeds`` says which), or None when it did not."""
    if worst >= cfg.control_min:
        return None
    return (f"the all-attention control {layout} reached {worst:.3f} raw recall at the training length {seeds}, "
            f"{cfg.control_min - worst:.3f} short of calibration.control_min={cfg.control_min}")


def _share(ratio: str | None) -> float:
    """A ratio's attention share (pure 0, r:1 one layer in r)."""
    return 0.0 if ratio in (None, "pure") else 1.0 / parse_ratio(ratio)


def _mixer_checks(mixer: str, rows: list[dict], cfg: CalibrationConfig) -> dict:
    """Per mixer: is the pure model below its hybrid (every seed, beyond twice the spread), and does the graded
    measure rise along the ladder of attention shares without falling beyond twice the spread."""
    mine = {r["role"]: r for r in rows if r["mixer"] == mixer and r["role"] in ("pure", "hybrid")}
    pure, hyb = mine.get("pure"), mine.get("hybrid")
    out: dict = {"pure_below": None, "pure_below_gap": None, "graded": None, "ladder": [], "falls": []}
    if pure and hyb and len(pure["recall"]) >= cfg.seeds and len(hyb["recall"]) >= cfg.seeds:
        below, gap, _ = pure_below(dict(zip(pure["seeds"], pure["recall"])), dict(zip(hyb["seeds"], hyb["recall"])),
                                    cfg.spread_floor)
        out["pure_below_gap"], out["pure_below"] = round(gap, 4), below
    ladder = sorted((r for r in rows if r["mixer"] == mixer and r["role"] in ("pure", "hybrid", "ladder")),
                    key=lambda r: _share(r["ratio"]))
    if len(ladder) < 2 or any(len(r["graded"]) < cfg.seeds for r in ladder):
        return out
    out["ladder"] = [{"ratio": r["ratio"], "mean": round(r["graded_mean"], 4), "spread": round(r["graded_spread"], 4)}
                     for r in ladder]
    for lo, hi in zip(ladder, ladder[1:]):
        fall = lo["graded_mean"] - hi["graded_mean"]
        if fall > 2 * max(lo["graded_spread"], hi["graded_spread"]):
            out["falls"].append({"from": lo["ratio"], "to": hi["ratio"], "by": round(fall, 4)})
    first, last = ladder[0], ladder[-1]
    rise = last["graded_mean"] - first["graded_mean"]
    if out["falls"]:
        out["graded"] = "falls"
    elif rise > 2 * max(first["graded_spread"], last["graded_spread"]):
        out["graded"] = "rises"
    else:
        out["graded"] = "flat"
    return out


def _name(row: dict) -> str:
    if row["role"] == "control":
        return "the all-attention control"
    return f"{row['mixer']} {row['ratio']}" if row["role"] in ("ladder", "extra") else f"{row['mixer']} {row['role']}"


def _vals(row: dict) -> str:
    return ", ".join(f"{v:.3f}" for v in row["recall"])
