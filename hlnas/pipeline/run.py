"""One pipeline from a recipe to its result, in two stages that each get only their own settings:

1. **recall** (:func:`recall_stage`): fresh recall models of the candidate's layout trained on the recall task
   (``score.mqar``, :mod:`hlnas.recall.proxy`), when the recipe scores the ``mqar`` objective. It reads the layout,
   the model config and ``score.mqar``, never the LM's training or data settings, so its result is the same for every
   candidate of one layout and seed (a calibration run's result is taken instead of training it again: ``recall=``);
2. **LM** (:func:`lm_stage`): the candidate trained on text (:mod:`hlnas.lm.trainer`, the recipe's ``train`` and
   ``data``), then measured on the recipe's other objectives (:mod:`hlnas.score.objectives`: validation loss, RULER,
   the mixed-in MQAR, lm-eval), which train nothing.

Recall runs first: a recall model paused by the clock (the rung scheduler, a time limit) pauses the trial before its
LM is trained. ``run(recipe) -> RunResult`` is what a search trial, ``hlnas train --score``, ``hlnas eval`` (through
:func:`score_checkpoint`) and the experiments call, so they train and score a candidate the same way, with the study's
recall beside its no-recall baseline (:func:`hlnas.recall.baselines.recall_metrics`). Failures in training (NaN, OOM)
come back in the result; other exceptions propagate to the caller (a trial turns them into data).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

__all__ = ["RunResult", "RecallPause", "run", "recall_stage", "lm_stage", "validation_batches", "score_checkpoint",
           "checkpoint_dir", "checkpoint_score_config"]


@dataclass
class RunResult:
    status: str  # ok | failed | infeasible | interrupted (training's) | paused (the recall stage's clock)
    metrics: dict = field(default_factory=dict)  # training summary + every score + the study's recall
    scores: dict = field(default_factory=dict)  # the scores alone
    train: object | None = None  # hlnas.lm.trainer.TrainResult (None when the LM stage did not run)
    model: object | None = None  # the trained model, in this process
    error_kind: str | None = None
    error: str | None = None

    def record(self, recipe) -> dict:
        """What ``hlnas train`` writes to metrics.json: the training summary, the recipe, and the scores of a run
        that scored."""
        d = self.train.to_dict() if self.train is not None else {"status": self.status}
        d["recipe"] = recipe.to_dict()
        if self.scores and self.status == "ok":
            d["scores"] = self.scores
        return d


@dataclass(frozen=True)
class RecallPause:
    """Where the recall stage keeps its models between calls, and when it pauses (:func:`hlnas.recall.proxy.paused_at`):
    train up to ``steps`` (None: the full budget), or until the wall clock passes ``until`` (a ``time.time()``)."""

    state_dir: str
    steps: int | None = None
    until: float | None = None


def recall_stage(layout, model_cfg, recall_cfg, *, seed: int, pause: RecallPause | None = None, device=None) -> dict:
    """Stage 1: fresh recall models of ``layout`` (with ``model_cfg``'s widths) trained under ``recall_cfg``
    (``score.mqar``) at ``seed``; the result's ``mqar_finished`` is False when ``pause`` stopped it short."""
    from hlnas.recall.proxy import paused_at, train_mqar

    if pause is None:
        hold = contextlib.nullcontext()
    else:
        os.makedirs(pause.state_dir, exist_ok=True)
        hold = paused_at(pause.state_dir, pause.steps, pause.until)
    with hold:
        return train_mqar(layout, model_cfg, recall_cfg, seed=seed, device=device)


@dataclass
class LmStage:
    """Stage 2's training, as :func:`lm_stage` leaves it for scoring: the train result, the tokenizer, and the MQAR
    instances mixed into training (None unless ``train.recall_format: mqar``)."""

    train: object
    tokenizer: object
    mixed_mqar: object | None
    data: dict = field(default_factory=dict)  # the tokenizer and corpus it trained on (data_corpus, data_tokenizer, ...)

    def metrics(self) -> dict:
        tr = self.train
        from hlnas.lm.trainer import device_name

        return {"final_loss": tr.final_loss, "tokens_per_s": tr.tokens_per_s, "steady_tokens_per_s": tr.steady_tokens_per_s,
                "train_wall_s": tr.wall_s, "train_tokens": tr.tokens, "device": tr.device,
                "device_name": device_name(tr.device), "train_step_mode": tr.step_mode, **self.data}


def lm_stage(recipe, *, out_dir: str | os.PathLike | None = None, progress: bool = False, extra_docs=None) -> LmStage:
    """Stage 2's training: ``recipe``'s layout and model trained under its ``train`` and ``data`` settings, with the
    recall protocol's documents mixed in as ``train.recall_every`` says (or ``extra_docs``: ``seed -> iterator``)."""
    from hlnas.data.token_corpus import data_record
    from hlnas.data.tokenizer import load_tokenizer
    from hlnas.lm.recall_mix import recall_mix
    from hlnas.lm.trainer import train

    tok = load_tokenizer(recipe.data.tokenizer)
    record = data_record(recipe.data.source, tok)  # which tokenizer and corpus the LM half is measured on
    mixed, docs = recall_mix(recipe.train, tok)
    docs = extra_docs if extra_docs is not None else docs
    tr = train(recipe.layout, recipe.model, recipe.train, recipe.data, out_dir=out_dir, progress=progress, tokenizer=tok,
               extra_docs=docs)
    return LmStage(tr, tok, mixed, record)


def _scores(model, recipe, stage: LmStage, val_batches, *, device=None, progress=None, recall: dict | None = None) -> dict:
    """Every objective of ``recipe.score`` measured on the trained ``model``, the recall stage's result (``recall``)
    passed through, and the study's recall summary beside its baseline."""
    from hlnas.recall.baselines import recall_metrics
    from hlnas.score.objectives import score

    scfg = recipe.score
    val = val_batches if "val_loss" in scfg.objectives else None
    out = score(model, stage.tokenizer, scfg, val_batches=val, device=device, seed=recipe.train.seed, progress=progress,
                mixed_mqar=stage.mixed_mqar, mqar=recall)
    out.update(recall_metrics(out))
    return out


def validation_batches(recipe, tokenizer) -> list:
    """The validation batches a training of ``recipe`` measures its loss on (a model scored without training first)."""
    from hlnas.data.packing import TokenStream

    tcfg = recipe.train
    return TokenStream(recipe.data, tcfg.seq_len, tokenizer=tokenizer).val_batches(tcfg.batch_size, tcfg.val_batches)


def run(recipe, *, out_dir: str | os.PathLike | None = None, progress: bool = False, score: bool = True,
        recall_only: bool = False, extra_docs=None, recall: dict | None = None,
        recall_pause: RecallPause | None = None, kv_context: int | None = None) -> RunResult:
    """Both stages for ``recipe`` (a :class:`hlnas.pipeline.recipe.RunConfig`). ``recall_only``: the recall stage
    alone (a calibration's extra seeds, a rung). ``recall``: the recall stage's result for this layout and seed,
    measured already, taken as it is. ``recall_pause``: where the recall stage keeps its models and when it pauses; a
    paused recall stage returns status ``paused`` before the LM stage. ``score=False``: train the LM, measure nothing.
    ``extra_docs``: see :func:`lm_stage`. ``kv_context``: the result's metrics also hold what the cost model says of
    the layout, its KV cache counted at that many tokens (:func:`hlnas.model.cost.layout_metrics`)."""
    result = _stages(recipe, out_dir=out_dir, progress=progress, score=score, recall_only=recall_only,
                     extra_docs=extra_docs, recall=recall, recall_pause=recall_pause)
    if kv_context is not None:
        from hlnas.model.cost import layout_metrics

        result.metrics = {**layout_metrics(str(recipe.layout), recipe.model, kv_context), **result.metrics}
    return result


def _stages(recipe, *, out_dir, progress: bool, score: bool, recall_only: bool, extra_docs, recall: dict | None,
            recall_pause: RecallPause | None) -> RunResult:
    from hlnas.recall.baselines import recall_metrics

    if recall is None and score and "mqar" in recipe.score.objectives:
        recall = recall_stage(recipe.layout, recipe.model, recipe.score.mqar, seed=recipe.train.seed, pause=recall_pause)
        if recall.get("mqar_finished") is False and not recall_only:  # the clock stopped it: the LM stage waits
            return RunResult("paused", dict(recall), dict(recall))
    if recall_only:
        m = {**(recall or {}), **recall_metrics(recall or {})}
        m.setdefault("device_name", m.get("mqar_device_name"))  # a recall-only run's card is its recall model's
        return RunResult("ok", m, m)
    stage = lm_stage(recipe, out_dir=out_dir, progress=progress, extra_docs=extra_docs)
    tr, metrics = stage.train, stage.metrics()
    model = getattr(tr, "model", None)
    if tr.status != "ok" or not score:
        return RunResult(tr.status, metrics, {}, tr, model, tr.error_kind, tr.error)
    scores = _scores(model, recipe, stage, tr.val_batches, recall=recall)
    return RunResult("ok", {**metrics, **scores}, scores, tr, model)


def score_checkpoint(ckpt_dir, score_cfg, *, progress=None) -> dict:
    """Score a checkpoint written by ``hlnas train`` on ``score_cfg`` (its recipe's training and data settings)."""
    from hlnas.data.sources import DataConfig
    from hlnas.data.tokenizer import load_tokenizer
    from hlnas.pipeline.recipe import RunConfig
    from hlnas.lm.recall_mix import mqar_recall_config
    from hlnas.lm.trainer import TrainConfig, load_checkpoint, resolve_device

    model, meta = load_checkpoint(ckpt_dir)
    tcfg, dcfg = TrainConfig.from_dict(meta["train"]), DataConfig.from_dict(meta["data"])
    device = resolve_device(tcfg.device)
    model.to(device)
    recipe = RunConfig(layout=model.layout, model=model.cfg, train=tcfg, data=dcfg, score=score_cfg)
    tok = load_tokenizer(dcfg.tokenizer)
    val = validation_batches(recipe, tok) if "val_loss" in score_cfg.objectives else None
    recall = (recall_stage(model.layout, model.cfg, score_cfg.mqar, seed=tcfg.seed, device=device)
              if "mqar" in score_cfg.objectives else None)
    stage = LmStage(None, tok, mqar_recall_config(tcfg, tok))
    return _scores(model, recipe, stage, val, device=device, progress=progress, recall=recall)


def checkpoint_dir(path: str | os.PathLike):
    """The training output folder ``hlnas eval PATH`` scores: PATH itself, or the folder of PATH when PATH is its
    checkpoint file. Anything else is an error naming PATH as given (never a neighbouring checkpoint)."""
    from pathlib import Path

    from hlnas.errors import HlnasError
    from hlnas.lm.trainer import CHECKPOINT

    p = Path(path)
    allowed = f"allowed: a training output folder (hlnas train --out) or its {CHECKPOINT}"
    if p.is_dir():
        if not (p / CHECKPOINT).is_file():
            raise HlnasError(f"'{path}' is a folder without a {CHECKPOINT}; {allowed}")
        return p
    if not p.exists():
        raise HlnasError(f"'{path}' does not exist; {allowed}")
    if p.name != CHECKPOINT:
        raise HlnasError(f"'{path}' is a file but not a {CHECKPOINT}; {allowed}")
    return p.parent


def checkpoint_score_config(ckpt_dir, sets: list[str] = (), objectives: list[str] | None = None):
    """The score section a checkpoint was trained with (its recipe.yaml; none: the defaults), with ``score.*``
    ``--set`` items and an ``objectives`` list over it (``hlnas eval``)."""
    from pathlib import Path

    from hlnas.overrides import parse_sets, yaml_load
    from hlnas.score.objectives import ScoreConfig

    recipe_file = Path(ckpt_dir) / "recipe.yaml"
    raw = (yaml_load(recipe_file.read_text()) or {}).get("score", {}) if recipe_file.exists() else {}
    raw = parse_sets(list(sets), {"score": ScoreConfig}, {"score": raw}).get("score", raw)
    if objectives:
        raw = {**raw, "objectives": list(objectives)}
    return ScoreConfig.from_dict(raw)
