"""Recall-proxy runs of one layout trained as replicas of one model (issue #21, hlnas.training.replicas).

:func:`train_mqar_replicas` trains runs ``(seed, lr)`` of one layout (the calibration's seed pairs, a rate sweep)
``slots`` at a time as one :class:`~hlnas.training.replicas.ReplicatedLM`, each run as
:func:`hlnas.recall.proxy` trains one rate alone (``_one_rate``): its seed's weights, training batches and
validation instances, its rate's warmup-cosine schedule over ``score.mqar.steps``, the same validation checks, and its
own early stop at ``score.mqar.target``. A run that stops is frozen and its slot takes the next run (fresh weights,
fresh optimizer state, its own step counter). On CUDA the step is one captured graph (hlnas.training.step.make_step);
as in the solo proxy, capture trains its warm-up steps on a run's first batch at the first rate, and a run that
later starts in a freed slot replays the same warm-up steps, so each run's curve is its solo graph run's.

:func:`train_mqar_seeds` is :func:`~hlnas.recall.proxy.train_mqar` for several seeds of one layout at once (the
calibration's seeds): each seed's rates are a chain trained in the solo sweep's order, the next rate only where the
last one did not reach the target, so each seed gets the result ``train_mqar`` gives it alone.

Both pause and continue as the solo proxy does under :func:`~hlnas.recall.proxy.paused_at`: each run trains up
to the block's ``steps`` or pauses at its first validation check past ``until``, keeping its weights, its optimizer
row, its step and drawn batches and its curve in the block's folder (a file per run), and a later call continues it
exactly; a run already finished is read back, not trained.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence

import torch

from hlnas.model.config import ModelConfig
from hlnas.errors import ConfigError
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.recall.mqar import mqar_accuracy, mqar_loss
from hlnas.recall.proxy import (MqarConfig, RecallSetup, check_stop, pause_settings,
                                      recall_setup, run_finished, sweep_result, validation_instances)
from hlnas.training.checkpoint import save_state
from hlnas.training.loop import autocast_context, autocast_dtype, cosine_lr

__all__ = ["train_mqar_layouts", "train_mqar_replicas", "train_mqar_seeds"]

#: several layouts as one mixed model whose slots keep their layouts: each layer's kinds compute only their own
#: replicas' rows (False: every kind on every row, each row's own kept; experiments/bench/proxy_throughput.py's
#: replicas_mixed_where mode measures the two)
MIXED_RANGES = True

#: what each run's result holds besides its seed: the keys of the solo proxy's rate runs (recall_proxy._one_rate)
_RATE_KEYS = ("finished", "lr", "val_acc", "steps", "curve", "mode", "final_loss", "wall_s", "resumed_s", "error", "clock",
              "model")


class _Run:
    """One run ``(seed, lr)``: its solo model, batches, schedule and curve; continued from ``path`` if a state is there."""

    def __init__(self, seed: int, lr: float, path: str | None, setup: RecallSetup, warm: int, device=None):
        self.seed, self.lr, self.path, self.setup, self.cfg, self.device = int(seed), float(lr), path, setup, setup.cfg, device
        self.model = seeded_model(setup.layout, setup.model, self.seed)  # its weights; at the end, its trained weights
        self.val = validation_instances(setup, self.seed)
        self.done = self.drawn = 0
        self.curve, self.error, self.finished, self.before_s, self.moments = [], None, False, 0.0, None
        self.clock = []  # [steps done, unix time] at each of this invocation's checks (recall_proxy._one_rate's)
        self.out_of_time = self.reached = False
        if path is not None and os.path.exists(path):  # a paused run: its weights, optimizer row, batches and curve
            saved = torch.load(path, map_location="cpu", weights_only=False)
            self.model.load_state_dict(saved["model"])
            self.done, self.drawn, self.curve = saved["done"], saved["drawn"], saved["curve"]
            self.error, self.finished, self.before_s, self.moments = saved["error"], saved["finished"], saved["wall_s"], saved["opt"]
        self.start = (self.done, self.drawn)
        self.restart_feed(warm)
        self.t0 = time.perf_counter()

    @property
    def resumed(self) -> bool:
        return self.moments is not None

    def restart_feed(self, warm: int) -> None:
        """Its ``((x, y), lr)`` per step from where it starts, as its solo run takes them: a fresh run's ``warm`` capture
        warm-up steps on its first batch (at the first rate), then one batch a step at ``lr_at(steps done)``."""
        self.done, self.drawn = self.start
        self.feed = self._feed(0 if self.resumed else warm)

    def _feed(self, warm: int):
        cfg = self.cfg
        # on the device a block at a time, as the solo proxy's
        batches = self.setup.train_batches(self.seed, start=self.drawn, device=self.device)
        lr_at = lambda s: cosine_lr(s, cfg.steps, self.lr, cfg.warmup_frac, 0.0)  # noqa: E731
        if warm:
            first = next(batches)
            self.drawn += 1
            for _ in range(warm):
                yield first, lr_at(0)
        for xy in batches:
            self.drawn += 1
            yield xy, lr_at(self.done)

    def result(self, mode: str, now: float | None = None) -> dict:
        """Its result; ``now``: the clock it stopped at (what :meth:`save` kept), so a continued run's time is this one's
        plus its own and never less (a slow save, or a garbage collection in it, once made it so)."""
        now = time.perf_counter() if now is None else now
        return {"seed": self.seed, "finished": self.finished, "lr": self.lr, "val_acc": self.curve[-1][1] if self.curve else 0.0,
                "steps": self.done, "curve": self.curve, "mode": mode, "final_loss": self.curve[-1][2] if self.curve else None,
                "wall_s": round(self.before_s + now - self.t0, 2), "resumed_s": self.before_s,
                "error": self.error, "clock": self.clock, "model": self.model}

    def save(self, opt_row: dict, now: float) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        save_state(self.path, {"done": self.done, "drawn": self.drawn, "curve": self.curve, "error": self.error,
                               "finished": self.finished, "wall_s": self.before_s + now - self.t0,
                               "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()}, "opt": opt_row})


def _train(setups: Sequence[RecallSetup], chains, *, slots: int | None, device) -> list[list[dict]]:
    """Train ``chains`` (lists of runs ``(seed, lr, state path or None)``, chain ``c`` of layout ``setups[c].layout``)
    as replicas, ``slots`` at a time (default: one per chain): of one model, or of one mixed model where the layouts
    differ (:mod:`hlnas.training.mixed_replicas`). A chain's next run starts (in the first free slot) when its last one
    stopped short of the target and was not paused by the clock: the solo sweep's rule. Returns each chain's run
    results, in order."""
    return _Replicas(list(setups), chains, slots=slots, device=device).train()


class _Replicas:
    """The runs of ``chains`` trained as replicas of one model: a queue of the runs still to train, a slot per replica
    (the run it trains, or None once frozen with no run left), and each chain's results as its runs stop."""

    def __init__(self, setups: list[RecallSetup], chains, *, slots: int | None, device):
        from hlnas.training.step import WARMUP_STEPS

        self.setups, self.chains, self.slots, self.device = setups, chains, slots, device
        cfg = self.cfg = setups[0].cfg
        if any(s.cfg != cfg or s.model != setups[0].model or s.task != setups[0].task for s in setups):
            raise ConfigError("replicas train runs of one recall protocol: the chains' recall settings differ")
        self.layouts = list(dict.fromkeys(s.layout for s in setups))
        pause = pause_settings()
        self.limit = cfg.steps if pause is None or pause[1] is None else min(pause[1], cfg.steps)
        self.until = None if pause is None else pause[2]
        self.use_graph = bool(cfg.graph) and device.type == "cuda"
        self.warm = WARMUP_STEPS if self.use_graph else 0
        # what a run read back without training reports (its solo run's mode); the step's mode once it is made
        self.mode = "graph" if self.use_graph else "eager"
        self.autocast = autocast_dtype("auto", device)
        self.results: list[list[dict]] = [[] for _ in chains]
        self.queue = [(c, 0) for c in range(len(chains))]
        self.owner: dict[int, tuple[int, int]] = {}  # id(run) -> (chain, position)

    def train(self) -> list[list[dict]]:
        active: list[_Run] = []
        while len(active) < (self.slots or len(self.chains)) and (run := self._take()) is not None:
            active.append(run)
        if not active:
            return self.results
        pending = self._start(active)
        while any(run is not None for run in self.slot):
            parts, lrs = self._draw() if pending is None else ([xy for xy, _ in pending], [lr for _, lr in pending])
            pending = None
            self.opt.set_lrs(lrs)
            loss = self.step(*self._batch(parts))
            for r, run in enumerate(self.slot):
                if run is None:
                    continue
                run.done += 1
                if self._check(r, run, loss):
                    self._stop(r, run)
        return self.results

    def _follow(self, c: int, k: int, res: dict) -> None:
        reached = self.cfg.target is not None and res["val_acc"] >= self.cfg.target  # later rates could only tie
        if k + 1 < len(self.chains[c]) and not reached and not (self.until is not None and not res["finished"]):
            self.queue.append((c, k + 1))

    def _take(self) -> _Run | None:
        """The next run that needs a slot; runs with nothing left to train are read back on the way."""
        while self.queue:
            c, k = self.queue.pop(0)
            seed, lr, path = self.chains[c][k]
            run = _Run(seed, lr, path, self.setups[c], self.warm, self.device)
            if run.finished or run.done >= self.limit:
                self.results[c].append(run.result(self.mode))
                self._follow(c, k, self.results[c][-1])
                continue
            self.owner[id(run)] = (c, k)
            return run
        return None

    def _batch(self, parts):
        return tuple(torch.cat(t).to(self.device, non_blocking=True) for t in zip(*parts))

    def _start(self, active: list[_Run]):
        """The replicated model, its optimizer and its step for the first ``active`` runs, a slot each. Returns the
        first step's batches and rates when they are already drawn, else None."""
        from hlnas.training.mixed_replicas import range_order, replicate_mixed
        from hlnas.training.replica_step import ReplicaAdamW, per_replica
        from hlnas.training.replicas import replicate
        from hlnas.training.step import compiled, make_step

        cfg = self.cfg
        self.replicas = len(active)
        for run in active:
            run.model.to(self.device)  # the replicated storage is made where the solo weights are
        # one layout: plain replicas; several: a mixed model. Where every chain has a slot of its own, a slot keeps its
        # layout (a chain's next rate takes the slot its last run freed): the slots are then ordered so each layer's
        # kinds are contiguous and each kind computes its own rows only; else any slot may take any layout
        static = MIXED_RANGES and (self.slots is None or self.slots >= len(self.chains))
        if len(self.layouts) > 1 and static:
            active[:] = [active[i] for i in range_order([run.setup.layout for run in active])]
        models = [run.model for run in active]
        self.rep = (replicate(models) if len(self.layouts) == 1 else
                    replicate_mixed(models, None if static else self.layouts, static=static))
        self.opt = ReplicaAdamW(self.rep, [run.lr for run in active], betas=(0.9, cfg.beta2), weight_decay=cfg.weight_decay)
        firsts = [next(run.feed) for run in active]
        self.last = [xy for xy, _ in firsts]  # a frozen slot with no run left goes on computing on its last batch
        self.opt.set_lrs([lr for _, lr in firsts])
        self.step, self.mode = make_step(compiled(self.rep, cfg.compile, "score.mqar.compile"), self.opt,
                                         per_replica(mqar_loss, self.replicas), self._batch(self.last),
                                         graph=self.use_graph, autocast=self.autocast)
        self.slot: list[_Run | None] = list(active)
        pending = None
        if self.mode == "graph":  # capture trained the warm-up steps on each run's first batch: they count as steps
            for run in active:
                if run.resumed:  # its capture steps are overwritten by its saved state below; its batches from where it was
                    run.restart_feed(0)
                    continue
                run.done = self.warm
                for _ in range(self.warm - 1):
                    next(run.feed)
        elif self.warm:  # capture failed: eager from here, the feeds without warm-up steps (as the solo proxy goes on)
            self.warm = 0
            for run in active:
                run.restart_feed(0)
        else:
            pending = firsts
        for r, run in enumerate(active):
            if run.resumed:
                self.opt.load_slot(r, run.model, run.moments)
        return pending

    def _draw(self):
        """Each slot's next batch and rate: its run's, or a frozen slot's last batch at rate 0."""
        parts, lrs = [], []
        for r, run in enumerate(self.slot):
            if run is None:
                parts.append(self.last[r])
                lrs.append(0.0)
            else:
                xy, lr = next(run.feed)
                self.last[r] = xy
                parts.append(xy)
                lrs.append(lr)
        return parts, lrs

    def _check(self, r: int, run: _Run, loss) -> bool:
        """The solo proxy's stop rule at its validation checks; True when the run stops."""
        cfg = self.cfg
        if not (run.done % cfg.eval_every == 0 or run.done == cfg.steps) or (self.mode == "graph" and run.done <= self.warm):
            return run.done >= self.limit
        lv = float(loss[r])  # waits for the step: the clock reads when its work was done
        run.clock.append([run.done, round(time.time(), 3)])
        if not math.isfinite(lv):
            run.error = f"non-finite MQAR loss {lv} at step {run.done} (lr {run.lr:g})"
            return True
        self.rep.to_solo(r, run.model)
        with autocast_context(self.device, self.autocast):
            acc = mqar_accuracy(run.model, *run.val, batch_size=cfg.batch, device=self.device)
        run.curve.append([run.done, round(acc, 4), round(lv, 4)])
        if os.environ.get("HLNAS_RECALL_PROGRESS"):  # sweeps: a line per check, so a killed run still tells
            print(f"[recall] {run.setup.layout} seed={run.seed} lr={run.lr:g} step={run.done} val={acc:.3f} loss={lv:.3f} "
                  f"t={time.perf_counter() - run.t0:.0f}s mode={self.mode} replicas={self.replicas}",
                  file=sys.stderr, flush=True)
        why = check_stop(cfg, acc, time.perf_counter() - run.t0, self.until, run.done, self.limit)
        run.reached, run.out_of_time = why == "target", why == "out_of_time"
        return why is not None or run.done >= self.limit

    def _stop(self, r: int, run: _Run) -> None:
        """Freeze slot ``r``, finish its run, and give the slot the next run if there is one."""
        self.opt.freeze(r)
        self._finish(r, run)
        self.slot[r] = None
        nxt = self._take()
        if nxt is not None:  # the slot takes the next run: its weights, optimizer state and step counter
            nxt.model.to(self.device)
            if nxt.resumed:
                self.opt.load_slot(r, nxt.model, nxt.moments)
            else:
                self.opt.restart(r, nxt.model)
            self.slot[r] = nxt

    def _finish(self, r: int, run: _Run) -> None:
        run.finished = run_finished(self.cfg, run.finished, run.error, run.done, self.limit, run.out_of_time, run.reached)
        self.rep.to_solo(r, run.model)
        now = time.perf_counter()
        if run.path is not None:
            run.save(self.opt.slot_state(r), now)
        c, k = self.owner.pop(id(run))
        self.results[c].append(run.result(self.mode, now))
        self._follow(c, k, self.results[c][-1])


def _device(device) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def train_mqar_replicas(layout: Layout, model_cfg: ModelConfig, cfg: MqarConfig, runs: Sequence[tuple[int, float]], *,
                        slots: int | None = None, device=None) -> list[dict]:
    """Train ``runs`` (``(seed, lr)`` pairs of one layout) as replicas of one model, ``slots`` at a time (default: all);
    every run given is trained. Under :func:`~hlnas.recall.proxy.paused_at` run ``i`` keeps its state in the
    block's folder as ``mqar_replica{i}.pt`` and continues from it.

    Returns one dict per run, in the order given, with ``_one_rate``'s keys: ``seed``, ``lr``, ``val_acc`` (its last
    check), ``steps``, ``curve`` (``[step, val_acc, loss]`` per check), ``final_loss``, ``error``, ``finished``,
    ``wall_s`` (from its start to its stop, earlier parts of a continued run included), ``resumed_s`` (those parts),
    ``mode`` (``graph`` or ``eager``) and ``model`` (a solo model with its trained weights)."""
    if not runs:
        return []
    pause = pause_settings()
    chains = [[(s, lr, None if pause is None else os.path.join(pause[0], f"mqar_replica{i}.pt"))]
              for i, (s, lr) in enumerate(runs)]
    setup = recall_setup(layout, model_cfg, cfg)
    return [c[0] for c in _train([setup] * len(chains), chains, slots=slots, device=_device(device))]


def train_mqar_seeds(layout: Layout, model_cfg: ModelConfig, cfg: MqarConfig, seeds: Sequence[int], *,
                     slots: int | None = None, device=None) -> list[dict]:
    """:func:`~hlnas.recall.proxy.train_mqar` of ``layout`` for each of ``seeds``, their runs trained as replicas
    of one model (``slots`` at a time; default one per seed): each seed's rates of ``score.mqar.lrs`` in order, the
    next only where the last stopped short of the target (and, under ``paused_at(until=...)``, was not paused by the
    clock), the kept rate and its test score as ``train_mqar`` reports them. Returns one ``train_mqar`` result per
    seed, in order: each is the one that seed gets alone. Under ``paused_at`` seed ``s``'s rate ``i`` keeps its state
    in the block's folder as ``mqar_seed{s}_rate{i}.pt``."""
    return train_mqar_layouts([(layout, seeds)], model_cfg, cfg, slots=slots, device=device)[0]


def train_mqar_layouts(units: Sequence[tuple[Layout, Sequence[int]]], model_cfg: ModelConfig, cfg: MqarConfig, *,
                       slots: int | None = None, device=None, tag_layouts: bool | None = None) -> list[list[dict]]:
    """:func:`train_mqar_seeds` for several layouts of one depth at once: ``units`` are ``(layout, seeds)``, and every
    run of every layout trains as a replica of one mixed model (:mod:`hlnas.training.mixed_replicas`; a freed slot
    takes the next run of any layout). Returns, per unit, one ``train_mqar`` result per seed: each the one that layout
    and seed get alone. Under ``paused_at`` a run keeps its state as ``mqar_seed{s}_rate{i}.pt`` where there is one
    layout, else ``mqar_{layout}_seed{s}_rate{i}.pt`` (``tag_layouts``: always the one or the other, for parts of a
    larger set of runs that share the folder)."""
    units = [(lay, [int(s) for s in seeds]) for lay, seeds in units]
    for lay, seeds in units:
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"train_mqar_seeds: each seed once, got {seeds}" + ("" if len(units) == 1 else f" for {lay}"))
    if len({lay for lay, _ in units}) != len(units):
        raise ConfigError(f"train_mqar_layouts: each layout once, got {[str(lay) for lay, _ in units]}")
    device = _device(device)
    pause = pause_settings()
    rates = [float(lr) for lr in (cfg.lrs or (cfg.lr,))]
    setups, chains, spans = [], [], []
    for lay, seeds in units:
        setup = recall_setup(lay, model_cfg, cfg)  # MQAR or VT, the recall model: as the solo proxy's
        tagged = len(units) > 1 if tag_layouts is None else tag_layouts
        tag = f"{lay.key}_" if tagged else ""
        spans.append((len(chains), setup, seeds))
        for s in seeds:
            setups.append(setup)
            chains.append([(s, lr, None if pause is None else os.path.join(pause[0], f"mqar_{tag}seed{s}_rate{i}.pt"))
                           for i, lr in enumerate(rates)])
    t0 = time.perf_counter()
    trained = _train(setups, chains, slots=slots, device=device)
    # mqar_s is the time from the set's start to the run's result, the others' steps inside it: mqar_replicas (the
    # runs trained together) lets a reader share it out (experiments/paper_grid/collect.py's gpu_s)
    return [[{**sweep_result(setup, [{k: r[k] for k in _RATE_KEYS} for r in trained[at + j]], validation_instances(setup, s),
                             device=device, t0=t0), "mqar_replicas": len(chains)}
             for j, s in enumerate(seeds)] for at, setup, seeds in spans]
