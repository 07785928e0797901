"""One pipeline from a recipe to its result: train, then score.

``run(recipe) -> RunResult`` is what a search trial, ``hlnas train --score``, ``hlnas eval`` (through
:func:`score_checkpoint`) and the experiments call, so they train and score a candidate the same way:
the recall protocol's documents mixed in as the recipe says, validation batches from the recipe's data,
every objective of the recipe's score section, and the study's recall with its no-recall baseline
(:func:`hlnas.search.trial.recall_metrics`). Failures in training (NaN, OOM) come back in the result; other
exceptions propagate to the caller (a trial turns them into data).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["RunResult", "run", "score_model", "validation_batches", "score_checkpoint", "checkpoint_dir", "checkpoint_score_config"]


@dataclass
class RunResult:
    status: str  # ok | failed | infeasible | interrupted (training's), or ok for a recall-only run
    metrics: dict = field(default_factory=dict)  # training summary + every score + the study's recall
    scores: dict = field(default_factory=dict)  # the scores alone (score_model)
    train: object | None = None  # hlnas.lm.trainer.TrainResult (None for recall-only runs)
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


def score_model(model, recipe, tokenizer, mixed_mqar, val_batches, *, device=None, progress=None,
                recall: dict | None = None) -> dict:
    """Every objective of ``recipe.score`` on a trained ``model``, plus the study's recall summary. ``tokenizer``: the
    recipe's data tokenizer; ``mixed_mqar``: the MQAR instances mixed into its training
    (:func:`hlnas.lm.recall_mix.mqar_recall_config`); ``val_batches``: the recipe's validation batches (its training's,
    or :func:`validation_batches`); ``recall``: the fresh-model MQAR result already trained (see :func:`run`)."""
    from hlnas.score.objectives import score
    from hlnas.recall.baselines import recall_metrics

    scfg = recipe.score
    val = val_batches if "val_loss" in scfg.objectives else None
    out = score(model, tokenizer, scfg, val_batches=val, device=device, seed=recipe.train.seed, progress=progress,
                mixed_mqar=mixed_mqar, mqar=recall)
    out.update(recall_metrics(out))
    return out


def validation_batches(recipe, tokenizer) -> list:
    """The validation batches a training of ``recipe`` measures its loss on (a model scored without training first)."""
    from hlnas.data.packing import TokenStream

    tcfg = recipe.train
    return TokenStream(recipe.data, tcfg.seq_len, tokenizer=tokenizer).val_batches(tcfg.batch_size, tcfg.val_batches)


def run(recipe, *, out_dir: str | os.PathLike | None = None, progress: bool = False, score: bool = True,
        recall_only: bool = False, extra_docs=None, recall: dict | None = None) -> RunResult:
    """Train ``recipe`` (a :class:`hlnas.pipeline.recipe.RunConfig`) and score it. ``recall_only``: only the fresh-model
    MQAR objective, which does not depend on the trained candidate (calibration's extra seeds). ``extra_docs``:
    the documents mixed into training (``seed -> iterator``), when not the recipe's recall protocol. ``recall``: that
    objective's result for this recipe's layout and seed, already trained (a calibration's seeds trained as replicas,
    hlnas.recall.replicas.train_mqar_seeds), taken as it is instead of training it again. The tokenizer and
    the MQAR instances mixed into training are resolved once here, for training and scoring alike."""
    from hlnas.data.token_corpus import data_record
    from hlnas.data.tokenizer import load_tokenizer
    from hlnas.lm.recall_mix import mqar_recall_config, recall_documents
    from hlnas.lm.trainer import device_name, train

    if recall_only:
        from hlnas.score.objectives import mqar_objective
        from hlnas.recall.baselines import recall_metrics

        m = dict(recall) if recall is not None else mqar_objective(recipe.layout, recipe.model, recipe.score,
                                                                     seed=recipe.train.seed)
        m.update(recall_metrics(m))
        m.setdefault("device_name", m.get("mqar_device_name"))  # a recall-only run's card is its recall model's
        return RunResult("ok", m, m)
    tok = load_tokenizer(recipe.data.tokenizer)
    mixed = mqar_recall_config(recipe.train, tok)
    docs = extra_docs if extra_docs is not None else recall_documents(recipe.train, tok, mixed)
    tr = train(recipe.layout, recipe.model, recipe.train, recipe.data, out_dir=out_dir, progress=progress, tokenizer=tok,
               extra_docs=docs)
    metrics = {"final_loss": tr.final_loss, "tokens_per_s": tr.tokens_per_s, "steady_tokens_per_s": tr.steady_tokens_per_s,
               "train_wall_s": tr.wall_s, "train_tokens": tr.tokens, "device": tr.device, "device_name": device_name(tr.device),
               "train_step_mode": tr.step_mode}
    metrics.update(data_record(recipe.data.source, tok))  # which tokenizer and corpus the LM half was measured on
    model = getattr(tr, "model", None)
    if tr.status != "ok" or not score:
        return RunResult(tr.status, metrics, {}, tr, model, tr.error_kind, tr.error)
    scores = score_model(model, recipe, tok, mixed, tr.val_batches, recall=recall)
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
    return score_model(model, recipe, tok, mqar_recall_config(tcfg, tok), val, device=device, progress=progress)


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
