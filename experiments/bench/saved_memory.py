"""Activation memory a layer keeps for backward, per mixer, with the lean gated norm against the composed one (issue #22
point 3: Mamba-2 and two 3:1 hybrids ran out of the H100's memory at paper-340m, B=8, T=4096).

    python -m experiments.bench.saved_memory                      # paper-340m, T=4096, B=1 counted, scaled to B=8
    python -m experiments.bench.saved_memory --mixers mamba2,gla --batch 1 --scale-to 8 --seq-len 2048

What it counts: the distinct storages autograd saves for backward (``torch.autograd.graph.saved_tensors_hooks``,
parameters excluded) during one forward of the LM under bf16 autocast with the fused forms on (as the CUDA step runs),
at 1 and at 2 layers of the mixer (its 24-layer MLP width); a layer's bytes are the difference, scaled linearly from
``--batch`` to ``--scale-to`` (every saved activation is [B, ...]). The recompute threshold
(:data:`hlnas.model.kernels.recompute.RECOMPUTE_ABOVE_BYTES`) is scaled the same way, so a call that recomputes at the target
batch recomputes here. The baseline is the same count with :data:`hlnas.model.nn.LEAN_GATED_NORM` off, in the same run.

Writes ``OUT/saved_memory_t<T>_<device>_<date>.csv`` and ``.md``. On the CPU the linear mixers run their PyTorch
kernels, which keep more than fla's do on a GPU, and RMSNorm's
``F.rms_norm`` decomposes; the gated norm's difference is the same on both. It measures bytes, not time.
"""

from __future__ import annotations

import argparse
import gc
import sys
import weakref

from experiments.bench.results import DEVICE_NAME_HELP, environment, write_results

MIXERS = "mamba2,gla,hgrn,retnet,hgrn2,deltanet,gated_deltanet,transformer"


def saved_bytes(mixer: str, n_layers: int, args) -> int:
    """Bytes autograd saves in one forward of ``n_layers`` layers of ``mixer`` (the last of its 24-layer layout)."""
    import torch

    from hlnas.model.cost import resolve_config
    from hlnas.model.config import preset
    from hlnas.model.layout import Layout, build_layout
    from hlnas.model.build import build_model
    from hlnas.lm.trainer import lm_loss

    full = build_layout(mixer, None, 24)
    cfg = resolve_config(full, preset(args.preset))
    torch.manual_seed(0)
    model = build_model(Layout(full.mixers[-n_layers:]), cfg.replace(target_params=None, mlp_hidden=cfg.mlp_width))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = []  # (a weak reference to the tensor, its storage's address and bytes)

    def pack(t):
        # detached: the same storage, no grad_fn. A node that saves its own output would otherwise hold a tensor that
        # holds the node, a cycle through C++ that Python's gc never frees (1.4-1.8 GB a call leaked at T=4096)
        t = t.detach()
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            saved.append((weakref.ref(t), s.data_ptr(), s.nbytes()))
        return t

    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq_len + 1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = lm_loss(model(ids[:, :-1]), ids[:, 1:])
    # what the graph still holds once the forward is done, each storage once: a node whose output went unused was
    # freed with what it saved, and its storage's address may since have been reused
    held = {ptr: nbytes for ref, ptr, nbytes in saved if ref() is not None}
    del loss, model
    gc.collect()  # the graph and model now, not when the next row's allocations have piled on them
    return sum(held.values())


def layer_bytes(mixer: str, args) -> int:
    """Bytes one layer of ``mixer`` keeps for backward at ``--scale-to`` sequences."""
    return (saved_bytes(mixer, 2, args) - saved_bytes(mixer, 1, args)) * args.scale_to // args.batch


def mixer_row(mixer: str, args) -> dict:
    """One table row: a layer's GiB with the composed and the lean gated norm, their ratio, what 24 layers save."""
    import hlnas.model.nn as hnn

    row = {"mixer": mixer}
    for lean in (False, True):
        hnn.LEAN_GATED_NORM = lean
        row["lean_bytes" if lean else "composed_bytes"] = layer_bytes(mixer, args)
    row["composed_gib"], row["lean_gib"] = (round(row[k] / 2**30, 3) for k in ("composed_bytes", "lean_bytes"))
    row["ratio"] = round(row["lean_bytes"] / row["composed_bytes"], 3)
    row["saved_24_layers_gib"] = round(24 * (row["composed_bytes"] - row["lean_bytes"]) / 2**30, 1)
    print(f"{mixer:16s} composed {row['composed_gib']:6.2f} GiB  lean {row['lean_gib']:6.2f} GiB  "
          f"ratio {row['ratio']:.3f}", flush=True)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mixers", default=MIXERS, help=f"comma-separated (default {MIXERS})")
    p.add_argument("--preset", default="paper-340m")
    p.add_argument("--batch", type=int, default=1, help="sequences counted (default 1)")
    p.add_argument("--scale-to", type=int, default=8, help="sequences the bytes are scaled to (default 8, the paper's)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--out", default="experiments/bench")
    p.add_argument("--device-name", default=None, help=DEVICE_NAME_HELP)
    args = p.parse_args(argv)
    if args.batch < 1 or args.scale_to < 1 or args.seq_len < 2:
        p.error("--batch and --scale-to must be >= 1 and --seq-len >= 2")

    import hlnas.model.kernels.recompute as recompute
    import hlnas.model.nn as hnn

    flags = hnn.FUSED_ON_CPU, hnn.LEAN_GATED_NORM, recompute.RECOMPUTE_ABOVE_BYTES
    hnn.FUSED_ON_CPU = True  # the forms the CUDA step runs
    recompute.RECOMPUTE_ABOVE_BYTES = recompute.RECOMPUTE_ABOVE_BYTES * args.batch // args.scale_to
    try:
        rows = [mixer_row(mixer, args) for mixer in args.mixers.split(",")]
    finally:
        hnn.FUSED_ON_CPU, hnn.LEAN_GATED_NORM, recompute.RECOMPUTE_ABOVE_BYTES = flags
    note = (f"{args.preset}, T={args.seq_len}, {args.batch} sequence(s) counted, scaled to B={args.scale_to}; GiB one "
            f"layer keeps for backward (bf16 autocast, fused forms on); baseline: the composed gated norm "
            f"(hlnas.model.nn.LEAN_GATED_NORM off) in the same run. {environment()}.")
    write_results(args.out, f"saved_memory_t{args.seq_len}", args.device_name,
                  "Activation memory a layer keeps for backward",
                  "python -m experiments.bench.saved_memory " + " ".join(argv if argv is not None else sys.argv[1:]),
                  note, ["mixer", "composed GiB", "lean GiB", "ratio", "24 layers save GiB"],
                  lambda r: [r["mixer"], r["composed_gib"], r["lean_gib"], r["ratio"], r["saved_24_layers_gib"]], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
