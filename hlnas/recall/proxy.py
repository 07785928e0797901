"""The fresh-model MQAR recall proxy: a copy of the candidate's layer pattern trained on Zoology-form MQAR.

What it measures is how much associative recall the *architecture* can hold, so the protocol follows
Zoology (arXiv 2312.04927) rather than a fixed short budget (given about a minute each, the mixers with a short
convolution learned MQAR and the rest, deep models included, learned nothing: a fixed budget measures how soon recall
appears, not how much the architecture can hold):

* the recall model is the candidate's layout at its own width (``score.mqar.model`` overrides any
  ModelConfig field, e.g. a narrower ``d_model``), its vocabulary the MQAR symbols, and never the
  iso-parameter MLP solve (``target_params``): a shallow model given a huge MLP learned nothing;
* each learning rate of ``score.mqar.lrs`` (Zoology sweeps four log-spaced values) trains a fresh model
  for up to ``score.mqar.steps`` steps, stopping early once held-out *validation* accuracy reaches
  ``score.mqar.target``; the sweep stops at the first rate that reaches it;
* the best rate by validation accuracy is kept, and its model is scored on the test instances, the same
  instances for every candidate and seed (``score.mqar.test_seed``), beside their no-recall baselines;
* beside that final accuracy, a graded measure of how readily the layout learns recall
  (:func:`learning_auc`): the area under its validation curve, corrected for the validation instances'
  no-recall baseline, over the whole step budget. A protocol that trains to a target puts every hybrid that
  learns at the stop; the steps it took to get there still differ (deep-recall-control.md, section 2).

The task is MQAR unless ``score.mqar.task`` is ``vt``: multi-hop variable tracking (:mod:`hlnas.recall.vt`), which
one attention layer cannot carry as it carries any MQAR size; everything else (loss, accuracy, curves, baselines
beside the score, the ``mqar_*`` result keys) is the same.

Training data come from the train stream (block ``b`` of seed ``s``: train seed ``s * 2**20 + b``),
validation from train seed ``2**31 - 1 - s``, test from the test stream: never the same instances.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass, field

import torch

from hlnas.model.config import ModelConfig
from hlnas.errors import ConfigError, did_you_mean
from hlnas.model.kernels import kernel_fallbacks, kernel_paths, use_backend
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.overrides import at_least_one, config_to_dict, is_number, tuples_of, typed_fields
from hlnas.recall.baselines import corrected, mqar_baselines, strongest
from hlnas.recall.beyond import check_beyond, kv_at, score_beyond
from hlnas.recall.mqar import MqarTask, hits_accuracy, label_hits, make_mqar, mqar_accuracy, mqar_loss
from hlnas.recall.vt import VtConfig, VtTask, accuracy_by_hop, make_vt, vt_baselines
from hlnas.training.checkpoint import load_run_state, save_run_state
from hlnas.training.loop import autocast_context, autocast_dtype, cosine_lr, device_name, peak_gib, run_steps

__all__ = ["MqarConfig", "VtConfig", "RECALL_TASKS", "RecallSetup", "recall_setup", "recall_task", "make_task",
           "task_baselines", "recall_model_config",
           "check_recall_model_keys", "train_mqar", "learning_auc", "steps_to_target", "paused_at",
           "mqar_train_batches", "validation_instances", "sweep_result", "check_stop", "run_finished",
           "RECALL_MODEL_KEYS"]

#: the tasks the fresh recall model may train on (``score.mqar.task``): Zoology's MQAR, or multi-hop variable tracking
RECALL_TASKS = ("mqar", "vt")
#: ModelConfig fields score.mqar.model may set (the vocabulary is the MQAR one; no parameter-count solve)
RECALL_MODEL_KEYS = tuple(f for f in ModelConfig.__dataclass_fields__ if f not in ("vocab_size", "target_params"))
_BLOCK_STEPS = 64  # training batches generated at once
# (state_dir, steps, until): train each rate up to ``steps`` only (or until the wall clock passes ``until``),
# keeping its model and optimizer in ``state_dir`` so a later run continues it exactly (the rung scheduler,
# hlnas.search.rungs; a calibration split over machine leases); a ContextVar so concurrent runs stay apart
_PAUSE: contextvars.ContextVar = contextvars.ContextVar("hlnas_recall_pause", default=None)


@contextlib.contextmanager
def paused_at(state_dir: str, steps: int | None, until: float | None = None):
    """Within this block :func:`train_mqar` continues each rate from its state in ``state_dir`` (if any) and trains
    it up to ``steps`` (None: the full ``score.mqar.steps``), saving its state there when it pauses. With ``until``
    (a ``time.time()``), a rate also pauses at its first validation check past that moment, and the rates after it
    do not start. The learning rate schedule is the full budget's, and the batches continue where they stopped, so
    a run paused and continued gives the curve of one straight run."""
    token = _PAUSE.set((str(state_dir), steps, until))
    try:
        yield
    finally:
        _PAUSE.reset(token)


def check_recall_model_keys(overrides: dict) -> None:
    """Refuse a ``score.mqar.model`` key the recall model cannot take, naming the closest and the allowed ones."""
    for key in overrides:
        if key not in RECALL_MODEL_KEYS:
            raise ConfigError(f"score.mqar.model: key '{key}' is not allowed.{did_you_mean(key, RECALL_MODEL_KEYS)} "
                              f"Allowed: {', '.join(RECALL_MODEL_KEYS)} (the vocabulary is the MQAR symbols, and the "
                              "recall model never solves its MLP for a parameter count)")


@dataclass(frozen=True, kw_only=True)
class MqarConfig:
    """``score.mqar`` (hlnas.recall.mqar), small enough for a byte vocabulary."""

    # defaults sized for a CPU proxy (about a minute); the paper-scale setting is Zoology's (512, 64)
    seq_len: int = 64
    kv_pairs: int = 8
    vocab: int = 256
    steps: int = 150
    batch: int = 32
    lr: float = 1e-3  # 3e-3 left a 2-layer Transformer on the ln(K) plateau for 6000 steps; 1e-3 solved it (mqar_pilot_cpu.md)
    test: int = 256
    test_seed: int = 0  # test instances: the same for every candidate and seed (so are their baselines)
    # the fresh recall model and its training (hlnas.recall.proxy)
    model: dict = field(default_factory=dict)  # ModelConfig overrides for the recall model, e.g. {d_model: 128}
    lrs: tuple[float, ...] = ()  # learning rates swept, best kept by validation accuracy (() = [lr])
    target: float | None = None  # stop a rate once validation accuracy reaches this (None: train steps)
    eval_every: int = 100  # steps between validation checks
    val: int = 256  # validation instances (train stream, never the test ones)
    beta2: float = 0.98
    weight_decay: float = 0.1  # AdamW's, on weight matrices only (hlnas.training.step.make_optimizer)
    warmup_frac: float = 0.1
    graph: bool = True  # on CUDA: one captured CUDA graph per step (hlnas.training.step)
    # torch.compile the recall model's training forward (to fuse the elementwise work of a d=128 model): false, true
    # (inductor) or a torch.compile backend's name; on CUDA the compiled step is then captured.
    # Validation runs the model uncompiled (other batch shapes would recompile).
    compile: bool | str = False
    # seconds after which a rate stops (for sweeps on a lease; a protocol should stop by steps or target)
    budget_s: float | None = None
    # the task: "mqar" (Zoology's; kv_pairs pairs) or "vt" (multi-hop variable tracking, settings in vt; kv_pairs
    # unused). Settings stored before this existed read back as mqar.
    task: str = "mqar"
    vt: VtConfig = field(default_factory=VtConfig)
    # MQAR only (hlnas.recall.beyond): settings [seq_len, kv_pairs] the trained model is also scored at, beyond its
    # training setting (their mean corrected accuracy is mqar_beyond); and a key-count curriculum, the first batches
    # holding curriculum_kv pairs, doubling to kv_pairs by curriculum_frac of the steps (None: kv_pairs throughout)
    beyond: tuple[tuple[int, int], ...] = ()
    curriculum_kv: int | None = None
    # MQAR only: the fraction of the keys assigned a second value before the queries, which ask for the latest
    # (hlnas.recall.mqar: the delta rule replaces a key's value, a decaying sum keeps both)
    overwrite: float = 0.0
    curriculum_frac: float = 0.25
    # the sequence kernels the recall model trains on: "auto" (fla's where they run, hlnas.model.kernels) or "torch"
    # (hlnas's PyTorch kernels everywhere). Part of the protocol: fla's and the PyTorch kernels round differently, and
    # whether a deep recall model takes off can turn on that (a grid calibrated on one path need not reproduce on the
    # other)
    kernels: str = "auto"

    def __post_init__(self) -> None:
        tuples_of(self, "lrs")
        at_least_one(self, "score.mqar", "steps", "batch", "test", "eval_every", "val")
        for lr in (self.lr, *self.lrs):
            if not is_number(lr) or not (lr > 0 and math.isfinite(lr)):
                raise ConfigError(f"score.mqar.lr and score.mqar.lrs must be positive numbers, got {lr!r}")
        if self.target is not None and not 0 < self.target <= 1:
            raise ConfigError(f"score.mqar.target must be an accuracy in (0, 1] or null, got {self.target!r}")
        if not is_number(self.weight_decay) or not self.weight_decay >= 0:
            raise ConfigError(f"score.mqar.weight_decay must be a number >= 0, got {self.weight_decay!r}")
        if not 0 < self.beta2 < 1 or not 0 <= self.warmup_frac < 1:
            raise ConfigError(f"score.mqar.beta2 must be in (0, 1) and score.mqar.warmup_frac in [0, 1), got "
                              f"{self.beta2} and {self.warmup_frac}")
        if not isinstance(self.compile, (bool, str)) or self.compile == "":
            raise ConfigError(f"score.mqar.compile must be true, false or a torch.compile backend's name, got {self.compile!r}")
        if not isinstance(self.model, dict):
            raise ConfigError(f"score.mqar.model must be a mapping of ModelConfig fields, got {self.model!r}")
        check_recall_model_keys(self.model)
        if self.task not in RECALL_TASKS:
            raise ConfigError(f"score.mqar.task={self.task!r} is not allowed.{did_you_mean(self.task, RECALL_TASKS)} "
                              f"Allowed: {', '.join(RECALL_TASKS)}")
        if isinstance(self.vt, dict):  # MqarConfig(vt={...}) in code; files and stored studies come through from_dict
            from hlnas.overrides import config_from_dict

            object.__setattr__(self, "vt", config_from_dict(VtConfig, self.vt, "score.mqar.vt"))
        if not isinstance(self.vt, VtConfig):
            raise ConfigError(f"score.mqar.vt must be a mapping of chains, hops, query; got {self.vt!r}")
        if not is_number(self.curriculum_frac) or not 0 < self.curriculum_frac < 1:
            raise ConfigError(f"score.mqar.curriculum_frac={self.curriculum_frac!r} is not allowed; allowed: a fraction "
                              "in (0, 1) of the steps by which the curriculum reaches kv_pairs")
        if self.kernels not in ("auto", "torch"):
            raise ConfigError(f"score.mqar.kernels={self.kernels!r} is not allowed; allowed: auto (fla's kernels where "
                              "they run), torch (hlnas's PyTorch kernels everywhere)")
        if self.beyond or self.curriculum_kv is not None or self.overwrite:
            self._check_mqar_extras()
        if self.task == "vt":  # refuse a task that does not fit its length or vocabulary now, not at training
            try:
                recall_task(self)
            except ConfigError as e:
                raise ConfigError(f"score.mqar (task vt, seq_len {self.seq_len}, vocab {self.vocab}): {e}") from None

    def _check_mqar_extras(self) -> None:
        if self.task != "mqar":
            raise ConfigError(f"score.mqar.beyond, curriculum_kv and overwrite are MQAR settings; task is {self.task!r}")
        try:  # the trained task itself, now rather than at training
            recall_task(self)
        except ConfigError as e:
            raise ConfigError(f"score.mqar (seq_len {self.seq_len}, kv_pairs {self.kv_pairs}, overwrite "
                              f"{self.overwrite}): {e}") from None
        object.__setattr__(self, "beyond", check_beyond(self.beyond, self.vocab, self.seq_len, self.overwrite))
        k = self.curriculum_kv
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= self.kv_pairs):
            raise ConfigError(f"score.mqar.curriculum_kv={k!r} is not allowed; allowed: null or an integer from 1 to "
                              f"kv_pairs={self.kv_pairs} (the pairs of the first batches)")

    def to_dict(self) -> dict:
        return config_to_dict(self)


def recall_task(cfg: MqarConfig) -> MqarTask | VtTask:
    """The task ``score.mqar`` trains and scores its recall models on."""
    if cfg.task == "vt":
        return VtTask(vocab_size=cfg.vocab, seq_len=cfg.seq_len, chains=cfg.vt.chains, hops=cfg.vt.hops, query=cfg.vt.query)
    return MqarTask(vocab_size=cfg.vocab, seq_len=cfg.seq_len, num_kv_pairs=cfg.kv_pairs, overwrite=cfg.overwrite)


def make_task(task: MqarTask | VtTask, n: int, seed: int, *, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` instances of ``task`` (:func:`~hlnas.recall.mqar.make_mqar` or :func:`~hlnas.recall.vt.make_vt`)."""
    return (make_vt if isinstance(task, VtTask) else make_mqar)(task, n, seed, split=split)


def task_baselines(task: MqarTask | VtTask, inputs, labels) -> dict[str, float]:
    """The no-recall baselines of ``task``'s instances (:func:`~hlnas.recall.baselines.mqar_baselines` or
    :func:`~hlnas.recall.vt.vt_baselines`)."""
    if isinstance(task, VtTask):
        return vt_baselines(inputs, labels, task.vocab_size)
    return mqar_baselines(inputs, labels, task.vocab_size, task.token_map)


def recall_model_config(model_cfg: ModelConfig, overrides: dict, vocab: int) -> ModelConfig:
    """The recall model's config: the candidate's, with ``overrides``, the MQAR vocabulary, and the MLP width
    of fla's rule wherever the candidate's came from the ``target_params`` solve."""
    check_recall_model_keys(overrides)
    mlp = model_cfg.mlp_hidden if model_cfg.target_params is None else None
    try:  # the overrides' values made their fields' types, then the config's own checks (__post_init__)
        changes = typed_fields(ModelConfig, overrides, "model config")
        return dataclasses.replace(model_cfg, **{"mlp_hidden": mlp, "target_params": None, **changes, "vocab_size": vocab})
    except (TypeError, ConfigError) as e:
        raise ConfigError(f"score.mqar.model: {e}") from None


@dataclass(frozen=True)
class RecallSetup:
    """``score.mqar`` resolved once for one candidate: what each of its recall runs trains and is scored on (each rate
    of its sweep), so no run derives it again."""

    layout: Layout
    model: ModelConfig  # the recall model's config (recall_model_config)
    task: MqarTask | VtTask  # the task it learns and is scored on (recall_task)
    cfg: MqarConfig  # the settings: steps, rates, batch, stop rule, instance counts

    def train_batches(self, seed: int, start: int = 0, device=None):
        """A run's training batches from step ``start`` (:func:`mqar_train_batches`), with VT's curriculum if set."""
        cfg = self.cfg
        if isinstance(self.task, VtTask):
            task_at = lambda step: cfg.vt.train_task(self.task, step)  # noqa: E731
        elif cfg.curriculum_kv is not None:
            task_at = lambda step: self.task.replace(num_kv_pairs=kv_at(  # noqa: E731
                step, start=cfg.curriculum_kv, target=cfg.kv_pairs, steps=cfg.steps, frac=cfg.curriculum_frac))
        else:
            task_at = None
        return mqar_train_batches(self.task, self.cfg.batch, seed, start, device, task_at=task_at)


def recall_setup(layout: Layout, model_cfg: ModelConfig, cfg: MqarConfig) -> RecallSetup:
    """The recall runs' setup for a candidate of ``layout`` and ``model_cfg`` under ``cfg`` (``score.mqar``)."""
    return RecallSetup(layout, recall_model_config(model_cfg, dict(cfg.model), cfg.vocab), recall_task(cfg), cfg)


def learning_auc(curve, budget: int, baseline: float, reached_target: bool) -> float:
    """The area under the corrected validation curve over ``budget`` steps, as a fraction of the area of a
    perfect curve (1 from step 0): 0 for a run that never leaves its no-recall ``baseline``, near 1 for one
    that learns at once. ``curve`` holds ``[step, val_acc, ...]`` checks; the curve starts at 0 (an untrained
    model recalls nothing beyond its baseline) and is linear between checks. A run stopped at its target is
    held at its last value to the end of the budget (it would stay there); one stopped otherwise (a time budget,
    a non-finite loss) gets nothing after its last check."""
    if budget < 1:
        raise ConfigError(f"a learning curve's step budget must be >= 1, got {budget}")
    pts = [(0, 0.0)] + [(min(int(c[0]), budget), corrected(float(c[1]), baseline)) for c in curve]
    if reached_target and pts[-1][0] < budget:
        pts.append((budget, pts[-1][1]))
    area = sum((s1 - s0) * (a0 + a1) / 2 for (s0, a0), (s1, a1) in zip(pts, pts[1:]))
    return round(area / budget, 4)


def steps_to_target(curve, target: float | None) -> int | None:
    """The first check at which validation accuracy reached ``target`` (None: never, or no target)."""
    if target is None:
        return None
    return next((int(c[0]) for c in curve if c[1] >= target), None)


def mqar_train_batches(mcfg: MqarTask | VtTask, batch: int, seed: int, start: int = 0, device=None, task_at=None):
    """A run's training batches from step ``start`` on: block ``b`` of ``seed`` is train seed ``seed * 2**20 + b`` ),
    generated on the CPU a block at a time (the same instances on every device) and moved to ``device`` a block at a
    time, through pinned memory (a copy from pageable host memory synchronises the stream).
    ``task_at(step)`` (a curriculum, :meth:`hlnas.recall.vt.VtConfig.train_task`): the task of the block that starts at
    that step, instead of ``mcfg`` throughout."""
    block, skip = divmod(start, _BLOCK_STEPS)
    while True:
        task = mcfg if task_at is None else task_at(block * _BLOCK_STEPS)
        x, y = make_task(task, batch * _BLOCK_STEPS, (seed * 2**20 + block) % 2**31, split="train")
        x, y = _to_device(x, device), _to_device(y, device)
        for i in range(skip, _BLOCK_STEPS):
            yield x[i * batch : (i + 1) * batch], y[i * batch : (i + 1) * batch]
        block, skip = block + 1, 0


def _to_device(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` on ``device``; to a GPU through pinned memory, so the copy neither blocks the host nor syncs the stream."""
    if device is None or torch.device(device).type != "cuda":
        return t if device is None else t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _one_rate(setup: RecallSetup, lr: float, seed: int, device, val, state: str | None = None, stop_at: int | None = None,
              until: float | None = None) -> dict:
    from hlnas.training.step import WARMUP_STEPS, compiled, make_optimizer, make_step, set_lr

    layout, cfg = setup.layout, setup.cfg
    batches = setup.train_batches(seed, device=device)  # a generator: nothing is drawn before the model is built
    model = seeded_model(layout, setup.model, seed).to(device)
    model.train()
    use_graph = bool(cfg.graph) and device.type == "cuda"
    opt = make_optimizer(model, lr, betas=(0.9, cfg.beta2), weight_decay=cfg.weight_decay, graph=use_graph)
    autocast = autocast_dtype("auto", device)
    def lr_at(step: int) -> float:  # warmup, then cosine to 0
        return cosine_lr(step, cfg.steps, lr, cfg.warmup_frac, 0.0)

    val = tuple(_to_device(t, device) for t in val)  # once, not at every check
    first = next(batches)
    set_lr(opt, lr_at(0))
    step_fn, mode = make_step(compiled(model, cfg.compile, "score.mqar.compile"), opt, mqar_loss, first, graph=use_graph,
                              autocast=autocast)
    if mode == "graph":  # capture trained its warm-up steps on the first batch: they count as steps
        done, drawn = WARMUP_STEPS, 1
    else:
        done, drawn, batches = 0, 0, itertools.chain([first], batches)
    curve, t0, error, finished, before_s = [], time.perf_counter(), None, False, 0.0
    clock = []  # [steps done, unix time] at each of this invocation's checks: when its steps ran (benchmarks' windows)
    if state is not None and os.path.exists(state):  # continue a paused run: its weights, optimizer, batches
        saved = load_run_state(state, model, opt)
        done, drawn, curve, error, finished = saved["done"], saved["drawn"], saved["curve"], saved["error"], saved["finished"]
        before_s = saved.get("wall_s", 0.0)  # the time the earlier parts took: a run's wall_s is the whole run's
        batches = setup.train_batches(seed, start=drawn, device=device)
    limit = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    stop = {"error": error, "out_of_time": False, "reached": False}

    def after_step(done: int, loss) -> bool:  # the proxy's stop rule, read at each validation check
        if not (done % cfg.eval_every == 0 or done == cfg.steps):
            return False
        lv = float(loss)  # waits for the step: the clock below reads when its work was done
        clock.append([done, round(time.time(), 3)])
        if not math.isfinite(lv):
            stop["error"] = f"non-finite MQAR loss {lv} at step {done} (lr {lr:g})"
            return True
        with autocast_context(device, autocast):
            acc = mqar_accuracy(model, *val, batch_size=cfg.batch, device=device)
        curve.append([done, round(acc, 4), round(lv, 4)])
        if os.environ.get("HLNAS_RECALL_PROGRESS"):  # sweeps: a line per check, so a killed run still tells
            print(f"[recall] {layout} lr={lr:g} step={done} val={acc:.3f} loss={lv:.3f} t={time.perf_counter() - t0:.0f}s "
                  f"mode={mode}", file=sys.stderr, flush=True)
        why = check_stop(cfg, acc, time.perf_counter() - t0, until, done, limit)
        stop["reached"], stop["out_of_time"] = why == "target", why == "out_of_time"
        return why is not None

    start = done
    done = run_steps(step_fn, opt, batches, lr_at, start=start, stop=start if finished else limit, after_step=after_step)
    drawn += done - start  # one batch a step
    error = stop["error"]
    finished = run_finished(cfg, finished, error, done, limit, stop["out_of_time"], stop["reached"])
    wall_s = before_s + time.perf_counter() - t0
    if state is not None:
        save_run_state(state, model, opt, {"done": done, "drawn": drawn, "curve": curve, "error": error, "finished": finished,
                                        "wall_s": wall_s})
    return {"finished": finished, "lr": lr, "val_acc": curve[-1][1] if curve else 0.0, "steps": done, "curve": curve, "mode": mode,
            "final_loss": curve[-1][2] if curve else None, "wall_s": round(wall_s, 2), "resumed_s": before_s,
            "error": error, "clock": clock, "model": model}


def check_stop(cfg: MqarConfig, acc: float, elapsed_s: float, until: float | None, done: int, limit: int) -> str | None:
    """Why a recall run stops at a validation check with accuracy ``acc``: ``"target"`` (reached ``cfg.target``),
    ``"budget"`` (past ``cfg.budget_s`` seconds), ``"out_of_time"`` (the wall clock passed ``until`` before ``limit``
    steps: paused, a later call continues it from its saved state), or None. The proxy's one stop rule."""
    if cfg.target is not None and acc >= cfg.target:
        return "target"
    if cfg.budget_s is not None and elapsed_s > cfg.budget_s:
        return "budget"
    if until is not None and time.time() >= until and done < limit:
        return "out_of_time"
    return None


def run_finished(cfg: MqarConfig, finished: bool, error: str | None, done: int, limit: int, out_of_time: bool,
                 reached: bool) -> bool:
    """Whether a recall run that stopped at ``done`` steps (of ``limit`` this call) has nothing more to train whatever the
    budget: it was already, failed, trained the full steps, stopped short of the limit for a reason other than the
    clock (target, time budget), or reached the target at the very step a paused run stops at (it would otherwise train
    on when continued)."""
    return finished or error is not None or done >= cfg.steps or (done < limit and not out_of_time) or reached


def validation_instances(setup: RecallSetup, seed: int):
    """A seed's validation instances (train seed ``2**31 - 1 - seed``: never one of its training blocks)."""
    return make_task(setup.task, setup.cfg.val, (2**31 - 1 - seed) % 2**31, split="train")


def train_mqar(layout: Layout, model_cfg: ModelConfig, cfg: MqarConfig, *, seed: int = 0, device=None) -> dict:
    """Train fresh recall models of ``layout`` on MQAR over ``cfg``'s learning rates and score the best
    (``cfg``: the ``score.mqar`` section).

    Returns ``mqar_acc`` (test accuracy of the best rate), ``mqar_baselines`` (no-recall strategies on the
    same test instances), ``mqar_baseline`` (the strongest), and ``mqar`` (settings, per-rate curves)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # the protocol's kernel path, for every op of every rate and the scoring after
    with use_backend("torch") if cfg.kernels == "torch" else contextlib.nullcontext():
        return _train_rates(layout, model_cfg, cfg, seed, device)


def _train_rates(layout: Layout, model_cfg: ModelConfig, cfg: MqarConfig, seed: int, device) -> dict:
    setup = recall_setup(layout, model_cfg, cfg)
    val = validation_instances(setup, seed)
    t0 = time.perf_counter()
    runs = []
    pause = _PAUSE.get()  # (state_dir, steps, until) under paused_at: rates trained up to steps and kept, in order
    for i, lr in enumerate(cfg.lrs or (cfg.lr,)):
        kw = {} if pause is None else {"state": os.path.join(pause[0], f"mqar_rate{i}.pt"), "stop_at": pause[1],
                                       "until": pause[2]}
        runs.append(_one_rate(setup, float(lr), seed, device, val, **kw))
        if cfg.target is not None and runs[-1]["val_acc"] >= cfg.target:
            break  # later rates could only tie
        if pause is not None and pause[2] is not None and not runs[-1]["finished"]:
            break  # paused by the clock: the next rates start when this one is continued
    return sweep_result(setup, runs, val, device=device, t0=t0)


def sweep_result(setup: RecallSetup, runs: list[dict], val, *, device, t0: float) -> dict:
    """:func:`train_mqar`'s result from its rate runs (``_one_rate``'s dicts, in the order trained, each with its
    ``model``), the seed's validation instances ``val``, and the ``time.perf_counter()`` its training started at:
    the graded measures, the kept rate, its test accuracy beside the no-recall baselines. """
    cfg, task = setup.cfg, setup.task
    vocab = cfg.vocab
    xt, yt = make_task(task, cfg.test, cfg.test_seed, split="test")
    _, val_base = strongest(task_baselines(task, *val))
    pause = _PAUSE.get()
    # a paused run measures up to its budget: its graded measure is over the steps it had
    budget = cfg.steps if pause is None or pause[1] is None else min(pause[1], cfg.steps)
    for r in runs:
        r["steps_to_target"] = steps_to_target(r["curve"], cfg.target)
        r["auc"] = learning_auc(r["curve"], budget, val_base, r["steps_to_target"] is not None)
    ok = [r for r in runs if r["error"] is None] or runs
    best = max(ok, key=lambda r: (r["val_acc"], -r["steps"]))
    hits = None
    if best["error"] is None:
        with autocast_context(device, autocast_dtype("auto", device)):
            hits = label_hits(best["model"], xt, yt, batch_size=cfg.batch, device=device)
    acc = hits_accuracy(hits, yt) if hits is not None else 0.0
    base = task_baselines(task, xt, yt)
    name, b = strongest(base)
    out = {
        "mqar_acc": acc, "mqar_baselines": base, "mqar_baseline": b, "mqar_baseline_name": name,
        "mqar_lr": best["lr"], "mqar_steps_done": sum(r["steps"] for r in runs), "mqar_s": round(time.perf_counter() - t0 + sum(r["resumed_s"] for r in runs), 2),
        "mqar_final_loss": best["final_loss"], "mqar_device_name": device_name(device),
        # the graded measure: the kept rate's area under its corrected validation curve (learning_auc)
        "mqar_auc": best["auc"], "mqar_steps_to_target": best["steps_to_target"], "mqar_val_baseline": round(val_base, 4),
        "mqar": {"task": cfg.task, "seq_len": task.seq_len, "vocab": vocab, "steps": cfg.steps,
                 **({"vt": cfg.vt.to_dict()} if cfg.task == "vt" else {"kv_pairs": task.num_kv_pairs}),
                 **({"overwrite": cfg.overwrite, "overwritten": task.overwritten} if cfg.overwrite else {}),
                 "target": cfg.target, "test": cfg.test, "test_seed": cfg.test_seed,
                 "model": {k: v for k, v in best["model"].cfg.to_dict().items()
                           if k in ("d_model", "n_heads", "n_layers", "mlp_hidden", "vocab_size", "residual_init")},
                 "attention_input_conv": best["model"].cfg.mixer_hparams.get("attention", {}).get("input_conv", 0),
                 "params": best["model"].num_params(), "mode": best["mode"],
                 # the ops this process ran on the PyTorch kernels where fla was asked for, and why (empty off CUDA)
                 "kernel_fallbacks": kernel_fallbacks(),
                 "kernels": cfg.kernels,
                 "kernel_paths": kernel_paths(),  # the path each op of this process took: what the numbers ran on
                 "peak_gib": peak_gib(device),  # the process's peak GPU memory so far (None off CUDA)
                 "runs": [{k: v for k, v in r.items() if k != "model"} for r in runs]},
    }
    if cfg.beyond and best["error"] is None:  # the same trained model at settings it never trained on
        out.update(score_beyond(best["model"], task, cfg.beyond, n=cfg.test, seed=cfg.test_seed, batch=cfg.batch,
                                device=device))
        out["mqar"]["beyond"] = [list(s) for s in cfg.beyond]
    if cfg.curriculum_kv is not None:
        out["mqar"]["curriculum"] = {"kv_start": cfg.curriculum_kv, "frac": cfg.curriculum_frac}
    if isinstance(task, VtTask) and hits is not None:  # whether a layout chains: accuracy per hop count of the query
        out["mqar_by_hop"] = accuracy_by_hop(hits, xt, yt, vocab)
    if best["error"] is not None:
        out["mqar_error"] = best["error"]
    if pause is not None:  # where this run stopped, and whether a longer budget would train more
        out["mqar_budget"] = budget
        out["mqar_finished"] = all(r["finished"] for r in runs)
    return out
