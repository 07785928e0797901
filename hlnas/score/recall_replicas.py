"""Recall-proxy runs of one layout trained as replicas of one model (issue #21, hlnas.training.replicas).

:func:`train_mqar_replicas` trains runs ``(seed, lr)`` of one layout (the calibration's seed pairs, a rate sweep)
``slots`` at a time as one :class:`~hlnas.training.replicas.ReplicatedLM`, each run as
:func:`hlnas.score.recall_proxy` trains one rate alone (``_one_rate``): its seed's weights, training batches and
validation instances, its rate's warmup-cosine schedule over ``score.mqar.steps``, the same validation checks, and its
own early stop at ``score.mqar.target``. A run that stops is frozen and its slot takes the next run (fresh weights,
fresh optimizer state, its own step counter). On CUDA the step is one captured graph (hlnas.training.step.make_step);
as in the solo proxy, capture trains its warm-up steps on a run's first batch at the first rate, and a run that
later starts in a freed slot replays the same warm-up steps, so each run's curve is its solo graph run's.

What it does not do (yet): the paused/continued runs of ``paused_at``, and the sweep policy of ``train_mqar``, which
trains rates one after another and stops at the first that reaches the target (here every run given is trained).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from hlnas.config import ModelConfig
from hlnas.layout import Layout
from hlnas.model import seeded_model
from hlnas.score.mqar import MqarTask, make_mqar, mqar_accuracy, mqar_loss
from hlnas.score.recall_proxy import MqarConfig, mqar_train_batches, recall_model_config
from hlnas.training.loop import autocast_context, autocast_dtype, cosine_lr

__all__ = ["train_mqar_replicas"]


def _feed(mcfg: MqarTask, cfg: MqarConfig, seed: int, lr: float, warm: int, device=None):
    """A run's ``((x, y), lr)`` per step, as its solo run takes them: ``warm`` capture warm-up steps on its first batch
    at the first rate, then one batch a step at ``lr_at(steps done)``."""
    batches = mqar_train_batches(mcfg, cfg.batch, seed, device=device)  # on the device a block at a time
    lr_at = lambda s: cosine_lr(s, cfg.steps, lr, cfg.warmup_frac, 0.0)  # noqa: E731
    if warm:
        first = next(batches)
        for _ in range(warm):
            yield first, lr_at(0)
    done = warm
    for xy in batches:
        yield xy, lr_at(done)
        done += 1


class _Run:
    def __init__(self, index: int, seed: int, lr: float, layout, rcfg, mcfg, cfg, warm: int, device=None):
        self.index, self.seed, self.lr = index, int(seed), float(lr)
        self.model = seeded_model(layout, rcfg, self.seed)  # its weights; at the end, its trained weights
        self.feed = _feed(mcfg, cfg, self.seed, self.lr, warm, device)
        self.val = make_mqar(mcfg, cfg.val, (2**31 - 1 - self.seed) % 2**31, split="train")
        self.done, self.curve, self.error, self.t0 = 0, [], None, time.perf_counter()


def train_mqar_replicas(layout: Layout, model_cfg: ModelConfig, cfg: MqarConfig, runs: Sequence[tuple[int, float]], *,
                        slots: int | None = None, device=None) -> list[dict]:
    """Train ``runs`` (``(seed, lr)`` pairs of one layout) as replicas of one model, ``slots`` at a time (default: all).

    Returns one dict per run, in the order given, with ``_one_rate``'s keys: ``seed``, ``lr``, ``val_acc`` (its last
    check), ``steps``, ``curve`` (``[step, val_acc, loss]`` per check), ``final_loss``, ``error``, ``finished``,
    ``wall_s`` (from its start to its stop), ``mode`` (``graph`` or ``eager``) and ``model`` (a solo model with its
    trained weights)."""
    from hlnas.training.replica_step import ReplicaAdamW, per_replica
    from hlnas.training.replicas import replicate
    from hlnas.training.step import WARMUP_STEPS, make_step

    if not runs:
        return []
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    mcfg = MqarTask(vocab_size=cfg.vocab, seq_len=cfg.seq_len, num_kv_pairs=cfg.kv_pairs)
    rcfg = recall_model_config(model_cfg, dict(cfg.model), cfg.vocab)
    R = min(len(runs), slots or len(runs))
    use_graph = bool(cfg.graph) and device.type == "cuda"
    warm = WARMUP_STEPS if use_graph else 0
    autocast = autocast_dtype("auto", device)
    queue = [(i, s, lr) for i, (s, lr) in enumerate(runs)]

    def start(i, s, lr):
        return _Run(i, s, lr, layout, rcfg, mcfg, cfg, warm, device)

    active = [start(*queue.pop(0)) for _ in range(R)]
    for run in active:
        run.model.to(device)  # the replicated storage is made where the solo weights are
    rep = replicate([run.model for run in active])
    opt = ReplicaAdamW(rep, [run.lr for run in active], betas=(0.9, cfg.beta2), weight_decay=cfg.weight_decay)
    firsts = [next(run.feed) for run in active]
    last = [xy for xy, _ in firsts]  # a frozen slot with no run left goes on computing on its last batch

    def batch(parts):
        return tuple(torch.cat(t).to(device, non_blocking=True) for t in zip(*parts))

    opt.set_lrs([lr for _, lr in firsts])
    step, mode = make_step(rep, opt, per_replica(mqar_loss, R), batch(last), graph=use_graph, autocast=autocast)
    results: dict[int, dict] = {}
    slot: list[_Run | None] = list(active)
    pending = None  # the first step's batches and rates when they are already drawn
    if mode == "graph":  # capture trained the warm-up steps on each run's first batch: they count as steps
        for run in active:
            run.done = warm
            for _ in range(warm - 1):
                next(run.feed)
    elif warm:  # capture failed: eager from here, the feeds without warm-up steps (as the solo proxy goes on)
        warm = 0
        for run in active:
            run.feed = _feed(mcfg, cfg, run.seed, run.lr, 0, device)
    else:
        pending = firsts

    def finish(r: int, run: _Run, finished: bool) -> None:
        rep.to_solo(r, run.model)
        results[run.index] = {"seed": run.seed, "lr": run.lr, "val_acc": run.curve[-1][1] if run.curve else 0.0,
                              "steps": run.done, "curve": run.curve, "final_loss": run.curve[-1][2] if run.curve else None,
                              "error": run.error, "finished": finished, "mode": mode,
                              "wall_s": round(time.perf_counter() - run.t0, 2), "model": run.model}

    def check(r: int, run: _Run, loss) -> bool:
        """The solo proxy's stop rule at its validation checks; True when the run stops."""
        if not (run.done % cfg.eval_every == 0 or run.done == cfg.steps) or (mode == "graph" and run.done <= warm):
            return run.done >= cfg.steps
        lv = float(loss[r])
        if not math.isfinite(lv):
            run.error = f"non-finite MQAR loss {lv} at step {run.done} (lr {run.lr:g})"
            return True
        rep.to_solo(r, run.model)
        with autocast_context(device, autocast):
            acc = mqar_accuracy(run.model, *run.val, batch_size=cfg.batch, device=device)
        run.curve.append([run.done, round(acc, 4), round(lv, 4)])
        if cfg.target is not None and acc >= cfg.target:
            return True
        if cfg.budget_s is not None and time.perf_counter() - run.t0 > cfg.budget_s:
            return True
        return run.done >= cfg.steps

    while any(run is not None for run in slot):
        if pending is None:
            parts, lrs = [], []
            for r, run in enumerate(slot):
                if run is None:
                    parts.append(last[r])
                    lrs.append(0.0)
                else:
                    xy, lr = next(run.feed)
                    last[r] = xy
                    parts.append(xy)
                    lrs.append(lr)
        else:
            parts, lrs = [xy for xy, _ in pending], [lr for _, lr in pending]
        pending = None
        opt.set_lrs(lrs)
        loss = step(*batch(parts))
        for r, run in enumerate(slot):
            if run is None:
                continue
            run.done += 1
            if not check(r, run, loss):
                continue
            finish(r, run, True)
            opt.freeze(r)
            slot[r] = None
            if queue:  # the slot takes the next run: fresh weights, optimizer state and step counter
                nxt = start(*queue.pop(0))
                nxt.model.to(device)
                opt.restart(r, nxt.model)
                slot[r] = nxt
    return [results[i] for i in range(len(runs))]
