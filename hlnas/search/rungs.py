"""Multi-fidelity multi-objective search: asynchronous successive halving over the recall model's training steps,
with promotion among rung peers by non-dominated sorting (MOASHA, Schmucker et al. 2021), inside hlnas's one
search loop (:func:`hlnas.search.loop.search_loop`).

A space turns it on with a ``rungs:`` section (off by default)::

    rungs: {min_steps: 100, eta: 3}    # rungs at 100, 300, 900, ... steps, and score.mqar.steps

**Rungs.** ``ladder = [min_steps * eta**k < score.mqar.steps] + [score.mqar.steps]``. A new trial trains its fresh
recall model (:mod:`hlnas.recall.proxy`) to the first rung only, then *pauses*: the worker returns a partial
result (recall at that fidelity, its graded measure over those steps, and the checks so far) and the recall models
and optimizers stay on disk (``<state root>/<layout>/``). Only the top rung runs the rest of the trial (the LM and
its scores), continuing the recall model where it stopped: the learning-rate schedule is the full budget's and the
batches continue, so a trial promoted to the top gets exactly the result of an unscheduled run.

Why pause at rung boundaries rather than a live channel to a running trial: trials stay ``TrialSpec ->
TrialResult`` on every executor (inline, worker processes, Ray) with nothing added to them; a worker is freed at
each boundary, which is what asynchronous successive halving wants (the freed worker takes a promotion or a new
trial); every decision is made in the driver and stored before anything else runs, so a resumed study continues
from the storage and the checkpoints alone.

**Promotion (asynchronous, promotion-type, as ASHA/MOASHA).** Whenever a worker is free the driver looks, from the
second-highest rung down, for a trial paused at rung ``k`` that is among the best ``floor(n_k / eta)`` of the
``n_k`` trials that reached rung ``k`` (paused or already promoted), and promotes the best such one; only if there
is none does it start a new trial. "Best" ranks the rung's peers by non-dominated sorting of their rung values
(front 0 first), then by crowding distance within a front (the diversity tie-break; boundary points first), then
by trial number. Rung values are the study objectives a rung measures: the recall objectives (``recall``,
``recall_auc``) at the rung's fidelity and the cost objectives (known without training); objectives of the trained
LM (``val_loss``, ...) exist only at the top rung. Once no new trial can start (the target is reached, the space
is exhausted or ``stop`` holds) the search drains: the rung's non-dominated trials, and at least ``ceil(n_k / eta)``
of them, may be promoted, and when nothing is running and nothing can be promoted, the paused trials are stopped.

**Storage.** Each rung-scheduled trial holds user attr ``hlnas_rung`` = ``{"ladder": [...], "at": highest rung
reached (-1: none yet), "next": the rung it is training to, "state": running | paused | stopped | complete,
"values": {rung: [rung values, minimized]}}``; the rung bookkeeping is rebuilt from these alone, so a resumed
study continues it exactly. A paused trial stays RUNNING in optuna (the sampler treats it as under way, as it is);
a stopped one is told PRUNED with its partial results and ``status: stopped``, ``stopped_at_steps``: samplers,
``best_trials``, ``hlnas status`` and the front never count it as complete. Every trial (scheduled or not) stores
its checks as user attr ``hlnas_checks``: ``[{"step", "val_acc", "recall", "recall_auc", "loss"}, ...]``
(:func:`checks`; ``recall`` is the validation accuracy corrected for its no-recall baseline, ``recall_auc`` the
graded measure over the steps up to that check), which the dashboard can draw.

Calibration runs are never scheduled (:mod:`hlnas.search.study` submits them whole).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from hlnas.errors import ConfigError
from hlnas.metrics import RECALL_OBJECTIVES, corrected
from hlnas.overrides import is_number
from hlnas.settings import RungConfig, rung_config

__all__ = ["RungConfig", "RungScheduler", "rung_config", "ladder", "nondominated_ranks", "crowding", "rank_peers",
           "checks", "kept_run", "RUNG_ATTR"]

RUNG_ATTR = "hlnas_rung"
#: a rung measures the recall objectives (hlnas.metrics.RECALL_OBJECTIVES, the fresh recall model's) and these costs
COST_METRICS = ("kv_cache_bytes", "params", "state_bytes", "inference_bytes", "flops_per_token")


def ladder(cfg: RungConfig, max_steps: int) -> list[int]:
    """The rungs' step budgets: ``min_steps * eta**k`` below ``max_steps``, then ``max_steps``."""
    out, s = [], cfg.min_steps
    while s < max_steps:
        out.append(s)
        s *= cfg.eta
    return out + [max_steps]


# -- ranking ----------------------------------------------------------------------------------------------------


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def nondominated_ranks(points: Sequence[Sequence[float]]) -> list[int]:
    """Front index of each point (0: not dominated by any; minimization)."""
    ranks, left, r = [0] * len(points), set(range(len(points))), 0
    while left:
        front = {i for i in left if not any(_dominates(points[j], points[i]) for j in left if j != i)}
        for i in front:
            ranks[i] = r
        left -= front
        r += 1
    return ranks


def crowding(points: Sequence[Sequence[float]]) -> list[float]:
    """Crowding distance of each point within ``points`` (one front): boundary points get infinity."""
    n = len(points)
    if n <= 2:
        return [math.inf] * n
    dist = [0.0] * n
    for m in range(len(points[0])):
        order = sorted(range(n), key=lambda i: points[i][m])
        lo, hi = points[order[0]][m], points[order[-1]][m]
        dist[order[0]] = dist[order[-1]] = math.inf
        if hi == lo:
            continue
        for a, i, b in zip(order, order[1:], order[2:]):
            dist[i] += (points[b][m] - points[a][m]) / (hi - lo)
    return dist


def rank_peers(peers: dict[int, Sequence[float]]) -> list[int]:
    """Trial numbers of a rung's peers, best first: non-dominated front, then crowding distance (larger first),
    then trial number."""
    nums = sorted(peers)
    pts = [tuple(peers[k]) for k in nums]
    ranks = nondominated_ranks(pts)
    crowd = [0.0] * len(nums)
    for r in set(ranks):
        idx = [i for i in range(len(nums)) if ranks[i] == r]
        for i, c in zip(idx, crowding([pts[i] for i in idx])):
            crowd[i] = c
    return [nums[i] for i in sorted(range(len(nums)), key=lambda i: (ranks[i], -crowd[i], nums[i]))]


# -- intermediate results -------------------------------------------------------------------------------------


def kept_run(metrics: dict) -> dict | None:
    """The recall run whose curve a trial reports: the one at its kept rate (``mqar_lr``), else its first; each run
    holds ``curve`` ([[step, val_acc, loss], ...]), ``steps`` trained and ``wall_s``. None without a recall run."""
    detail = metrics.get("mqar") if isinstance(metrics.get("mqar"), dict) else None
    if not detail:
        return None
    runs = [r for r in detail.get("runs") or [] if r.get("lr") == metrics.get("mqar_lr")] or detail.get("runs") or []
    return runs[0] if runs else None


def checks(metrics: dict) -> list[dict]:
    """The per-check intermediate results of a trial's recall run (its kept rate), in the stored format of user attr
    ``hlnas_checks``: step, raw validation accuracy, ``recall`` (corrected for the validation baseline),
    ``recall_auc`` (the graded measure over the steps up to that check) and the training loss."""
    run, base = kept_run(metrics), metrics.get("mqar_val_baseline")
    if run is None or base is None:
        return []
    curve = run.get("curve") or []
    out, area, prev = [], 0.0, (0, 0.0)
    for c in curve:
        step, acc = int(c[0]), float(c[1])
        rec = corrected(acc, base)
        area += (step - prev[0]) * (prev[1] + rec) / 2
        prev = (step, rec)
        out.append({"step": step, "val_acc": acc, "recall": round(rec, 4), "recall_auc": round(area / step, 4),
                    "loss": c[2] if len(c) > 2 else None})
    return out


# -- the scheduler ------------------------------------------------------------------------------------------------


class RungScheduler:
    """The rung bookkeeping of one study, rebuilt from its trials' ``hlnas_rung`` attrs (see the module docstring).

    ``metrics``: the study's objective metric names; ``directions``: theirs. Only the search loop writes the attrs."""

    def __init__(self, cfg: RungConfig, max_steps: int, metrics: Sequence[str], directions: Sequence[str],
                 state_root: str) -> None:
        self.cfg, self.ladder = cfg, ladder(cfg, max_steps)
        self.top = len(self.ladder) - 1
        self.metrics, self.directions = list(metrics), list(directions)
        measured = set(RECALL_OBJECTIVES) | set(COST_METRICS)
        self.rung_metrics = [i for i, m in enumerate(self.metrics) if m in measured]  # objectives a rung measures
        if not any(self.metrics[i] in RECALL_OBJECTIVES for i in self.rung_metrics):
            raise ConfigError(f"rungs need a recall objective measured at every rung ({', '.join(RECALL_OBJECTIVES)}); "
                              f"the study's objectives are {', '.join(self.metrics)}")
        self.state_root = state_root
        self.records: dict[int, dict] = {}  # trial number -> its hlnas_rung attr

    # -- persistence
    def load(self, trials) -> None:
        """Rebuild from stored trials (``FrozenTrial`` s)."""
        self.records = {t.number: dict(t.user_attrs[RUNG_ATTR]) for t in trials if RUNG_ATTR in t.user_attrs}

    def state_dir(self, layout: str) -> str:
        return os.path.join(self.state_root, layout)

    # -- values at a rung
    def rung_values(self, metrics: dict) -> list[float] | None:
        """The minimized values of the objectives a rung measures, from a (partial) result; None if one is missing."""
        out = []
        for i in self.rung_metrics:
            v = metrics.get(self.metrics[i])
            if not is_number(v) or not math.isfinite(float(v)):
                return None
            out.append(-float(v) if self.directions[i] == "maximize" else float(v))
        return out

    # -- transitions (each returns the new attr; the caller stores it)
    def start(self, number: int) -> dict:
        rec = {"ladder": self.ladder, "at": -1, "next": 0, "state": "running", "values": {}}
        self.records[number] = rec
        return rec

    def reached(self, number: int, values: list[float]) -> dict:
        """A trial's run to its ``next`` rung came back with ``values``: it pauses there (or completes at the top)."""
        rec = self.records[number]
        k = rec["next"]
        rec.update(at=k, values={**rec["values"], str(k): values}, state="complete" if k == self.top else "paused")
        return rec

    def promote(self, number: int) -> dict:
        rec = self.records[number]
        rec.update(next=rec["at"] + 1, state="running")
        return rec

    def stop(self, number: int) -> dict:
        rec = self.records[number]
        rec.update(state="stopped")
        return rec

    def forget(self, number: int) -> None:
        """A trial that failed (or was re-queued) leaves the rungs."""
        self.records.pop(number, None)

    # -- queries
    def steps(self, number: int) -> int | None:
        """The recall-model steps the trial trains to now; None at the top rung (a whole trial)."""
        k = self.records[number]["next"]
        return None if k == self.top else self.ladder[k]

    def paused(self) -> list[int]:
        return sorted(n for n, r in self.records.items() if r["state"] == "paused")

    def running(self) -> list[int]:
        return sorted(n for n, r in self.records.items() if r["state"] == "running")

    def peers(self, k: int) -> dict[int, list[float]]:
        """Trials that reached rung ``k`` (paused there, promoted beyond it, stopped there or complete)."""
        return {n: r["values"][str(k)] for n, r in self.records.items() if str(k) in r["values"]}

    def next_promotion(self, drain: bool = False) -> int | None:
        """The paused trial to promote now (highest rung first), or None: among the best ``floor(n_k / eta)`` of
        its rung (while draining: its non-dominated ones, and at least ``ceil(n_k / eta)``)."""
        for k in range(self.top - 1, -1, -1):
            peers = self.peers(k)
            if not peers:
                continue
            n = len(peers)
            quota = n // self.cfg.eta
            if drain:  # no new trial will come to this rung: its front goes on, and at least ceil(n / eta)
                quota = max(math.ceil(n / self.cfg.eta), nondominated_ranks(list(peers.values())).count(0))
            for num in rank_peers(peers)[:quota]:
                rec = self.records[num]
                if rec["state"] == "paused" and rec["at"] == k:
                    return num
        return None
