"""Why the committed grid's HGRN-2 3:1 does not reproduce (issue #61 point 1): one card, several codes, several seeds.

Trains the recall model of ``search_spaces/paper_grid_h200_lr.yaml``'s HGRN-2 3:1 (or any mixer/ratio) with whatever
``hlnas`` is first on ``PYTHONPATH`` (so the same script runs the grid's own commit, unpacked beside this one) and the
kernel backend of ``HLNAS_KERNEL_BACKEND``. One JSON line per run: the validation curve, the step it took off (first
check above twice the no-recall baseline), the step it reached the space's target, and the card.

    python experiments/proxy/reproduce.py run LABEL MIXER RATIO SEED BUDGET_S OUT.jsonl
    python experiments/proxy/reproduce.py kernels OUT.jsonl     # fla's chunk_gla vs the float64 reference
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

SPACE = os.environ.get("REPRO_SPACE", "search_spaces/paper_grid_h200_lr.yaml")
DEVICE = os.environ.get("REPRO_DEVICE", "cuda")  # cpu: a smoke test of the script on a small REPRO_SPACE


def run(label: str, mixer: str, ratio: str, seed: int, budget_s: float, out: str) -> None:
    import torch

    import hlnas
    from hlnas.space import load_space

    try:  # today's package, or a snapshot of the grid's commit (before the wings)
        from hlnas.recall.proxy import train_mqar
    except ImportError:
        from hlnas.score.recall_proxy import train_mqar

    sp = load_space(SPACE)
    cfg = dataclasses.replace(sp.score.mqar, budget_s=budget_s)
    for key in ("graph", "compile"):  # REPRO_GRAPH=0, REPRO_COMPILE=0: the step without its CUDA graph or compile
        if os.environ.get(f"REPRO_{key.upper()}") is not None:
            cfg = dataclasses.replace(cfg, **{key: bool(int(os.environ[f"REPRO_{key.upper()}"]))})
    params = {"mixer": mixer} if mixer == "transformer" else {"mixer": mixer, "ratio": ratio, "placement": "paper"}
    layout = sp.layout(params)
    t0 = time.time()
    r = train_mqar(layout, sp.model, cfg, seed=seed, device=DEVICE)
    curve = r["mqar"]["runs"][0]["curve"]
    base = r["mqar_val_baseline"]
    took_off = next((c[0] for c in curve if c[1] > 2 * base), None)
    row = {"label": label, "code": os.path.dirname(os.path.dirname(hlnas.__file__)), "backend": os.environ.get(
        "HLNAS_KERNEL_BACKEND", "auto"), "mixer": mixer, "ratio": ratio, "seed": seed, "layout": str(layout),
        "steps": r["mqar_steps_done"], "val_acc": curve[-1][1] if curve else None, "val_baseline": base,
        "took_off": took_off, "reached": r["mqar_steps_to_target"], "test_acc": r["mqar_acc"],
        "test_baseline": r["mqar_baseline"], "mode": r["mqar"].get("mode"), "graph": cfg.graph, "compile": cfg.compile,
        "torch_ops": os.environ.get("HLNAS_TORCH_OPS", ""),
        "card": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
        "fallbacks": r["mqar"].get("kernel_fallbacks"), "kernel_paths": r["mqar"].get("kernel_paths"), "wall_s": round(time.time() - t0, 1), "curve": curve}
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(label, mixer, ratio, seed, "steps", row["steps"], "took off", took_off, "reached", row["reached"],
          "test", round(row["test_acc"], 4), f"[{row['test_baseline']:.4f}]", flush=True)


def kernels(out: str) -> None:
    """fla's GLA path and hlnas's PyTorch path against the float64 token loop at the recall models' shapes (HGRN-2's 8
    heads of 16, GLA's heads) and decays (mild: GLA's normalised gate; strong: HGRN-2's first layer, whose forget gate
    has no lower bound), forward output and every input gradient, as relative errors (max |d| / max |ref|)."""
    import torch

    try:
        from hlnas.model.kernels import backends
        from hlnas.model.kernels.gla import gla, naive_gla
    except ImportError:
        from hlnas.kernels import backends
        from hlnas.kernels.gla import gla, naive_gla

    torch.manual_seed(0)
    rows = []
    decays = {"mild": lambda s: torch.nn.functional.logsigmoid(torch.randn(s, device="cuda") * 2 + 2),
              "strong": lambda s: torch.nn.functional.logsigmoid(torch.randn(s, device="cuda") * 3 - 4)}
    for name, H, K, V in (("hgrn2_d128_e16", 8, 16, 16), ("gla_d128", 2, 32, 64)):
        for decay, draw in decays.items():
            B, T = 8, 256
            q = torch.randn(B, T, H, K, device="cuda")
            g = draw((B, T, H, K))
            k = -torch.expm1(g)  # HGRN-2's k = 1 - f
            v = torch.randn(B, T, H, V, device="cuda")
            dout = torch.randn(B, T, H, V, device="cuda")
            ref = [t.detach().double().cpu().requires_grad_() for t in (q, k, v, g)]
            ro, _ = naive_gla(*ref)
            ro.backward(dout.double().cpu())
            err = lambda a, b: float((a.double().cpu() - b).abs().max() / b.abs().max().clamp_min(1e-30))
            for backend, dtype in (("fla", torch.bfloat16), ("fla", torch.float32), ("torch", torch.bfloat16)):
                leaves = [t.clone().to(dtype).requires_grad_() for t in (q, k, v)] + [g.clone().requires_grad_()]
                with backends.use_backend(backend):
                    o, _ = gla(*leaves)
                o.backward(dout.to(o.dtype))
                row = {"shape": name, "decay": decay, "g_min": round(float(g.min()), 2), "backend": backend,
                       "dtype": str(dtype), "o": err(o.detach(), ro.detach()),
                       **{f"d{n}": err(x.grad, r.grad) for n, x, r in zip("qkvg", leaves, ref)},
                       "finite": bool(torch.isfinite(o).all()), "card": torch.cuda.get_device_name()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(out, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        label, mixer, ratio, seed, budget, out = sys.argv[2:8]
        run(label, mixer, ratio, int(seed), float(budget), out)
    elif sys.argv[1] == "kernels":
        kernels(sys.argv[2])
    else:
        sys.exit(__doc__)
