"""Score a trained candidate on the objectives a study asks for.

Objectives (``ScoreConfig.objectives``):

* ``val_loss``: mean token cross-entropy on the held-out documents (and perplexity);
* ``ruler``: hlnas's RULER generator, greedy decoding, the paper's weighted 13-task average
  (``recall`` in the result), tasks and context lengths configurable;
* ``mqar``: Zoology's multi-query associative recall, learned by a fresh copy of the candidate's
  architecture for ``mqar_steps`` steps (Zoology's protocol: recall capacity of the architecture);
* ``mqar_mixed``: the recall protocol with ``train.recall_format: mqar``: MQAR instances were mixed
  into the candidate's training; the trained candidate itself is scored on held-out instances at the
  training length and longer (``mqar_mixed_scales``), same number of pairs, so longer means recall
  over longer gaps;
* ``lm_eval``: named lm-eval tasks (the paper's six by default) through :class:`~hlnas.score.lm.HlnasLM`.

Every objective reports into one flat-ish dict so a study can pick any entry as its target.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import torch

from hlnas.config import ModelConfig
from hlnas.errors import ConfigError, did_you_mean
from hlnas.layout import Layout
from hlnas.model import HybridLM

__all__ = ["ScoreConfig", "ScoreContext", "OBJECTIVES", "OBJECTIVE_FUNCS", "score", "mqar_objective", "mqar_mixed_objective", "mixed_test_instances", "mixed_baselines"]

OBJECTIVES = ("val_loss", "ruler", "mqar", "mqar_mixed", "lm_eval")


@dataclass(frozen=True, kw_only=True)
class ScoreConfig:
    objectives: tuple[str, ...] = ("val_loss", "mqar")
    # RULER (hlnas.score.ruler): lengths in tokens of the candidate's tokenizer
    ruler_tasks: tuple[str, ...] = ()  # () = all 13 (QA only where qa_files are given)
    ruler_lengths: tuple[int, ...] = (1024,)
    ruler_samples: int = 20
    ruler_seed: int = 0
    qa_files: dict[str, str] = field(default_factory=dict)
    cache_dir: str | None = None  # generated RULER samples
    # MQAR (hlnas.score.mqar), small enough for a byte vocabulary
    # defaults sized for a CPU proxy (about a minute); the paper-scale setting is Zoology's (512, 64)
    mqar_seq_len: int = 64
    mqar_kv_pairs: int = 8
    mqar_vocab: int = 256
    mqar_steps: int = 150
    mqar_batch: int = 32
    mqar_lr: float = 1e-3  # 3e-3 left a 2-layer Transformer on the ln(K) plateau for 6000 steps; 1e-3 solved it (mqar_pilot_cpu.md)
    mqar_test: int = 256
    mqar_test_seed: int = 0  # test instances: the same for every candidate and seed (so are their baselines)
    # the fresh recall model and its training (hlnas.score.recall_proxy)
    mqar_model: dict = field(default_factory=dict)  # ModelConfig overrides for the recall model, e.g. {d_model: 128}
    mqar_lrs: tuple[float, ...] = ()  # learning rates swept, best kept by validation accuracy (() = [mqar_lr])
    mqar_target: float | None = None  # stop a rate once validation accuracy reaches this (None: train mqar_steps)
    mqar_eval_every: int = 100  # steps between validation checks
    mqar_val: int = 256  # validation instances (train stream, never the test ones)
    mqar_beta2: float = 0.98
    mqar_warmup_frac: float = 0.1
    mqar_graph: bool = True  # on CUDA: one captured CUDA graph per step (hlnas.graphs)
    # seconds after which a rate stops (for sweeps on a lease; a protocol should stop by steps or target)
    mqar_budget_s: float | None = None
    mqar_mixed_scales: tuple[int, ...] = (1, 2)  # mqar_mixed: test lengths as multiples of the training length
    # lm-eval (hlnas.score.lm)
    lm_eval_tasks: tuple[str, ...] = ("arc_challenge", "arc_easy", "hellaswag", "lambada_openai", "openbookqa", "piqa")
    lm_eval_limit: int | None = None
    lm_eval_include: str | None = None
    lm_eval_max_length: int = 1024
    batch_size: int = 8

    def __post_init__(self) -> None:
        for name in ("objectives", "ruler_tasks", "ruler_lengths", "lm_eval_tasks", "mqar_mixed_scales", "mqar_lrs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for obj in self.objectives:
            if obj not in OBJECTIVES:
                raise ConfigError(f"unknown objective '{obj}'.{did_you_mean(obj, OBJECTIVES)} Allowed: {', '.join(OBJECTIVES)}")
        if self.ruler_tasks:
            from hlnas.score.ruler import RULER_TASKS

            for t in self.ruler_tasks:
                if t not in RULER_TASKS:
                    raise ConfigError(f"unknown RULER task '{t}'.{did_you_mean(t, RULER_TASKS)} Allowed: {', '.join(RULER_TASKS)}")
        for name in ("ruler_samples", "mqar_steps", "mqar_batch", "mqar_test", "batch_size", "lm_eval_max_length",
                     "mqar_eval_every", "mqar_val"):
            if getattr(self, name) < 1:
                raise ConfigError(f"score.{name} must be >= 1, got {getattr(self, name)}")
        for lr in (self.mqar_lr, *self.mqar_lrs):
            if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (lr > 0 and math.isfinite(lr)):
                raise ConfigError(f"score.mqar_lr and score.mqar_lrs must be positive numbers, got {lr!r}")
        if self.mqar_target is not None and not 0 < self.mqar_target <= 1:
            raise ConfigError(f"score.mqar_target must be an accuracy in (0, 1] or null, got {self.mqar_target!r}")
        if not 0 < self.mqar_beta2 < 1 or not 0 <= self.mqar_warmup_frac < 1:
            raise ConfigError(f"score.mqar_beta2 must be in (0, 1) and score.mqar_warmup_frac in [0, 1), got "
                              f"{self.mqar_beta2} and {self.mqar_warmup_frac}")
        if not isinstance(self.mqar_model, dict):
            raise ConfigError(f"score.mqar_model must be a mapping of ModelConfig fields, got {self.mqar_model!r}")
        from hlnas.score.recall_proxy import check_recall_model_keys

        check_recall_model_keys(self.mqar_model)
        if not self.mqar_mixed_scales or any(int(m) != m or m < 1 for m in self.mqar_mixed_scales):
            raise ConfigError(f"score.mqar_mixed_scales must be whole multiples >= 1 of the training length, got {list(self.mqar_mixed_scales)}")
        if any(L < 1 for L in self.ruler_lengths) or not self.ruler_lengths:
            raise ConfigError(f"score.ruler_lengths must be positive token counts, got {list(self.ruler_lengths)}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "ScoreConfig":
        from hlnas.overrides import config_from_dict

        return config_from_dict(cls, data, "score")


def mqar_objective(layout: Layout, model_cfg: ModelConfig, cfg: ScoreConfig, *, seed: int = 0, device=None) -> dict:
    """Train fresh recall models of ``layout`` on MQAR and return their test accuracy beside its no-recall
    baselines (:func:`hlnas.score.recall_proxy.train_mqar`: Zoology's protocol)."""
    from hlnas.score.recall_proxy import train_mqar

    return train_mqar(layout, model_cfg, cfg, seed=seed, device=device)


def mixed_test_instances(trained_on, cfg: ScoreConfig, eos_id: int):
    """``(MQARConfig, inputs, labels)`` per test length of the ``mqar_mixed`` objective: held-out instances of
    the trained format at each of ``cfg.mqar_mixed_scales`` x the training length, in document form, each right
    after a document separator as in training; ``cfg.mqar_test_seed``'s, whatever the training seed."""
    from hlnas.score.mqar import IGNORE, as_documents, make_mqar

    for m in cfg.mqar_mixed_scales:
        mc = trained_on.replace(seq_len=trained_on.seq_len * int(m))
        x, y = make_mqar(mc, cfg.mqar_test, cfg.mqar_test_seed, split="test")
        sep = torch.full((x.shape[0], 1), eos_id, dtype=torch.long)
        yield mc, torch.cat([sep, as_documents(x, y)], 1), torch.cat([torch.full_like(sep, IGNORE), y], 1)


def _mean_over_lengths(by_length: dict[str, dict[str, float]]) -> dict:
    """Per-length baselines and their mean over the lengths, averaged as the accuracy is."""
    mean = {k: sum(b[k] for b in by_length.values()) / len(by_length) for k in next(iter(by_length.values()))}
    return {"mean": mean, "by_length": by_length}


def mixed_baselines(trained_on, cfg: ScoreConfig, eos_id: int) -> dict:
    """The no-recall baselines of the ``mqar_mixed`` test instances: per length, and averaged over lengths as
    the accuracy is (document form: eliminating revealed values is one)."""
    from hlnas.score.baselines import mqar_baselines

    return _mean_over_lengths({str(mc.seq_len): mqar_baselines(x, y, mc.vocab_size, mc.token_map, document_form=True)
                               for mc, x, y in mixed_test_instances(trained_on, cfg, eos_id)})


def mqar_mixed_objective(model: HybridLM, trained_on, cfg: ScoreConfig, eos_id: int, *, seed: int = 0, device=None) -> dict:
    """Score a candidate trained with MQAR instances mixed in (``trained_on``: their MQARConfig) on
    :func:`mixed_test_instances`, beside the no-recall baselines of the same instances."""
    from hlnas.score.baselines import mqar_baselines, strongest
    from hlnas.score.mqar import mqar_accuracy

    by_length, base_by_length = {}, {}
    for mc, x, y in mixed_test_instances(trained_on, cfg, eos_id):  # one pass: each length's instances made once
        by_length[str(mc.seq_len)] = mqar_accuracy(model, x, y, batch_size=cfg.mqar_batch, device=device)
        base_by_length[str(mc.seq_len)] = mqar_baselines(x, y, mc.vocab_size, mc.token_map, document_form=True)
    base = _mean_over_lengths(base_by_length)
    name, b = strongest(base["mean"])
    return {"mqar_mixed_acc": sum(by_length.values()) / len(by_length), "mqar_mixed_baselines": base["mean"],
            "mqar_mixed_baseline": b, "mqar_mixed_baseline_name": name,
            "mqar_mixed": {"by_length": by_length, "baselines_by_length": base["by_length"],
                           "kv_pairs": trained_on.num_kv_pairs, "vocab": trained_on.vocab_size}}


@dataclass(frozen=True)
class ScoreContext:
    """What an objective may read besides the model and its settings."""

    tokenizer: object
    device: object
    autocast: torch.dtype | None
    seed: int
    val_batches: list | None
    mixed_mqar: object | None  # the MQARConfig of the instances mixed into training


def _val_loss(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    from hlnas.score.loss import validation_loss

    if not ctx.val_batches:
        raise ConfigError("objective 'val_loss' needs validation batches (the data's held-out documents)")
    r = validation_loss(model, ctx.val_batches, device=ctx.device, autocast_dtype=ctx.autocast)
    return {"val_loss": r["loss"], "val_ppl": r["ppl"], "val_tokens": r["tokens"]}


def _ruler(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    from hlnas.score.ruler import RULER_TASKS, evaluate_ruler

    r = evaluate_ruler(model, ctx.tokenizer, cfg.ruler_tasks or RULER_TASKS, cfg.ruler_lengths, cfg.ruler_samples,
                       cfg.ruler_seed, cfg.cache_dir, cfg.qa_files, batch_size=cfg.batch_size, device=ctx.device)
    return {"ruler": r, "ruler_avg": r["average"], "ruler_baselines": {"copy_shape": r["baseline"]},
            "ruler_baseline": r["baseline"], "ruler_baseline_name": "copy_shape"}


def _mqar(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    return mqar_objective(model.layout, model.cfg, cfg, seed=ctx.seed, device=ctx.device)


def _mqar_mixed(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    if ctx.mixed_mqar is None:
        raise ConfigError("objective 'mqar_mixed' scores what training mixed in: train with train.recall_format: mqar "
                          "and train.recall_every >= 1, or drop mqar_mixed from score.objectives")
    return mqar_mixed_objective(model, ctx.mixed_mqar, cfg, ctx.tokenizer.eos_id, seed=ctx.seed, device=ctx.device)


def _lm_eval(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    from hlnas.score.lm import run_lm_eval

    r = run_lm_eval(model, ctx.tokenizer, list(cfg.lm_eval_tasks), cfg.lm_eval_max_length, limit=cfg.lm_eval_limit,
                    include_path=cfg.lm_eval_include, batch_size=cfg.batch_size, device=ctx.device)
    out = {"lm_eval": r}
    accs = [m.get("acc_norm", m.get("acc")) for m in r.values() if isinstance(m, dict) and ("acc" in m or "acc_norm" in m)]
    if accs:
        out["lm_acc"] = sum(accs) / len(accs)
    return out


#: objective name -> ``fn(model, ScoreConfig, ScoreContext) -> dict`` of what it measured; one entry per objective
OBJECTIVE_FUNCS = {"val_loss": _val_loss, "ruler": _ruler, "mqar": _mqar, "mqar_mixed": _mqar_mixed, "lm_eval": _lm_eval}
assert tuple(OBJECTIVE_FUNCS) == OBJECTIVES  # the names ScoreConfig accepts are the ones that run


def score(
    model: HybridLM,
    tokenizer,
    cfg: ScoreConfig,
    *,
    val_batches: list[torch.Tensor] | None = None,
    device=None,
    seed: int = 0,
    progress=None,
    mixed_mqar=None,
) -> dict:
    """Run the configured objectives on a trained ``model``. ``progress(name)`` is told each objective.
    ``mixed_mqar``: the MQARConfig of the instances mixed into training (``mqar_mixed`` needs it)."""
    device = device or next(model.parameters()).device
    ctx = ScoreContext(tokenizer, device, torch.bfloat16 if torch.device(device).type == "cuda" else None, seed,
                       val_batches, mixed_mqar)
    out: dict = {}
    for obj in cfg.objectives:
        if progress:
            progress(obj)
        t0 = time.perf_counter()
        out.update(OBJECTIVE_FUNCS[obj](model, cfg, ctx))
        out.setdefault("timings_s", {})[obj] = round(time.perf_counter() - t0, 2)
    return out
