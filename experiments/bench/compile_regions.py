"""What compiling the recall model block by block saves (hlnas.training.step.RegionalCompiled, issue #21): per layout,
the recall model's step set up and trained uncompiled (``eager``), compiled whole (``torch.compile`` of the model, as
``score.mqar.compile`` did until 2026-12-03) and compiled block by block (``regional``, what it does now). Each mode
runs in a process of its own on empty inductor and Triton caches, so ``setup s`` is a cold compile (plus, on a GPU,
the CUDA-graph capture): build, compile, capture and the first step, to the first loss on the host. ``steps/s`` is
the steady rate over ``--steps`` steps after it. Ratios are against ``whole`` measured in the same run.

    python -m experiments.bench.compile_regions                                  # H200: the control and GLA 3:1
    python -m experiments.bench.compile_regions --layouts transformer --layers 2 --steps 3 --backend aot_eager \
        --device-name cpu                                                        # smoke (tests/test_bench_compile.py)

Shape: the recall model and task of ``--space``'s ``score.mqar`` (default search_spaces/paper_grid_h200_shift.yaml:
24 layers, d=128, 2 heads, zero residual outputs, the shift-started attention-input conv, MQAR K=64, L=256, batch
64), built as the recall proxy builds it (hlnas.recall.proxy.recall_setup); ``--layers`` overrides the depth.
Writes ``OUT/compile_regions_<device>_<date>`` ``.csv`` (layout, mode, setup_s, steps_per_s, setup_vs_whole,
speed_vs_whole, step_mode) and ``.md``, again after every row, so a run cut short by its time limit keeps the rows it
finished (on a cold H200 on 2026-12-03 the whole-model compile alone took 92 s of a 130 s step).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from experiments.bench.results import DEVICE_NAME_HELP, write_results

MODES = ("eager", "whole", "regional")


def one(args) -> dict:
    """One mode of one layout, in this process: the row's fields."""
    import torch

    from hlnas.model.build import seeded_model
    from hlnas.model.layout import build_layout
    from hlnas.recall.mqar import mqar_loss
    from hlnas.recall.proxy import make_task, recall_setup
    from hlnas.space import load_space
    from hlnas.training.step import compile_module, compiled, make_optimizer, make_step

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.perf_counter()
    space = load_space(args.space)
    layers = args.layers or space.n_layers
    mixer, _, ratio = args.layout.partition(":")
    layout = build_layout(mixer, ratio or None, layers)
    setup = recall_setup(layout, space.model, space.score.mqar)
    model = seeded_model(layout, setup.model, 0).to(dev)
    graph = dev.type == "cuda"
    opt = make_optimizer(model, setup.cfg.lr, betas=(0.9, 0.98), weight_decay=0.1, graph=graph)
    x, y = make_task(setup.task, setup.cfg.batch, 0, split="train")
    x, y = x.to(dev), y.to(dev)
    model_for_step = model if args.mode == "eager" else (
        compile_module(model, args.backend) if args.mode == "whole"
        else compiled(model, args.backend, "score.mqar.compile"))
    autocast = torch.bfloat16 if graph else None
    step, step_mode = make_step(model_for_step, opt, mqar_loss, (x, y), graph=graph, autocast=autocast)
    first = step(x, y).item()  # to the host: every kernel of the first step has run
    setup_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(x, y)
    loss.item()
    rate = args.steps / (time.perf_counter() - t1)
    return {"layout": str(layout), "mode": args.mode, "setup_s": round(setup_s, 2), "steps_per_s": round(rate, 2),
            "step_mode": step_mode, "first_loss": round(first, 4), "loss": round(loss.item(), 4)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default="transformer,gla:3:1", help="comma-separated layouts (hlnas layout specs)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--space", default="search_spaces/paper_grid_h200_shift.yaml",
                   help="the space whose score.mqar recall model, task and batch are timed")
    p.add_argument("--layers", type=int, help="the recall model's depth (default: the space's)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (aot_eager: a quick smoke run)")
    p.add_argument("--steps", type=int, default=200, help="timed steps after the first")
    p.add_argument("--device-name", default=None, help=DEVICE_NAME_HELP)
    p.add_argument("--out", default="experiments/bench")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one mode of one layout in this process
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        args.layout = args.one
        print(json.dumps(one(args)))
        return 0
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        raise SystemExit(f"--modes: unknown {', '.join(unknown)}; allowed: {', '.join(MODES)}")
    from hlnas.space import load_space

    load_space(args.space)  # a bad space is named here, not once per mode in a child
    rows = []
    shape = ["--space", args.space, "--backend", args.backend, "--steps", str(args.steps),
             *(["--layers", str(args.layers)] if args.layers else [])]
    for layout in args.layouts.split(","):
        for mode in modes:
            with tempfile.TemporaryDirectory() as cache:  # a cold compile: nothing from another mode or an earlier call
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TRITON_CACHE_DIR": f"{cache}/triton"}
                r = subprocess.run([sys.executable, "-m", "experiments.bench.compile_regions", "--one", layout, "--mode", mode,
                                    *shape], env=env, capture_output=True, text=True)
            if r.returncode:
                rows.append({"layout": layout, "mode": mode, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]})
            else:
                rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
            write(args, argv, rows)  # every row so far: a run cut short keeps them
    return 0


def write(args, argv, rows: list[dict]) -> None:
    for r in rows:
        base = next((b for b in rows if b["layout"] == r["layout"] and b["mode"] == "whole" and "error" not in b), None)
        ok = base is not None and "error" not in r
        r["setup_vs_whole"] = round(r["setup_s"] / base["setup_s"], 3) if ok else ""
        r["speed_vs_whole"] = round(r["steps_per_s"] / base["steps_per_s"], 3) if ok else ""
    cols = ["layout", "mode", "setup s", "steps/s", "setup vs whole", "speed vs whole", "step mode", "note"]
    write_results(args.out, "compile_regions", args.device_name, "Recall-model compile: whole vs block by block",
                  "python -m experiments.bench.compile_regions " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "Each mode in its own process on empty inductor and Triton caches; setup s: build, compile, capture "
                  "and the first step; steps/s: the steady rate after. Ratios against `whole` in the same run.", cols,
                  lambda r: [r["layout"], r["mode"], r.get("setup_s", ""), r.get("steps_per_s", ""), r["setup_vs_whole"],
                             r["speed_vs_whole"], r.get("step_mode", ""), r.get("error", "")], rows)


if __name__ == "__main__":
    raise SystemExit(main())
