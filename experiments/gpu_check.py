"""GPU correctness check of every kernel path: fla's Triton kernels vs hlnas's PyTorch reference.

For each op: random bf16 inputs on CUDA; the fla path (``backend="fla"``) against the PyTorch
chunked path on the same inputs upcast to float32; forward output and the gradient of every input
under one random cotangent; relative error ||a-b||/||b|| must be < 1e-2. Attention compares torch
SDPA (bf16, fused kernels) with the naive float32 softmax. Also times forward+backward of both
paths (ratio = torch / fla, same run) and reports which backward the gated delta rule used.

Run on a GPU machine:  python -m experiments.gpu_check --out results.md
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import sys
import time

import torch

from hlnas.model.kernels import OPS
from tests.helpers import rel_err
from tests.kernels.inputs import make_inputs  # run as python -m experiments.gpu_check (the tree travels whole to the GPU)

TOL = 1e-2


def run_op(name: str, mod, inputs: dict, backend: str | None):
    # RetNet's g_gamma is a constant of the layer, not a learned input: no gradient, as in the model
    # a setting that is not a tensor (causal_conv1d's activation) passes as it is
    leaves = {k: v.detach().clone().requires_grad_(v.is_floating_point() and k != "g_gamma") if torch.is_tensor(v) else v
              for k, v in inputs.items()}
    if name == "attention":
        fn = mod.attention if backend != "ref" else mod.naive_attention
        out = fn(leaves["q"], leaves["k"], leaves["v"])
    else:
        fn = getattr(mod, name)
        out, _ = fn(**leaves, backend=backend)
    return out, leaves


def grads(out, leaves, cot):
    keys = [k for k, v in leaves.items() if torch.is_tensor(v) and v.requires_grad]
    gs = torch.autograd.grad(out, [leaves[k] for k in keys], cot, allow_unused=True)
    return {k: g for k, g in zip(keys, gs) if g is not None}


def timed(fn, reps=10):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e3


def check(name: str, B: int, T: int, H: int, K: int, V: int) -> dict:
    name, _, variant = name.partition("@")  # simple_gla@g_gamma: RetNet's constant decay instead of a gate
    mod = importlib.import_module(f"hlnas.model.kernels.{name}")
    extra = {"decay": variant} if variant else {}
    x16 = make_inputs(name, B, T, H, K, V, dtype=torch.bfloat16, device="cuda", seed=1, **extra)
    x32 = {k: (v.float() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in x16.items()}
    t0 = time.perf_counter()
    out, leaves = run_op(name, mod, x16, "fla")
    cot = torch.randn_like(out)
    g = grads(out, leaves, cot)
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - t0
    ref, rleaves = run_op(name, mod, x32, "ref" if name == "attention" else "torch")
    rg = grads(ref, rleaves, cot.float())
    errs = {"o": rel_err(ref, out), **{f"d{k}": rel_err(rg[k], g[k]) for k in rg}}

    def step(backend):
        def f():
            o, lv = run_op(name, mod, x16, backend)
            grads(o, lv, cot)
        return f

    fla_ms = timed(step("fla"))
    torch_ms = timed(step("ref" if name == "attention" else "torch"))
    return {
        "op": name + (f"@{variant}" if variant else ""), "shape": f"B{B}-T{T}-H{H}-K{K}-V{V}-bf16", "errors": errs,
        "max_rel_err": max(errs.values()), "ok": max(errs.values()) < TOL,
        "first_call_s": round(first_call_s, 1), "fla_fwd_bwd_ms": round(fla_ms, 3),
        "torch_fwd_bwd_ms": round(torch_ms, 3), "speedup_vs_torch": round(torch_ms / fla_ms, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(OPS + ("simple_gla@g_gamma",)), help="ops; simple_gla@g_gamma = RetNet's decay")
    ap.add_argument("--shapes", default="2,512,4,64,64;2,1000,4,64,128", help="B,T,H,K,V;...")
    ap.add_argument("--out", default=None, help="write a markdown report here (and JSON beside it)")
    args = ap.parse_args()
    import triton

    from hlnas.model.kernels import backends, fla_status

    fla_ok, why = fla_status()
    import fla

    head = [
        f"# GPU kernel check ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"device: {torch.cuda.get_device_name()} (capability {torch.cuda.get_device_capability()}), "
        f"torch {torch.__version__}, triton {triton.__version__}, fla {getattr(fla, '__version__', '?')}, "
        f"python {platform.python_version()}; fla usable: {fla_ok} ({why})",
    ]
    ok_bwd, why_bwd = backends.fla_gated_backward_ok()
    head.append(f"gated_delta_rule backward on fla: {'fla kernels' if ok_bwd else 'PyTorch fallback'} ({why_bwd})")
    ok_sg, why_sg = backends.simple_gla_gated_backward_ok(torch.bfloat16)
    head.append(f"simple_gla gated backward (bf16) on fla: {'fla kernels' if ok_sg else 'PyTorch fallback'} ({why_sg})")
    head += ["", f"tolerance: relative error < {TOL}", "",
             "| op | shape | max rel err | errors | first call s | fla ms | torch ms | torch/fla |",
             "|---|---|---|---|---|---|---|---|"]
    rows, results, failed = [], [], False
    for name in args.ops.split(","):
        for shp in args.shapes.split(";"):
            B, T, H, K, V = (int(x) for x in shp.split(","))
            try:
                r = check(name, B, T, H, K, V)
            except Exception as e:  # report and go on: one broken op must not hide the others
                r = {"op": name, "shape": shp, "ok": False, "error": f"{type(e).__name__}: {e}"}
            results.append(r)
            failed |= not r["ok"]
            if "error" in r:
                rows.append(f"| {name} | {shp} | ERROR | {r['error'][:200]} | | | | |")
            else:
                errs = ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items())
                rows.append(f"| {name} | {r['shape']} | {r['max_rel_err']:.2e} {'ok' if r['ok'] else 'FAIL'} | {errs} | "
                            f"{r['first_call_s']} | {r['fla_fwd_bwd_ms']} | {r['torch_fwd_bwd_ms']} | {r['speedup_vs_torch']} |")
            print(rows[-1], flush=True)
    text = "\n".join(head + rows) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        with open(args.out.rsplit(".", 1)[0] + ".json", "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
