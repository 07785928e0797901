"""Made-up hlnas-shaped studies, written with optuna only as the study loop writes them: what the Pareto, dashboard and
report tests read (plausible metrics, a stored calibration verdict, failed and infeasible trials)."""

from __future__ import annotations

import itertools
import math
import random
import warnings

import optuna

from hlnas.model.catalog import PAPER_MIXERS
from hlnas.model.layout import PAPER_RATIOS, build_layout

__all__ = ["OBJECTIVES", "KV_PER_ATTN_LAYER", "trial_attrs", "add_trial", "calibration_verdict", "make_study"]

OBJECTIVES = [
    {"name": "recall", "metric": "recall", "direction": "maximize"},
    {"name": "kv_cache_bytes", "metric": "kv_cache_bytes", "direction": "minimize"},
]
KV_PER_ATTN_LAYER = 2 * 4 * 16 * 1024 * 2  # 2 (K,V) x 4 heads x 16 dims x 1024 tokens x bf16
_QUALITY = {"hgrn": 0.05, "retnet": 0.02, "gla": 0.12, "hgrn2": 0.16, "deltanet": 0.2, "gated_deltanet": 0.22}
_GROUPS = ("Multikey", "Multiquery", "Multivalue", "Singlevalue", "CWE+FWE", "QA", "VT")


def trial_attrs(mixer: str, ratio: str | None = "pure", n_layers: int = 24, *, seed: int = 0, ruler: bool = True, **over) -> dict:
    """User attrs of one trial as hlnas's study loop records them, with made-up but plausible metrics."""
    layout = build_layout(mixer, None if mixer == "transformer" else ratio, n_layers)
    share = len(layout.attention_layers) / n_layers
    q = 0.25 if mixer == "transformer" else _QUALITY[mixer]
    rng = random.Random(f"{mixer}{ratio}{seed}")
    recall = round(min(1.0, q + 0.6 * math.sqrt(share) + rng.uniform(-0.02, 0.02)), 4)
    attrs = {
        "layout": str(layout), "mixers": list(layout.mixers), "attention_layers": list(layout.attention_layers),
        "ratio": layout.ratio, "linear_mixers": list(layout.linear_mixers), "placement": None if share in (0, 1) else "paper",
        "params": 1_000_000 + 1000 * len(layout.attention_layers), "kv_cache_bytes": KV_PER_ATTN_LAYER * len(layout.attention_layers),
        "kv_context": 1024, "state_bytes": 4096 * (n_layers - len(layout.attention_layers)), "flops_per_token": 2_000_000,
        "val_loss": round(3.2 - q - 0.2 * share + rng.uniform(-0.01, 0.01), 4), "recall": recall, "mqar_acc": recall,
        "tokens_per_s": 5000.0, "train_wall_s": 12.0, "status": "ok", "error_kind": None, "error": None,
    }  # fmt: skip
    # the recall checks of its fresh recall model (hlnas.search.rungs.checks' format): learning up to its recall by step 300
    attrs["hlnas_checks"] = [{"step": s, "val_acc": round(0.25 + 0.75 * recall * min(1.0, s / 300), 4),
                              "recall": round(recall * min(1.0, s / 300), 4), "recall_auc": round(recall * min(1.0, s / 300) / 2, 4),
                              "loss": 1.0} for s in (100, 200, 300, 400)]
    if ruler:
        groups = {g: round(min(1.0, recall * (0.6 + 0.1 * i)), 3) for i, g in enumerate(_GROUPS)}
        attrs["ruler"] = {"tasks": {"niah_single_1": groups["Singlevalue"], "vt": groups["VT"]}, "groups": groups, "average": recall}
    attrs.update(over)
    return attrs


def add_trial(study: optuna.Study, attrs: dict, *, state=optuna.trial.TrialState.COMPLETE, constraints=None) -> None:
    values = None
    if state == optuna.trial.TrialState.COMPLETE:
        values = [attrs[o["metric"]] for o in study.user_attrs["hlnas_objectives"]]
    dist = optuna.distributions.CategoricalDistribution(sorted(set(PAPER_MIXERS) | {"transformer"}))
    mixer = attrs["linear_mixers"][0] if attrs["linear_mixers"] else "transformer"
    study.add_trial(optuna.trial.create_trial(state=state, values=values, params={"mixer": mixer}, distributions={"mixer": dist},
                                              user_attrs=attrs, constraints=constraints))  # fmt: skip


def calibration_verdict(mixers) -> dict:
    """A stored calibration verdict of the shape hlnas.calibration.protocol.verdict writes (control, pure and 3:1 per mixer)."""
    rows = [{"role": "control", "mixer": "transformer", "layout": "A" * 24, "recall": [0.97, 0.95], "mean": 0.96,
             "spread": 0.02, "baseline": 0.125, "verdict": "pass"}]
    for i, m in enumerate(mixers):
        rows += [{"role": "pure", "mixer": m, "layout": f"{m} pure", "recall": [0.2 + 0.05 * i, 0.22 + 0.05 * i],
                  "mean": 0.21 + 0.05 * i, "spread": 0.02, "baseline": 0.125, "verdict": "pass"},
                 {"role": "hybrid", "mixer": m, "layout": f"{m} 3:1", "recall": [0.9, 0.92], "mean": 0.91, "spread": 0.02,
                  "baseline": 0.125, "verdict": "pass"}]
    return {"valid": True, "failures": [], "kinds": [], "rows": rows, "config": {"control_min": 0.9, "hybrid_ratio": "3:1"}}


# figures a paper-grid study leaves empty by design (each says why): its cells are the paper placement only, so no
# (mixer, ratio) has two placements to set side by side
EMPTY_IN_PAPER_GRID = ("hlnas_recall_vs_placement",)


def make_study(storage=None, name: str = "hlnas-test", *, paper_grid: bool = True, mixers=("gla", "deltanet", "hgrn2"),
               ratios=PAPER_RATIOS, transformer: bool = True, failed: bool = True, infeasible: bool = True) -> optuna.Study:
    """An hlnas-shaped 2-objective study (recall max, KV bytes min) with ok, failed and infeasible trials; not a
    ``paper_grid`` one stores a placement space (the paper's cells and more), whose trials would not fit the overlay."""
    study = optuna.create_study(storage=storage, study_name=name, directions=[o["direction"] for o in OBJECTIVES])
    with warnings.catch_warnings():  # set_metric_names is "experimental" in optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o["name"] for o in OBJECTIVES])
    space = {"mixers": list(mixers), "ratios": list(ratios), **({} if paper_grid else {"placements": ["paper", "front"]})}
    for key, value in {"hlnas_version": "0.1.0", "hlnas_space": space,
                       "hlnas_space_hash": "abc123", "hlnas_objectives": OBJECTIVES, "hlnas_kv_context": 1024,
                       "hlnas_preset": "proxy-tiny", "hlnas_paper_grid": paper_grid,
                       "hlnas_calibration": {"status": "valid", "verdict": calibration_verdict(mixers)}}.items():  # fmt: skip
        study.set_user_attr(key, value)
    for mixer, ratio in itertools.product(mixers, ratios):
        add_trial(study, trial_attrs(mixer, ratio))
    if transformer:
        add_trial(study, trial_attrs("transformer"))
    if failed:
        attrs = trial_attrs("retnet", "6:1", status="failed", error_kind="oom", error="CUDA out of memory", recall=None, ruler=False)
        add_trial(study, attrs, state=optuna.trial.TrialState.FAIL)
    if infeasible:
        add_trial(study, trial_attrs("gated_deltanet", "3:1", status="infeasible"), constraints={"max_params": 5.0})
    return study
