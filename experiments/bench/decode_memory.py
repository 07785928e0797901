"""Decode memory (issue #22 point 5): the KV-cache and recurrent-state bytes a paper-340m model holds on the device
after decoding 4k and 32k tokens, beside what the cost model (``hlnas.model.cost.layout_cost``) predicts. They must be equal.

    python -m experiments.bench.decode_memory                          # H200: GLA and GatedDeltaNet at every paper ratio
    python -m experiments.bench.decode_memory --mixers gla --ratios pure,6:1,3:1 --preset proxy-tiny --layers 6 \\
        --lengths 40,72 --chunk 16 --decode 3 --device-name cpu --out /tmp/d                           # CPU smoke

Each layout (the Transformer, then each of ``--mixers`` at each of ``--ratios``) is built on the device in
``--dtype`` and decodes through the model's own decode path (``HybridLM.forward(ids, cache)``: attention appends its
K and V, the linear mixers carry their recurrent state and short-convolution windows, :class:`hlnas.model.build.Cache`):
a prefill of L - ``--decode`` tokens in chunks of ``--chunk``, then ``--decode`` tokens one at a time. A short
warm-up decode on a throw-away cache comes first (kernel compiles, cuBLAS workspaces), so what the device holds
after the real decode, less what it held before it, is the cache alone. Per row:

* ``predicted``: the cost model's ``kv_cache_bytes + state_bytes`` at context L, batch ``--batch``;
* ``cache_tensors``: the ``nbytes`` of the tensors the cache holds; ``storage``: the bytes of their distinct
  storages (a tensor kept as a view of a larger one holds all of it);
* on CUDA, ``device_requested`` and ``device_allocated``: ``torch.cuda.memory_stats`` ``requested_bytes`` and
  ``allocated_bytes`` (the caching allocator's 512-byte rounding) after the decode, less before;
* ``equal``: the measured bytes (``device_requested`` on CUDA, ``storage`` on CPU) == ``predicted``;
* ``vs_transformer``: the measured bytes over the Transformer's at the same L (the baseline of the same run);
* ``rope_table``: the bytes of RoPE's cos/sin tables (made to the longest context before the first row: per
  device and shared by every sequence, so not the cache's) and ``rope_grown``: their growth during the row (0);
* ``prefill_s`` and ``decode_ms_per_token``; ``mfu``: the decoded tokens' forward FLOPs (``hlnas.model.cost``'s
  ``flops_per_token`` at context L, times the batch) per second over the bf16 peak
  (:data:`experiments.bench.results.PEAK_BF16`). The cost model counts attention at training's mean span L/2, so a
  decoded token's attention over all L positions counts at half: a lower bound, and the point is its size (one
  token a step reads every weight and the whole cache, so decode is bound by memory, not FLOPs).

Writes ``OUT/decode_memory_<device>_<date>.csv`` and ``.md``, rewritten after every layout.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from experiments.bench.results import DEVICE_NAME_HELP, PEAK_BF16, environment, write_results


def _stats(dev) -> dict:
    import torch

    if dev.type != "cuda":
        return {}
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    # requested: the bytes asked for; allocated: the allocator's blocks (rounded up to 512 bytes)
    return {"requested": s.get("requested_bytes.all.current", s["allocated_bytes.all.current"]),
            "allocated": s["allocated_bytes.all.current"]}


def held_bytes(cache) -> tuple[int, int]:
    """(sum of the cache tensors' nbytes, bytes of their distinct storages)."""
    import torch

    storages = {}
    for layer in cache.layers:
        for v in layer.values():
            if isinstance(v, torch.Tensor):
                s = v.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
    return cache.nbytes(), sum(storages.values())


def decode(model, ids, cache, length: int, chunk: int, n_decode: int) -> tuple[float, float]:
    """Prefill ``length - n_decode`` tokens of ``ids`` in chunks, then decode ``n_decode`` one at a time; the logits
    are dropped at once. Returns (prefill seconds, decode ms per token)."""
    import torch

    dev = ids.device
    prefill = length - n_decode
    t0 = time.perf_counter()
    with torch.no_grad():
        for pos in range(0, prefill, chunk):
            model(ids[:, pos:min(prefill, pos + chunk)], cache)
        _stats(dev)
        t1 = time.perf_counter()
        for t in range(prefill, length):
            model(ids[:, t:t + 1], cache)
        _stats(dev)
    t2 = time.perf_counter()
    return t1 - t0, (t2 - t1) * 1e3 / max(1, n_decode)


def measure(layout, cfg, args, dev, dtype) -> list[dict]:
    import torch

    from hlnas.model.cost import layout_cost
    from hlnas.model.build import build_model
    from hlnas.model.nn import grow_rope_tables, rope_tables_bytes

    lengths = [int(x) for x in args.lengths.split(",")]
    torch.manual_seed(0)
    with torch.device(dev):
        model = build_model(layout, cfg)
    model = model.to(dtype).eval()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, max(lengths)), device=dev)
    warm = model.new_cache()  # compiles the prefill and decode kernels; allocates what persists (cuBLAS workspaces)
    decode(model, ids, warm, min(ids.shape[1], args.chunk + 10), args.chunk, 2)  # two prefill chunks, 2 decoded
    del warm
    # RoPE's cos/sin table (hlnas.model.nn.rope_table) is per device, shared by every sequence and model, and grows by
    # doubling as positions pass its end: made to the longest context here, it is not counted as the cache's. On the
    # H100 on 2026-12-05 the all-attention 32k row measured 12 MiB over the cost model without this: the table
    # grown from 8k to 16k and 32k (cos and sin, float32, both kept).
    grow_rope_tables(max(lengths))
    rows = []
    for length in lengths:
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        before, rope_before = _stats(dev), rope_tables_bytes()
        cache = model.new_cache()
        prefill_s, ms_tok = decode(model, ids, cache, length, args.chunk, args.decode)
        gc.collect()
        after = _stats(dev)
        tensors, storage = held_bytes(cache)
        rope_after = rope_tables_bytes()
        cost = layout_cost(layout, cfg, context=length, batch=args.batch, dtype=args.dtype)
        predicted = cost.kv_cache_bytes + cost.state_bytes
        row = {"layout": str(layout), "ratio": layout.ratio, "context": length, "batch": args.batch, "dtype": args.dtype,
               "predicted_kv": cost.kv_cache_bytes, "predicted_state": cost.state_bytes, "predicted": predicted,
               "cache_tensors": tensors, "storage": storage, "device_requested": "", "device_allocated": "",
               "peak_extra": "", "seen_tokens": cache.seen_tokens, "rope_table": rope_after,
               "rope_grown": rope_after - rope_before}
        if dev.type == "cuda":
            row.update(device_requested=after["requested"] - before["requested"],
                       device_allocated=after["allocated"] - before["allocated"],
                       peak_extra=torch.cuda.max_memory_allocated() - before["allocated"])
        measured = row["device_requested"] if dev.type == "cuda" else storage
        row.update(measured=measured, equal=measured == predicted and tensors == predicted,
                   prefill_s=round(prefill_s, 3), decode_ms_per_token=round(ms_tok, 2),
                   mfu=float(f"{cost.flops_per_token * args.batch / (ms_tok / 1e3) / PEAK_BF16:.4g}") if ms_tok > 0 else "")
        rows.append(row)
        print(row, flush=True)
        del cache
    del model, ids
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _mib(b) -> str:
    return "" if b == "" else f"{b / 2**20:,.2f}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mixers", default="gla,gated_deltanet", help="linear mixers (the Transformer always runs first)")
    p.add_argument("--ratios", default="pure,24:1,12:1,6:1,3:1")
    p.add_argument("--preset", default="paper-340m")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--lengths", default="4096,32768", help="contexts decoded to, comma-separated")
    p.add_argument("--chunk", type=int, default=4096, help="prefill chunk (tokens per forward)")
    p.add_argument("--decode", type=int, default=32, help="tokens decoded one at a time after the prefill")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    p.add_argument("--device-name", default=None, help=DEVICE_NAME_HELP)
    p.add_argument("--out", default="experiments/bench")
    args = p.parse_args(argv)
    if args.decode < 1 or args.chunk < 1 or min(int(x) for x in args.lengths.split(",")) <= args.decode:
        p.error("need --decode >= 1, --chunk >= 1 and every length > --decode")

    import torch

    from hlnas.model.cost import parse_dtype
    from hlnas.model.config import preset
    from hlnas.model.layout import build_layout

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = preset(args.preset)
    layouts = [build_layout("transformer", None, args.layers)]
    layouts += [build_layout(m, r, args.layers) for m in args.mixers.split(",") for r in args.ratios.split(",")]
    command = "python -m experiments.bench.decode_memory " + " ".join(argv)
    rows, stem = [], None
    for layout in layouts:
        try:
            rows += measure(layout, cfg, args, dev, parse_dtype(args.dtype))
        except torch.cuda.OutOfMemoryError as e:
            rows.append({"layout": str(layout), "ratio": layout.ratio, "equal": False,
                         "status": "oom: " + str(e).splitlines()[0][:160]})
            del e
            gc.collect()
            torch.cuda.empty_cache()
        base = {r["context"]: r["measured"] for r in rows if r["layout"] == str(layouts[0]) and "measured" in r}
        for r in rows:
            if r.get("measured") is not None and base.get(r.get("context")):
                r["vs_transformer"] = round(r["measured"] / base[r["context"]], 4)
        n_eq = sum(1 for r in rows if r.get("equal") is True)
        measured = "torch.cuda.memory_stats requested_bytes after the decode less before" if dev.type == "cuda" else \
            "the bytes of the cache tensors' distinct storages (CPU: no allocator statistics)"
        note = (f"Batch {args.batch}, {args.dtype}, preset {args.preset}, {args.layers} layers; prefill in chunks of "
                f"{args.chunk}, then {args.decode} tokens decoded one at a time. Measured: {measured}. Predicted: "
                f"hlnas.model.cost.layout_cost kv_cache_bytes + state_bytes. {n_eq} of {len(rows)} rows equal. Baseline: the "
                f"Transformer's bytes at the same context, same run. {environment()}.")
        stem = write_results(args.out, "decode_memory", args.device_name, "Decode memory: measured vs cost model", command,
                      note, ["layout", "context", "predicted KV MiB", "predicted state MiB", "measured MiB",
                             "allocated MiB", "equal", "vs Transformer", "peak extra MiB", "decode ms/token", "MFU"],
                      lambda r: (r["layout"], r.get("context", ""), _mib(r.get("predicted_kv", "")),
                                 _mib(r.get("predicted_state", "")), _mib(r.get("measured", "")),
                                 _mib(r.get("device_allocated", "")), r.get("equal", r.get("status", "")),
                                 r.get("vs_transformer", ""), _mib(r.get("peak_extra", "")),
                                 r.get("decode_ms_per_token", ""),
                                 "" if r.get("mfu", "") == "" else f"{100 * r['mfu']:.3f}%"), rows, quiet=True)
    print(f"{sum(1 for r in rows if r.get('equal') is True)} of {len(rows)} rows equal the cost model; "
          f"wrote {stem}.csv and .md")
    return 0 if all(r.get("equal") is True for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
