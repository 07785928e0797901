"""A stored grid study -> one CSV row per candidate (the columns issue #6 asks for) and a short summary.

    python experiments/paper_grid/collect.py --storage sqlite:///.gpu_state/h200.db --study paper_grid_h200 \
        --out experiments/paper_grid/results/grid_h200.csv

Every layout of the study's space gets a row, trained or not (status says which: ok, failed with its
error kind, or not run), so a partial grid is visible as such. KV-cache bytes are recomputed with the cost
model at 4k and 32k context (batch 1, bf16); the rest is what the trial recorded.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import optuna

from hlnas.score.ruler import RULER_TASKS
from hlnas.space import space_from_dict
from hlnas.budget import layout_metrics

COLUMNS = ["mixer", "ratio", "layout", "attention_layers", "params", "kv_cache_bytes_4k", "kv_cache_bytes_32k", "state_bytes",
           "val_loss", "ruler_avg", *[f"ruler_{t}" for t in RULER_TASKS], "mqar_acc", "mqar_mixed_acc", "mqar_mixed_by_length", "recall_raw",
           "recall_baseline", "recall_baseline_name", "recall", "tokens_per_s",
           "steady_tokens_per_s", "train_wall_s", "status", "error_kind", "trial"]


def _protocol_baseline(space, attrs: list[dict]) -> tuple[float, str] | None:
    """The strongest no-recall baseline of the space's recall protocol, for studies from before hlnas stored it
    with each trial: recomputed on the same test instances (mqar_mixed only; None otherwise)."""
    if any(a.get("recall_baseline") is not None for a in attrs) or "mqar_mixed" not in space.score.objectives:
        return None
    from hlnas.data.tokenizer import load_tokenizer
    from hlnas.recipe import mqar_recall_config
    from hlnas.score.baselines import strongest
    from hlnas.score.objectives import mixed_baselines

    tcfg, dcfg = space.train, space.data
    base = mixed_baselines(mqar_recall_config(tcfg, dcfg), space.score, load_tokenizer(dcfg.tokenizer).eos_id)
    name, b = strongest(base["mean"])
    return b, name


def _recall_columns(a: dict, baseline: tuple[float, str] | None) -> dict:
    """Raw recall, its no-recall baseline and the corrected recall; an older trial's 'recall' was the raw score."""
    from hlnas.score.baselines import corrected

    if a.get("recall_raw") is not None:
        return {k: a.get(k) for k in ("recall_raw", "recall_baseline", "recall_baseline_name", "recall")}
    raw = a.get("mqar_mixed_acc", a.get("recall"))
    if raw is None or baseline is None:
        return {"recall_raw": raw, "recall_baseline": None, "recall_baseline_name": None, "recall": None}
    return {"recall_raw": raw, "recall_baseline": baseline[0], "recall_baseline_name": baseline[1],
            "recall": corrected(raw, baseline[0])}


def rows(study: optuna.Study) -> list[dict]:
    import json

    raw = study.user_attrs["hlnas_space"]
    space = space_from_dict(json.loads(raw) if isinstance(raw, str) else raw)
    model = space.model
    by_layout: dict[str, optuna.trial.FrozenTrial] = {}
    for t in study.trials:  # the latest finished attempt of each layout wins; COMPLETE beats anything else
        lay = t.user_attrs.get("layout")
        if lay is None or "reused_from" in t.user_attrs:
            continue
        old = by_layout.get(lay)
        if old is None or t.state == optuna.trial.TrialState.COMPLETE or old.state != optuna.trial.TrialState.COMPLETE:
            by_layout[lay] = t
    baseline = _protocol_baseline(space, [t.user_attrs for t in by_layout.values()])
    out = []
    for params in space.grid():
        layout = str(space.layout(params))
        m4 = layout_metrics(layout, model, 4096)
        m32 = layout_metrics(layout, model, 32768)
        t = by_layout.get(layout)
        a = t.user_attrs if t is not None else {}
        tasks = (a.get("ruler") or {}).get("tasks", {})
        row = {"mixer": params["mixer"], "ratio": params.get("ratio") if params["mixer"] != "transformer" else "full",
               "layout": layout, "attention_layers": " ".join(map(str, m4["attention_layers"])), "params": m4["params"],
               "kv_cache_bytes_4k": m4["kv_cache_bytes"], "kv_cache_bytes_32k": m32["kv_cache_bytes"],
               "state_bytes": m4["state_bytes"], "val_loss": a.get("val_loss"),
               "ruler_avg": (a.get("ruler") or {}).get("average"), "mqar_acc": a.get("mqar_acc"),
               **_recall_columns(a, baseline),
               "mqar_mixed_acc": a.get("mqar_mixed_acc"),
               "mqar_mixed_by_length": " ".join(f"{L}:{v:.4f}" for L, v in (a.get("mqar_mixed") or {}).get("by_length", {}).items()) or None,
               "tokens_per_s": a.get("tokens_per_s"),
               "steady_tokens_per_s": a.get("steady_tokens_per_s"), "train_wall_s": a.get("train_wall_s"),
               "status": ("not run" if t is None else a.get("status") or t.state.name.lower()),
               "error_kind": a.get("error_kind"), "trial": None if t is None else t.number}
        if t is not None and t.state == optuna.trial.TrialState.RUNNING:
            row["status"] = "running when the lease ended"
        row.update({f"ruler_{k}": v for k, v in tasks.items()})
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--study", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    data = rows(optuna.load_study(study_name=args.study, storage=args.storage))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in data:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
    done = [r for r in data if r["status"] == "ok"]
    print(f"{args.out}: {len(data)} candidates, {len(done)} trained and scored")
    for r in data:
        vl = "-" if r["val_loss"] is None else f"{r['val_loss']:.3f}"
        rc = "-" if r["recall_raw"] is None else f"{r['recall_raw']:.4f}"
        b = "-" if r["recall_baseline"] is None else f"{r['recall_baseline']:.4f}"
        cr = "-" if r["recall"] is None else f"{r['recall']:.4f}"
        print(f"  {r['layout']}  {r['mixer']:<15} {str(r['ratio']):<5} val_loss {vl:>6}  recall raw {rc:>7} no-recall {b:>7} "
              f"corrected {cr:>7}  {r['status']} {r['error_kind'] or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
