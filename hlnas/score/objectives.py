"""Score a trained candidate on the objectives a study asks for.

Objectives (``ScoreConfig.objectives``), each with its settings in its own section of the config
(``score.<objective>``, one dataclass each; :data:`OBJECTIVE_REGISTRY` names it):

* ``val_loss``: mean token cross-entropy on the held-out documents (and perplexity);
* ``ruler``: hlnas's RULER generator, greedy decoding, the paper's weighted 13-task average
  (``recall`` in the result), tasks and context lengths configurable;
* ``mqar``: Zoology's multi-query associative recall, learned by fresh copies of the candidate's layout
  (Zoology's protocol: the recall capacity of the architecture). Those are trained by the pipeline's recall stage
  (:func:`hlnas.pipeline.run.recall_stage`), not here: this module measures a trained candidate and trains nothing,
  and passes that stage's result through;
* ``mqar_mixed``: the recall protocol with ``train.recall_format: mqar``: MQAR instances were mixed
  into the candidate's training; the trained candidate itself is scored on held-out instances at the
  training length and longer (``score.mqar_mixed.scales``), same number of pairs, so longer means recall
  over longer gaps;
* ``lm_eval``: named lm-eval tasks (the paper's six by default) through :class:`~hlnas.score.lm.HlnasLM`.

Every objective reports into one flat-ish dict so a study can pick any entry as its target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from hlnas.errors import ConfigError, did_you_mean
from hlnas.model.build import HybridLM
from hlnas.overrides import at_least_one as _at_least_one, config_from_dict, config_to_dict, field_types, tuples_of as _tuples
from hlnas.score.mqar_mixed import MqarMixedConfig, mqar_mixed_objective
from hlnas.recall.proxy import MqarConfig

__all__ = ["ScoreConfig", "MqarConfig", "MqarMixedConfig", "RulerConfig", "LmEvalConfig", "ScoreContext",
           "ScoreObjective", "OBJECTIVES", "OBJECTIVE_REGISTRY", "SECTIONS", "LEGACY_KEYS", "score"]


@dataclass(frozen=True, kw_only=True)
class RulerConfig:
    """``score.ruler`` (hlnas.score.ruler): lengths in tokens of the candidate's tokenizer."""

    tasks: tuple[str, ...] = ()  # () = all 13 (QA only where qa_files are given)
    lengths: tuple[int, ...] = (1024,)
    samples: int = 20
    seed: int = 0
    qa_files: dict[str, str] = field(default_factory=dict)
    cache_dir: str | None = None  # generated RULER samples

    def __post_init__(self) -> None:
        _tuples(self, "tasks", "lengths")
        if self.tasks:
            from hlnas.recall.ruler import RULER_TASKS

            for t in self.tasks:
                if t not in RULER_TASKS:
                    raise ConfigError(f"unknown RULER task '{t}'.{did_you_mean(t, RULER_TASKS)} Allowed: {', '.join(RULER_TASKS)}")
        _at_least_one(self, "score.ruler", "samples")
        if any(L < 1 for L in self.lengths) or not self.lengths:
            raise ConfigError(f"score.ruler.lengths must be positive token counts, got {list(self.lengths)}")

    def to_dict(self) -> dict:
        return config_to_dict(self)


@dataclass(frozen=True, kw_only=True)
class LmEvalConfig:
    """``score.lm_eval`` (hlnas.score.lm)."""

    tasks: tuple[str, ...] = ("arc_challenge", "arc_easy", "hellaswag", "lambada_openai", "openbookqa", "piqa")
    limit: int | None = None
    include: str | None = None
    max_length: int = 1024

    def __post_init__(self) -> None:
        _tuples(self, "tasks")
        _at_least_one(self, "score.lm_eval", "max_length")

    def to_dict(self) -> dict:
        return config_to_dict(self)


@dataclass(frozen=True)
class ScoreContext:
    """What an objective may read besides the model and its settings."""

    tokenizer: object
    device: object
    autocast: torch.dtype | None
    seed: int
    val_batches: list | None
    mixed_mqar: object | None  # the MqarTask of the instances mixed into training
    mqar: dict | None = None  # the recall stage's result (hlnas.pipeline.run.recall_stage)


def _val_loss(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    from hlnas.score.loss import validation_loss

    if not ctx.val_batches:
        raise ConfigError("objective 'val_loss' needs validation batches (the data's held-out documents)")
    r = validation_loss(model, ctx.val_batches, device=ctx.device, autocast_dtype=ctx.autocast)
    return {"val_loss": r["loss"], "val_ppl": r["ppl"], "val_tokens": r["tokens"]}


def _ruler(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    from hlnas.recall.ruler import RULER_TASKS
    from hlnas.score.ruler import evaluate_ruler

    rc = cfg.ruler
    r = evaluate_ruler(model, ctx.tokenizer, rc.tasks or RULER_TASKS, rc.lengths, rc.samples, rc.seed, rc.cache_dir,
                       rc.qa_files, batch_size=cfg.batch_size, device=ctx.device)
    return {"ruler": r, "ruler_avg": r["average"], "ruler_baselines": {"copy_shape": r["baseline"]},
            "ruler_baseline": r["baseline"], "ruler_baseline_name": "copy_shape"}


def _mqar(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    if ctx.mqar is None:
        raise ConfigError("objective 'mqar' is the recall stage's fresh recall models (hlnas.pipeline.run.recall_stage), "
                          "and none was given to score(); run the candidate through hlnas.pipeline.run.run")
    return dict(ctx.mqar)


def _mqar_mixed(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    if ctx.mixed_mqar is None:
        raise ConfigError("objective 'mqar_mixed' scores what training mixed in: train with train.recall_format: mqar "
                          "and train.recall_every >= 1, or drop mqar_mixed from score.objectives")
    return mqar_mixed_objective(model, ctx.mixed_mqar, cfg, ctx.tokenizer.eos_id, seed=ctx.seed, device=ctx.device)


def _lm_eval(model, cfg: ScoreConfig, ctx: ScoreContext) -> dict:
    from hlnas.score.lm import run_lm_eval

    lc = cfg.lm_eval
    r = run_lm_eval(model, ctx.tokenizer, list(lc.tasks), lc.max_length, limit=lc.limit, include_path=lc.include,
                    batch_size=cfg.batch_size, device=ctx.device)
    out = {"lm_eval": r}
    accs = [m.get("acc_norm", m.get("acc")) for m in r.values() if isinstance(m, dict) and ("acc" in m or "acc_norm" in m)]
    if accs:
        out["lm_acc"] = sum(accs) / len(accs)
    return out


@dataclass(frozen=True)
class ScoreObjective:
    """One objective: ``run(model, ScoreConfig, ScoreContext) -> dict`` of what it measured, and the config class
    of its own ``score.<name>`` section (None: it has no settings)."""

    run: Callable[[HybridLM, "ScoreConfig", ScoreContext], dict]
    section: type | None = None


#: objective name -> its ScoreObjective; adding an objective is one entry here (plus its section's config class and
#: the ScoreConfig field holding it, checked below)
OBJECTIVE_REGISTRY = {
    "val_loss": ScoreObjective(_val_loss),
    "ruler": ScoreObjective(_ruler, RulerConfig),
    "mqar": ScoreObjective(_mqar, MqarConfig),
    "mqar_mixed": ScoreObjective(_mqar_mixed, MqarMixedConfig),
    "lm_eval": ScoreObjective(_lm_eval, LmEvalConfig),
}
OBJECTIVES = tuple(OBJECTIVE_REGISTRY)
#: section name -> its config class; ScoreConfig has a field of that class per section, named as the objective
SECTIONS = {name: o.section for name, o in OBJECTIVE_REGISTRY.items() if o.section is not None}

#: the flat keys of the score section before it had a section per objective (stored studies, trial specs and
#: space files written before then have them): old key -> new dotted key. History: new settings get no old key.
LEGACY_KEYS = {
    **{f"mqar_{k}": f"mqar.{k}" for k in ("seq_len", "kv_pairs", "vocab", "steps", "batch", "lr", "test", "test_seed",
                                          "model", "lrs", "target", "eval_every", "val", "beta2", "weight_decay", "warmup_frac",
                                          "graph", "budget_s")},
    "mqar_mixed_scales": "mqar_mixed.scales",
    **{f"ruler_{k}": f"ruler.{k}" for k in ("tasks", "lengths", "samples", "seed")},
    "qa_files": "ruler.qa_files", "cache_dir": "ruler.cache_dir",
    **{f"lm_eval_{k}": f"lm_eval.{k}" for k in ("tasks", "limit", "include", "max_length")},
}


@dataclass(frozen=True, kw_only=True)
class ScoreConfig:
    """The ``score`` section: which objectives run, and a section of settings per objective that has any
    (``score: {objectives: [val_loss, mqar], mqar: {seq_len: 32, kv_pairs: 4}}``). Old flat keys
    (``mqar_seq_len``) are read as their new ones (:data:`LEGACY_KEYS`); ``to_dict`` writes the nested form."""

    objectives: tuple[str, ...] = ("val_loss", "mqar")
    batch_size: int = 8  # sequences per forward pass of ruler's generation and of lm_eval (mqar's: mqar.batch)
    ruler: RulerConfig = field(default_factory=RulerConfig)
    mqar: MqarConfig = field(default_factory=MqarConfig)
    mqar_mixed: MqarMixedConfig = field(default_factory=MqarMixedConfig)
    lm_eval: LmEvalConfig = field(default_factory=LmEvalConfig)

    LEGACY_KEYS: ClassVar[dict[str, str]] = LEGACY_KEYS  # read by hlnas.overrides (from_dict and --set)

    def __post_init__(self) -> None:
        _tuples(self, "objectives")
        for obj in self.objectives:
            if obj not in OBJECTIVES:
                raise ConfigError(f"unknown objective '{obj}'.{did_you_mean(obj, OBJECTIVES)} Allowed: {', '.join(OBJECTIVES)}")
        _at_least_one(self, "score", "batch_size")
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"score.{name} must be a {cls.__name__}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ScoreConfig":
        return config_from_dict(cls, data, "score")


# the registry's sections are ScoreConfig's fields, and every old key lands on a setting that exists
assert {n: t for n, t in field_types(ScoreConfig).items() if n not in ("objectives", "batch_size")} == SECTIONS
assert all(new.split(".")[1] in field_types(SECTIONS[new.split(".")[0]]) for new in LEGACY_KEYS.values())


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
    mqar: dict | None = None,
) -> dict:
    """Run the configured objectives on a trained ``model``. ``progress(name)`` is told each objective.
    ``mixed_mqar``: the MqarTask of the instances mixed into training (``mqar_mixed`` needs it). ``mqar``: the
    recall stage's result (the ``mqar`` objective's: its fresh recall models do not depend on ``model``)."""
    device = device or next(model.parameters()).device
    ctx = ScoreContext(tokenizer, device, torch.bfloat16 if torch.device(device).type == "cuda" else None, seed,
                       val_batches, mixed_mqar, mqar)
    out: dict = {}
    for obj in cfg.objectives:
        if progress:
            progress(obj)
        t0 = time.perf_counter()
        out.update(OBJECTIVE_REGISTRY[obj].run(model, cfg, ctx))
        out.setdefault("timings_s", {})[obj] = round(time.perf_counter() - t0, 2)
    return out
