"""The proxy recall protocol, demonstrated: does it separate a pure linear model from its 3:1 hybrid
and from the Transformer?

Small models cannot do zero-shot RULER, so hlnas trains candidates on the corpus with recall-format
documents mixed in (``train.recall_every``: complete RULER instances drawn from seeds disjoint from
evaluation, see ``hlnas.score.ruler.ruler_training_documents``), then evaluates RULER at the training
length and at twice that length, plus MQAR learned from scratch. This script runs the three
candidates of one mixer with identical budgets and writes a markdown table.

    python experiments/recall_protocol.py --mixer gla --preset proxy-tiny --tokens 1500000 --seq-len 512
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time

import torch

sys.path.insert(0, ".")
from hlnas.config import preset  # noqa: E402
from hlnas.data.packing import TokenStream  # noqa: E402
from hlnas.data.sources import DataConfig  # noqa: E402
from hlnas.data.tokenizer import load_tokenizer  # noqa: E402
from hlnas.layout import build_layout  # noqa: E402
from hlnas.score.objectives import ScoreConfig, score  # noqa: E402
from hlnas.score.ruler import ruler_training_documents  # noqa: E402
from hlnas.train import TrainConfig, train  # noqa: E402

TASKS = ("niah_single_1", "niah_single_2", "niah_multikey_1", "niah_multikey_2", "niah_multivalue", "niah_multiquery", "vt")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mixer", default="gla")
    ap.add_argument("--preset", default="proxy-tiny")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=1_500_000)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--recall-every", type=int, default=1, help="one recall document per N corpus documents")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--mqar-steps", type=int, default=150)
    ap.add_argument("--out", default=None, help="markdown output (JSON beside it)")
    args = ap.parse_args()
    cfg = preset(args.preset)
    n = args.layers or cfg.n_layers
    layouts = [build_layout(args.mixer, "pure", n), build_layout(args.mixer, "3:1", n), build_layout("transformer", None, n)]
    tcfg = TrainConfig(tokens=args.tokens, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                       recall_every=args.recall_every, log_every=50)
    dcfg = DataConfig()
    tok = load_tokenizer(dcfg.tokenizer)
    scfg = ScoreConfig(objectives=("val_loss", "ruler", "mqar"), ruler_tasks=TASKS,
                       ruler_lengths=(args.seq_len, 2 * args.seq_len), ruler_samples=args.samples, mqar_steps=args.mqar_steps)
    rows = []
    for layout in layouts:
        t0 = time.perf_counter()
        r = train(layout, cfg, tcfg, dcfg, progress=True,
                  extra_docs=lambda seed: ruler_training_documents(tok, args.seq_len, seed, tasks=TASKS))
        val = TokenStream(dcfg, tcfg.seq_len).val_batches(tcfg.batch_size, tcfg.val_batches)
        s = score(r.model, tok, scfg, val_batches=val)
        per_len = {L: s["ruler"]["per_length"][L]["average"] for L in s["ruler"]["lengths"]}
        rows.append({"layout": str(layout), "name": "transformer" if layout.ratio == "transformer" else f"{args.mixer} {layout.ratio}", "train_loss": r.final_loss,
                     "val_loss": s["val_loss"], "ruler": s["ruler"]["average"], "ruler_per_length": per_len,
                     "ruler_tasks": s["ruler"]["tasks"], "mqar_acc": s["mqar_acc"], "tokens_per_s": r.tokens_per_s,
                     "wall_s": round(time.perf_counter() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    head = [f"# Recall protocol ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
            f"machine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
            f"cuda {torch.cuda.is_available()}", f"command: python {' '.join(sys.argv)}", "",
            f"preset {args.preset}, {n} layers, {args.tokens:,} tokens at seq_len {args.seq_len}, recall_every {args.recall_every}; "
            f"RULER tasks {', '.join(TASKS)} ({args.samples} samples each) at lengths {args.seq_len} and {2 * args.seq_len}", "",
            "| candidate | layout | val loss | RULER avg | " + " | ".join(f"RULER@{L}" for L in (args.seq_len, 2 * args.seq_len))
            + " | MQAR acc | train tok/s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head.append(f"| {r['name']} | `{r['layout']}` | {r['val_loss']:.3f} | {r['ruler']:.3f} | "
                    + " | ".join(f"{v:.3f}" for v in r["ruler_per_length"].values())
                    + f" | {r['mqar_acc']:.3f} | {r['tokens_per_s']:.0f} |")
    head += ["", "Per task (averaged over lengths):", "", "| candidate | " + " | ".join(TASKS) + " |", "|---" * (len(TASKS) + 1) + "|"]
    for r in rows:
        head.append(f"| {r['name']} | " + " | ".join(f"{r['ruler_tasks'].get(t, float('nan')):.2f}" for t in TASKS) + " |")
    text = "\n".join(head) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)
        json.dump(rows, open(args.out.rsplit(".", 1)[0] + ".json", "w"), indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
