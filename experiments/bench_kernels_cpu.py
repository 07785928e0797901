"""CPU benchmark: each op's chunked PyTorch path vs its naive token-by-token recurrence, and the
training throughput of the proxy presets.

Same run, same inputs, same thread count, untimed warm-up calls first (>= 3 calls and >= 0.25 s,
see median_ms): the ratio naive/chunked is what this prints, with the median of several repeats.
The claim it checks: the chunked path is >= 10x faster at T=1024, for the forward and for
forward+backward.

    python -m experiments.bench_kernels_cpu            # all ops, T=1024, then train tokens/s
    python -m experiments.bench_kernels_cpu --ops gla --seq 2048 --skip-train
    python -m experiments.bench_kernels_cpu --skip-ops --train-steps 2   # training throughput only

The verdict lines judge only the naive/chunked kernel ratios of the ops table. The training table
compares tokens/s of whole models against the Transformer; no claim is checked on it.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import sys
import time

import torch

from tests.kernels.inputs import make_inputs
from hlnas.model.kernels import OPS


def median_ms(fn, repeats: int, warmup: int = 3, warmup_s: float = 0.25) -> float:
    """Median wall time of ``repeats`` calls after untimed warm-up calls: at least ``warmup`` of
    them and at least ``warmup_s`` seconds of them.

    Warm-up by time, not one call: a process's first calls that allocate MB-sized tensors
    page-fault fresh memory until glibc's malloc has adapted its mmap and trim thresholds. On this
    machine that takes the chunked paths a few to ~10 calls (measured for the chunked simple_gla
    forward: 7-11 ms per call with ~2500 page faults for the first 3-5 calls, 2.5-3.5 ms and none
    after), a one-off cost per process that a single warm-up call left inside the median. The
    naive loops allocate only small tensors; their warm-up is their first few calls either way.
    """
    t0 = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - t0 < warmup_s:
        fn()
        done += 1
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def bench_op(name: str, B: int, T: int, H: int, D: int, repeats: int, backward: bool) -> tuple[float, float]:
    mod = importlib.import_module(f"hlnas.model.kernels.{name}")
    inputs = make_inputs(name, B, T, H, D, D, dtype=torch.float32, seed=0)
    naive, fast = getattr(mod, f"naive_{name}"), getattr(mod, name)

    def run(fn, **kw):
        def go():
            leaves = {k: v.detach().requires_grad_(backward and v.is_floating_point()) for k, v in inputs.items()}
            out = fn(**leaves, **kw)
            out = out[0] if isinstance(out, tuple) else out
            if backward:
                out.sum().backward()
        return go

    extra = {} if name == "attention" else {"backend": "torch"}
    return median_ms(run(naive), repeats), median_ms(run(fast, **extra), repeats)


def bench_train(preset_name: str, mixer: str, ratio: str, batch: int, seq: int, steps: int) -> float:
    from hlnas.model.config import preset
    from hlnas.model.layout import build_layout
    from hlnas.model.build import build_model

    torch.manual_seed(0)
    cfg = preset(preset_name)
    model = build_model(build_layout(mixer, None if mixer == "transformer" else ratio, cfg.n_layers), cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq + 1))

    def step():
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * seq * steps / (time.perf_counter() - t)


def bench_ops(args) -> None:
    """The naive-vs-chunked table and the verdict on the >= 10x claim, per pass."""
    print(f"## ops: B={args.batch} T={args.seq} H={args.heads} K=V={args.dim}, fp32, median of {args.repeats}")
    print(f"{'op':18s} {'pass':8s} {'naive ms':>10s} {'chunked ms':>11s} {'naive/chunked':>14s}")
    ops = args.ops.split(",")
    worst: dict[str, tuple[float, str]] = {}
    for name in ops:
        for backward in (False, True):
            n_ms, c_ms = bench_op(name, args.batch, args.seq, args.heads, args.dim, args.repeats, backward)
            ratio = n_ms / c_ms
            pass_ = "fwd+bwd" if backward else "fwd"
            worst[pass_] = min(worst.get(pass_, (float("inf"), "")), (ratio, name))
            print(f"{name:18s} {pass_:8s} {n_ms:10.1f} {c_ms:11.1f} {ratio:13.1f}x", flush=True)
    print(f"claim: the chunked path is >= 10x faster than the naive loop at T={args.seq}, for fwd and fwd+bwd")
    for pass_, (ratio, name) in worst.items():
        verdict = "holds" if ratio >= 10 else "DOES NOT HOLD"
        print(f"  kernel verdict, {pass_:7s}: smallest naive/chunked {ratio:5.1f}x ({name}) -> {verdict}")
    overall = min(r for r, _ in worst.values())
    print(f"  kernel verdict, all passes of {', '.join(ops)}: {'holds' if overall >= 10 else 'DOES NOT HOLD'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(o for o in OPS if o != "attention"))
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-ops", action="store_true", help="only the training throughput table")
    ap.add_argument("--train-preset", default="proxy-small")
    ap.add_argument("--train-steps", type=int, default=3)
    args = ap.parse_args()
    print(f"# CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    if not args.skip_ops:
        bench_ops(args)
    if not args.skip_train:
        print(
            f"## training throughput, preset {args.train_preset}, batch 8 x 256 tokens, fwd+bwd+AdamW, fp32, "
            f"{args.train_steps} timed steps (informational: no claim is checked on this table)"
        )
        base = bench_train(args.train_preset, "transformer", "pure", 8, 256, args.train_steps)
        print(f"{'transformer':28s} {base:9.0f} tokens/s  1.00x")
        for mixer in ("hgrn", "retnet", "gla", "hgrn2", "deltanet", "gated_deltanet", "mamba2"):
            for ratio in ("pure", "6:1"):
                tps = bench_train(args.train_preset, mixer, ratio, 8, 256, args.train_steps)
                print(f"{mixer + ' ' + ratio:28s} {tps:9.0f} tokens/s  {tps / base:.2f}x vs transformer", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
