"""The LM half of a proxy trial on a GPU: eager step against the captured CUDA-graph step, and the graph around the
model under torch.compile (issue #22 point 1), same model, data and seed, measured in the same run.

    python -m experiments.bench.lm_step                         # H200: Transformer, GLA 3:1, GatedDeltaNet 3:1
    python -m experiments.bench.lm_step --layouts transformer --steps 12 --d-model 64 --seq-len 128 --batch 2 --device-name cpu

Each case trains ``hlnas.lm.trainer.train`` for ``--steps`` steps at the proxy shape of search_spaces/paper_grid_h200_lr.yaml
(24 layers, d=256, 4 heads, byte vocabulary, B=16, T=1024, bf16 autocast) with ``train.graph`` off, then on, and
reports the trainer's own steady tokens/s (after its first STEADY_AFTER steps), the ratio to eager of ``graph`` and
``compile`` (``train.compile`` with the graph: the compiled model captured in the step; ``--modes`` picks), and MFU: 3 x
the cost model's forward FLOPs per token (``hlnas.model.cost``) x tokens/s over the H200's dense bf16 peak (989 TFLOP/s,
NVIDIA's datasheet). Writes ``OUT/lm_step_<device>_<date>.csv`` (columns: layout, mode, steady_tokens_per_s, mfu,
ratio, step_mode) and a markdown table with the command, date and autotune mode.
"""

from __future__ import annotations

import argparse
import sys

from experiments.bench.results import DEVICE_NAME_HELP, PEAK_BF16, write_results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default="transformer,gla:3:1,gated_deltanet:3:1")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--modes", default="eager,graph,compile", help="eager (the baseline, always run first), graph, compile")
    p.add_argument("--device-name", default=None, help=DEVICE_NAME_HELP)
    p.add_argument("--out", default="experiments/bench")
    args = p.parse_args(argv)

    from hlnas.model.cost import layout_cost
    from hlnas.model.config import preset
    from hlnas.data.sources import DataConfig
    from hlnas.model.layout import build_layout
    from hlnas.lm.trainer import TrainConfig, train

    modes = args.modes.split(",")
    if bad := [m for m in modes if m not in ("eager", "graph", "compile")]:
        raise SystemExit(f"--modes: unknown {', '.join(bad)}; allowed: eager, graph, compile")
    cfg = preset("proxy-gpu").replace(d_model=args.d_model, n_heads=args.heads, target_params=None, mlp_hidden=None)
    rows = []
    for spec in args.layouts.split(","):
        mixer, _, ratio = spec.partition(":")
        layout = build_layout(mixer, ratio or None, args.layers)
        fwd = layout_cost(layout, cfg, context=args.seq_len).flops_per_token
        base = None
        for mode in ["eager"] + [m for m in modes if m != "eager"]:
            tc = TrainConfig(tokens=args.steps * args.batch * args.seq_len, batch_size=args.batch, seq_len=args.seq_len,
                             graph=mode != "eager", compile=mode == "compile", log_every=args.steps, val_batches=1)
            r = train(layout, cfg, tc, DataConfig(), progress=False)
            if r.status != "ok":
                raise SystemExit(f"{layout} {mode}: {r.status} {r.error}")
            tps = r.steady_tokens_per_s or r.tokens_per_s
            row = {"layout": str(layout), "mode": mode, "steady_tokens_per_s": round(tps),
                   "mfu": round(3 * fwd * tps / PEAK_BF16, 4), "ratio": "", "step_mode": r.step_mode}
            if mode == "eager":
                base = tps
            else:
                row["ratio"] = round(tps / base, 3)
            rows.append(row)
            print(row, flush=True)
    write_results(args.out, "lm_step", args.device_name, "LM step: eager, CUDA graph, compiled model in the graph",
                  f"python -m experiments.bench.lm_step {' '.join(sys.argv[1:] if argv is None else argv)}",
                  f"B={args.batch}, T={args.seq_len}, d={args.d_model}, {args.layers} layers. Baseline: the eager step of "
                  "the same layout in the same run.",
                  ["layout", "mode", "steady tok/s", "MFU", "vs eager", "step ran as"],
                  lambda r: (r["layout"], r["mode"], f"{r['steady_tokens_per_s']:,}", f"{100 * r['mfu']:.2f}%", r["ratio"],
                             r["step_mode"]), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
