"""The proxy recall protocol, demonstrated: does it separate a pure linear model from its 3:1 hybrid
and from the Transformer?

Small models cannot do zero-shot RULER, so hlnas mixes recall-format documents into the candidate's
language-model training (``train.recall_every`` / ``recall_count``; instances drawn from seeds disjoint
from evaluation) and scores the trained candidate itself at the training length and at twice it:

* ``--format mqar`` (``train.recall_format: mqar``, objective ``mqar_mixed``): Zoology's MQAR instances
  as token sequences, each query key followed by its value; scored on held-out instances with the same
  number of pairs at 1x and 2x the instance length (recall across longer gaps);
* ``--format ruler``: complete RULER instances as text (``hlnas.recall.ruler.ruler_training_documents``);
  scored on RULER at the training length and twice it, plus MQAR learned from scratch.

The three candidates of one mixer get identical budgets; the script writes a markdown table (and JSON).

    python experiments/recall_protocol.py --format mqar --mixer gla --layers 4 --tokens 6000000
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import platform
import sys
import time

import torch

from hlnas.model.config import preset
from hlnas.data.sources import DataConfig
from hlnas.data.tokenizer import load_tokenizer
from hlnas.model.layout import build_layout
from hlnas.pipeline.recipe import RunConfig
from hlnas.pipeline.run import run
from hlnas.score.objectives import MqarConfig, MqarMixedConfig, RulerConfig, ScoreConfig
from hlnas.recall.ruler import ruler_training_documents
from hlnas.lm.trainer import TrainConfig

TASKS = ("niah_single_1", "niah_single_2", "niah_multikey_1", "niah_multikey_2", "niah_multivalue", "niah_multiquery", "vt")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=("mqar", "ruler"), default="mqar", help="recall documents mixed into training")
    ap.add_argument("--mixer", default="gla")
    ap.add_argument("--preset", default="proxy-tiny")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None, help="override the preset's attention/mixer heads")
    ap.add_argument("--tokens", type=int, default=6_000_000)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta2", type=float, default=TrainConfig.beta2, help="AdamW beta2 (default: the trainer's)")
    ap.add_argument("--warmup", type=float, default=TrainConfig.warmup_frac, help="warmup fraction of the steps (default: the trainer's)")
    ap.add_argument("--min-lr-ratio", type=float, default=TrainConfig.min_lr_ratio, help="cosine decays to lr x this (default: the trainer's)")
    ap.add_argument("--recall-every", type=int, default=1, help="insert recall documents after every N corpus documents")
    ap.add_argument("--recall-count", type=int, default=30, help="recall documents per insertion")
    ap.add_argument("--recall-length", type=int, default=64, help="mqar: tokens per instance")
    ap.add_argument("--kv-pairs", type=int, default=8, help="mqar: key-value pairs per instance")
    ap.add_argument("--recall-vocab", type=int, default=64, help="mqar: symbols")
    ap.add_argument("--samples", type=int, default=20, help="ruler: samples per task and length")
    ap.add_argument("--test", type=int, default=512, help="mqar: held-out instances per length")
    ap.add_argument("--mqar-steps", type=int, default=150, help="ruler: steps of the fresh-model MQAR objective")
    ap.add_argument("--seed", type=int, default=0, help="training seed (data order, initialisation) and test-instance seed")
    ap.add_argument("--candidates", default="pure,3:1,transformer", help="comma-separated ratios of --mixer, or transformer")
    ap.add_argument("--jobs", type=int, default=1, help="candidates trained at once, one process and one torch thread each")
    ap.add_argument("--out", default=None, help="markdown output (JSON beside it)")
    args = ap.parse_args()
    n = args.layers or preset(args.preset).n_layers
    cands = args.candidates.split(",")
    for c in cands:  # fail before any training on a ratio the depth does not hold
        _layout(args, c, n)
    if args.jobs > 1:
        import concurrent.futures
        import multiprocessing

        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            rows = list(pool.map(_run_one, [args] * len(cands), cands, [1] * len(cands)))
    else:
        rows = [_run_one(args, c) for c in cands]
    text = _report(args, n, rows)
    print(text)
    if args.out:
        open(args.out, "w").write(text)
        json.dump(rows, open(args.out.rsplit(".", 1)[0] + ".json", "w"), indent=1, default=str)
    return 0


def _layout(args, cand: str, n: int):
    """A candidate of the comparison: ``transformer``, or a ratio of ``--mixer``."""
    return build_layout("transformer", None, n) if cand == "transformer" else build_layout(args.mixer, cand, n)


def _run_one(args, cand: str, threads: int | None = None) -> dict:
    """Train one candidate with the recall mix and score it; returns its table row."""
    if threads:
        torch.set_num_threads(threads)
    cfg = preset(args.preset)
    n = args.layers or cfg.n_layers
    if args.heads:
        cfg = cfg.replace(n_heads=args.heads)
    layout = _layout(args, cand, n)
    mqar = args.format == "mqar"
    tcfg = TrainConfig(tokens=args.tokens, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr, log_every=50,
                       beta2=args.beta2, warmup_frac=args.warmup, min_lr_ratio=args.min_lr_ratio, seed=args.seed,
                       recall_every=args.recall_every, recall_count=args.recall_count if mqar else 1,
                       recall_format=args.format, recall_length=args.recall_length if mqar else 0,
                       recall_kv_pairs=args.kv_pairs, recall_vocab=args.recall_vocab)
    dcfg = DataConfig(seed=args.seed)  # the corpus, its shuffle and the mixed-in instances
    tok = load_tokenizer(dcfg.tokenizer)
    if mqar:
        scfg = ScoreConfig(objectives=("val_loss", "mqar_mixed"), mqar=MqarConfig(test=args.test),
                           mqar_mixed=MqarMixedConfig(scales=(1, 2)))
        extra = None  # the recipe's own recall protocol
    else:
        scfg = ScoreConfig(objectives=("val_loss", "ruler", "mqar"),
                           ruler=RulerConfig(tasks=TASKS, lengths=(args.seq_len, 2 * args.seq_len), samples=args.samples),
                           mqar=MqarConfig(steps=args.mqar_steps))
        extra = functools.partial(ruler_training_documents, tok, args.seq_len, tasks=TASKS)
    t0 = time.perf_counter()
    result = run(RunConfig(layout=layout, model=cfg, train=tcfg, data=dcfg, score=scfg), progress=args.jobs == 1,
                 extra_docs=extra)
    if result.status != "ok":
        raise SystemExit(f"{layout}: training {result.status}: {result.error}")
    r, s = result.train, result.scores
    row = {"layout": str(layout), "name": "transformer" if layout.ratio == "transformer" else f"{args.mixer} {layout.ratio}",
           "params": r.params, "train_loss": r.final_loss, "val_loss": s["val_loss"], "tokens_per_s": r.tokens_per_s,
           "wall_s": round(time.perf_counter() - t0, 1), "recall_raw": s.get("recall_raw"), "recall_baseline": s.get("recall_baseline")}
    if mqar:
        row.update(recall=s["mqar_mixed_acc"], per_length=s["mqar_mixed"]["by_length"])
    else:
        row.update(recall=s["ruler"]["average"], per_length={L: s["ruler"]["per_length"][L]["average"] for L in s["ruler"]["lengths"]},
                   ruler_tasks=s["ruler"]["tasks"], mqar_acc=s["mqar_acc"])
    print(json.dumps(row), flush=True)
    return row


def _report(args, n: int, rows: list[dict]) -> str:
    mqar = args.format == "mqar"
    lengths = list(rows[0]["per_length"])
    what = (f"MQAR instances of {args.recall_length} tokens, {args.kv_pairs} pairs, {args.recall_vocab} symbols, "
            f"{args.recall_count} per {args.recall_every} corpus document(s); scored on {args.test} held-out instances per length"
            if mqar else f"RULER tasks {', '.join(TASKS)} ({args.samples} samples each)")
    name = "MQAR" if mqar else "RULER"
    lines = [f"# Recall protocol, {args.format} format ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"machine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
             f"cuda {torch.cuda.is_available()}", f"command: python {' '.join(sys.argv)}", "",
             f"preset {args.preset}{f' with {args.heads} heads' if args.heads else ''}, {n} layers, {args.tokens:,} tokens at seq_len {args.seq_len}, "
             f"lr {args.lr} (AdamW beta2 {args.beta2}, warmup {args.warmup}, cosine to {args.min_lr_ratio}), seed {args.seed}; {what}", "",
             f"| candidate | layout | params | val loss | {name} avg | " + " | ".join(f"{name}@{L}" for L in lengths)
             + (" | MQAR (fresh model)" if not mqar else "") + " | train tok/s |",
             "|---" * (6 + len(lengths) + (0 if mqar else 1)) + "|"]
    for r in rows:
        lines.append(f"| {r['name']} | `{r['layout']}` | {r['params']:,} | {r['val_loss']:.3f} | {r['recall']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in r["per_length"].values())
                     + (f" | {r['mqar_acc']:.3f}" if not mqar else "") + f" | {r['tokens_per_s']:.0f} |")
    if not mqar:
        lines += ["", "Per task (averaged over lengths):", "", "| candidate | " + " | ".join(TASKS) + " |", "|---" * (len(TASKS) + 1) + "|"]
        for r in rows:
            lines.append(f"| {r['name']} | " + " | ".join(f"{r['ruler_tasks'].get(t, float('nan')):.2f}" for t in TASKS) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
