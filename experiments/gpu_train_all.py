"""End to end on a GPU: a 24-layer proxy candidate of every paper mixer (and the Transformer) is
trained and scored; tokens/s per mixer, same run, with the Transformer as the baseline ratio.

    python experiments/gpu_train_all.py --preset proxy-gpu --ratio 6:1 --tokens 20000000 --out results.md
    python experiments/gpu_train_all.py --space search_spaces/paper_grid_h200_lr.yaml --tokens 2000000 --out results.md

With ``--space``, the model, training, data and scoring settings are the space's scale (a search's exact
shapes, so this also warms the Triton cache for it); ``--tokens`` still overrides the budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import sys

import torch

from hlnas.model.catalog import PAPER_MIXERS
from hlnas.model.config import preset
from hlnas.data.sources import DataConfig
from hlnas.model.layout import build_layout
from hlnas.pipeline.recipe import RunConfig
from hlnas.pipeline.run import run
from hlnas.score.objectives import MqarConfig, RulerConfig, ScoreConfig
from hlnas.lm.trainer import STEADY_AFTER, TrainConfig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="proxy-gpu")
    ap.add_argument("--space", help="take model/train/data/score settings from this search space's scale")
    ap.add_argument("--no-baseline", action="store_true", help="skip the Transformer baseline")
    ap.add_argument("--quick-score", action="store_true",
                    help="score with 2 RULER samples and 50 MQAR steps (same shapes: measures throughput, warms kernels)")
    ap.add_argument("--ratio", default="6:1")
    ap.add_argument("--mixers", default=",".join(PAPER_MIXERS))
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--objectives", default="val_loss,mqar,ruler")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.space:
        from hlnas.space import load_space

        space = load_space(args.space)
        cfg, dcfg, scfg = space.model, space.data, space.score
        tcfg = dataclasses.replace(space.train, tokens=args.tokens, compile=args.compile)
    else:
        cfg = preset(args.preset)
        tcfg = TrainConfig(tokens=args.tokens, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                           compile=args.compile, log_every=50)
        scfg = ScoreConfig(objectives=tuple(args.objectives.split(",")),
                           ruler=RulerConfig(tasks=("niah_single_1", "niah_multikey_2", "vt"), lengths=(args.seq_len,), samples=20),
                           mqar=MqarConfig(seq_len=256, kv_pairs=32, steps=300))
        dcfg = DataConfig()
    if args.quick_score:
        scfg = dataclasses.replace(scfg, ruler=dataclasses.replace(scfg.ruler, samples=2),
                                   mqar=dataclasses.replace(scfg.mqar, steps=50, test=scfg.mqar.batch))
    rows = []
    candidates = [] if args.no_baseline else [("transformer", build_layout("transformer", None, cfg.n_layers))]
    candidates += [(m, build_layout(m, None if m == "transformer" else args.ratio, cfg.n_layers)) for m in args.mixers.split(",")]
    for name, layout in candidates:
        try:
            r = run(RunConfig(layout=layout, model=cfg, train=tcfg, data=dcfg, score=scfg))
        except Exception as e:  # one mixer's fault is that row's result, not the end of the run
            rows.append({"mixer": name, "layout": str(layout), "status": "failed", "params": 0, "steps": 0,
                         "tokens_per_s": None, "final_loss": None, "error": f"{type(e).__name__}: {e}"[:300]})
            print(json.dumps(rows[-1]), flush=True)
            _write(rows, args)
            continue
        t = r.train
        row = {"mixer": name, "layout": str(layout), "status": r.status, "params": t.params, "steps": t.steps,
               "tokens_per_s": t.tokens_per_s, "steady_tokens_per_s": t.steady_tokens_per_s, "wall_s": t.wall_s,
               "final_loss": t.final_loss, "error": r.error}
        if r.status == "ok":
            s = r.scores
            row.update(val_loss=s.get("val_loss"), mqar_acc=s.get("mqar_acc"), mqar_mixed_acc=s.get("mqar_mixed_acc"),
                       ruler=(s.get("ruler") or {}).get("average"), recall_raw=s.get("recall_raw"),
                       recall_baseline=s.get("recall_baseline"))
        del r
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write(rows, args)  # after every row: a step that runs out of time keeps what finished
    return 0


def _write(rows: list[dict], args) -> None:
    """Markdown table; throughput is steady-state (after the trainer's first STEADY_AFTER steps, which compile)."""
    base = (rows[0].get("steady_tokens_per_s") if rows and rows[0]["mixer"] == "transformer" else None) or float("nan")
    lines = [f"# GPU end-to-end training ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}, torch {torch.__version__}, "
             f"python {platform.python_version()}", f"command: python {' '.join(sys.argv)}", "",
             f"tok/s: steady state, after the first {STEADY_AFTER} steps (compile and autotune); overall: every step, compile included.",
             "", "| candidate | layout | params | steps | train tok/s | vs Transformer | overall tok/s | final loss | val loss "
             "| MQAR (mixed) | MQAR (fresh) | RULER |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for r in rows:
        tps = r.get("steady_tokens_per_s") or nan
        lines.append(f"| {r['mixer']} | `{r['layout']}` | {r['params']:,} | {r['steps']} | {tps:,.0f} | {tps / base:.2f}x | "
                     f"{r['tokens_per_s'] or nan:,.0f} | {_f(r['final_loss'])} | {_f(r.get('val_loss'))} | "
                     f"{_f(r.get('mqar_mixed_acc'))} | {_f(r.get('mqar_acc'))} | {_f(r.get('ruler'))} |"
                     + (f" {r['status']}: {r['error']}" if r["status"] != "ok" else ""))
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if args.out:
        open(args.out, "w").write(text)


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    sys.exit(main())
