"""Training speed at paper scale (issue #22 points 2 and 3): hlnas's paper-340m models against a plain-PyTorch
Transformer of the same size, one run.

    python -m experiments.bench.paper_scale                                  # H200: every row below, B=8, T=4096
    python -m experiments.bench.paper_scale --only plain,transformer --profile
    python -m experiments.bench.paper_scale --only gla:3:1 --autotune-compare  # quick vs full Triton autotune
    python -m experiments.bench.paper_scale --recall-space search_spaces/paper_grid_h200_lr.yaml --mode graph \
        --profile --only matmul,plain,transformer,gla:3:1,hgrn:pure   # a recall-proxy step at the space's batch, length
    python -m experiments.bench.paper_scale --preset proxy-tiny --layers 6 --batch 2 --seq-len 32 --steps 2 \\
        --warmup 1 --only matmul,plain,transformer,gla:3:1 --profile --device-name cpu --out /tmp/b   # CPU smoke

Rows (``--only`` picks some, in this syntax): ``matmul`` (a bf16 8192^3 matmul: the best this device does in this run),
``plain`` (a plain-PyTorch Transformer: fused QKV, SDPA, RoPE, fused gate-up SwiGLU, ``nn.RMSNorm``; the width, depth,
heads, vocabulary and MLP width of hlnas's Transformer, so the same parameter count), ``transformer``, each paper
mixer at ``3:1`` and ``mamba2:pure`` (issue point 3: B=8, T=4096; out of memory is a row, not a crash). A row with
``@compile`` (``gla:3:1@compile``) trains that model under ``torch.compile`` (inductor, block by block as
``train.compile`` does) inside the same step, and its
``tok/s vs own row`` is its speed over the uncompiled row of the same run (issue #21 point 2); every row
takes RoPE's cos/sin as hlnas ships it (``hlnas.model.nn.ROPE_TABLE``: one table, ``hlnas.model.nn.rope_table``), ``@norope``
computes them in place for that row and ``@rope`` forces the table, each measured against the same row without;
``@composed`` runs the gated norms' composed form (``hlnas.model.nn.LEAN_GATED_NORM`` off), against the same row with the
lean one (its tokens/s and peak memory, issue #22 point 3); ``@logits`` takes the loss on the whole logits
(``hlnas.training.head_loss.CHUNKED_HEAD_LOSS`` off) where hlnas's rows take the head's loss in chunks on CUDA;
``@torchconv`` keeps the short convolutions on their PyTorch path (``HLNAS_TORCH_OPS=causal_conv1d`` for the row) where
the others take fla's Triton kernel (``hlnas.model.kernels.causal_conv1d``), and ``@torchl2norm`` the delta rules' q/k norm
(``hlnas.model.kernels.l2norm``); ``@chunkN`` (``transformer@chunk256``) computes
the chunked head loss N MiB of float32 logits at a time instead of ``hlnas.training.head_loss.CHUNK_LOGIT_BYTES``'s 1024
(issue #22 point 2: speed against memory at the head); ``@compile+atenconv`` keeps aten's conv1d for the short
convolutions under torch.compile where ``@compile`` rows write them as shifted multiply-adds that inductor fuses
(``hlnas.model.kernels.causal_conv1d.SHIFTED_SUM_UNDER_COMPILE``). Flags combine with ``+``. Every
model trains through the same step as ``hlnas.lm.trainer`` (``hlnas.training.step.make_optimizer`` / ``make_step``: fused
AdamW, clipping, bf16 autocast, ``hlnas.training.head_loss.lm_step_loss``: the plain row, without an ``lm_head``, keeps
``lm_loss`` on its whole logits) on random tokens of the batch's shape: the rows differ in the model and its loss.

Per row: the first step's seconds (Triton compile and autotune included: the compile cost), steady tokens/s over
``--steps`` steps after ``--warmup``, MFU = 3 x forward FLOPs per token x tokens/s over the H200's dense bf16 peak
(989 TFLOP/s, datasheet; ``mfu_of_matmul``: over this run's matmul row), with the forward FLOPs of the cost model
(``hlnas.model.cost``) at context T, whose attention term 2 T d per layer is causal attention's mean span T/2 at 2 FLOPs
per multiply-add (as lm_step.py; the 2026-12-01 probe took the cost model at T/2, half that term), peak memory, and
tokens/s and peak memory as ratios to the ``plain`` row. Fallbacks hlnas's kernels logged during a row go to its
``notes``. ``--profile`` writes ``paper_scale_profile_<device>_<date>.md`` beside the
table: each row's top kernels by device time over 2 steps (CPU ops on a CPU). ``--autotune-compare`` runs the rows
twice in child processes, ``HLNAS_TRITON_AUTOTUNE=quick`` and ``full``, each on an empty Triton cache, and writes
one table (``paper_scale_autotune_*``): compile seconds and tokens/s side by side. The CSV and markdown are rewritten
after every row, so a call stopped by its time limit keeps the rows it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time

from experiments.bench.results import DEVICE_NAME_HELP, PEAK_BF16, environment, write_results

PAPER_ROWS = ("matmul,plain,transformer,hgrn:3:1,retnet:3:1,gla:3:1,hgrn2:3:1,deltanet:3:1,gated_deltanet:3:1,mamba2:pure,"
              "gla:3:1@composed,mamba2:pure@composed,transformer@logits,transformer@chunk256,"
              "gated_deltanet:3:1@torchconv,gated_deltanet:3:1@torchl2norm")
# the last six: the lean gated norm's, the chunked head loss's and fla's conv and l2norm's speed and memory, each
# against its own row
PROFILE_STEPS = 2
#: a row's variant flags after its "@", joined by "+" (with chunkN): model_row and variant_settings
VARIANT_FLAGS = ("compile", "rope", "norope", "composed", "logits", "torchconv", "torchl2norm", "atenconv")
#: the flags that keep one op on its PyTorch path for the row (HLNAS_TORCH_OPS), against fla's kernel in the others
TORCH_OP_FLAGS = {"torchconv": "causal_conv1d", "torchl2norm": "l2norm"}


# -- the plain-PyTorch baseline ----------------------------------------------------------------------------------
def plain_transformer(cfg):
    """A Transformer as one writes it in plain PyTorch, shaped as hlnas's (``cfg`` resolved for the Transformer)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, h, kv, f = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.mlp_width
    hd = d // h

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(d, eps=cfg.norm_eps), nn.RMSNorm(d, eps=cfg.norm_eps)
            self.qkv = nn.Linear(d, d + 2 * kv * hd, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.gate_up = nn.Linear(d, 2 * f, bias=False)
            self.down = nn.Linear(f, d, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).split([d, kv * hd, kv * hd], dim=-1)
            q, k, v = q.view(B, T, h, hd), k.view(B, T, kv, hd), v.view(B, T, kv, hd)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                               enable_gqa=kv != h)
            x = x + self.o(a.transpose(1, 2).reshape(B, T, d))
            g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

    def rope(x, cos, sin):  # half-split rotary, as hlnas.model.nn.rotary
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab_size, d)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.norm = nn.RMSNorm(d, eps=cfg.norm_eps)
            self.head = nn.Linear(d, cfg.vocab_size, bias=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=cfg.init_std)

        def forward(self, ids, cache=None):
            T = ids.shape[1]
            inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd // 2, device=ids.device, dtype=torch.float32) / (hd // 2))
            ang = torch.arange(T, device=ids.device, dtype=torch.float32)[:, None] * inv
            cos, sin = ang.cos()[None, :, None], ang.sin()[None, :, None]
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x, cos, sin)
            return self.head(self.norm(x))

    return LM()


# -- one row -------------------------------------------------------------------------------------------------------
class _Notes(logging.Handler):
    """hlnas's kernel and graph fallbacks logged while a row runs (each is logged once per process)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage()[:300])


def _sync(dev):
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def matmul_row(dev, n: int) -> dict:
    import torch

    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
    for _ in range(3):
        a @ b
    _sync(dev)
    t, k = time.perf_counter(), 20
    for _ in range(k):
        a @ b
    _sync(dev)
    flops = 2 * n**3 * k / (time.perf_counter() - t)
    return {"tflops": round(flops / 1e12, 3), "mfu": round(flops / PEAK_BF16, 4)}


def _timed_steps(step, x, y, dev, args, row: dict) -> tuple[float, object]:
    """``--warmup`` steps, then ``--steps`` timed ones (2 where a warm-up step took over ``--slow-step-s``, said in
    ``row``'s status): (seconds a step, the last loss)."""
    t = time.perf_counter()
    for _ in range(args.warmup):
        step(x, y)
    _sync(dev)
    steps = args.steps
    if args.warmup and (time.perf_counter() - t) / args.warmup > args.slow_step_s:
        steps = 2  # a PyTorch-path row (Mamba-2's scan) must not spend the call's time on its steps
        row["status"] = f"ok, slow: {steps} timed steps"
    t = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y)
    _sync(dev)
    return (time.perf_counter() - t) / steps, loss


def model_row(spec: str, args, dev, profile: list | None) -> dict:
    """Build the row's model on the device, train ``--steps`` timed steps through hlnas's step; OOM is a row."""
    import torch

    from hlnas.model.cost import layout_cost, resolve_config
    from hlnas.model.config import preset
    from hlnas.training.step import compiled, make_optimizer, make_step
    from hlnas.model.layout import build_layout
    from hlnas.model.build import build_model
    from hlnas.lm.trainer import lm_loss
    from hlnas.training.head_loss import lm_step_loss

    cfg = recall_config(args.recall_space) if args.recall_space else preset(args.preset)
    spec, _, variant = spec.partition("@")  # "@compile": the model as train.compile compiles it (inductor, block by block), then the same step
    flags = set(variant.split("+")) if variant else set()
    unknown = sorted(f for f in flags if f not in VARIANT_FLAGS and not re.fullmatch(r"chunk[1-9]\d*", f))
    if unknown:
        raise SystemExit(f"row {spec}@{variant}: unknown variant {', '.join(unknown)}; allowed, joined by '+': "
                         f"{', '.join(VARIANT_FLAGS)}, chunkN (N MiB of logits a chunk)")
    compile_model = "compile" in flags  # @compile: the model under torch.compile
    mixer, _, ratio = spec.partition(":")
    layout = build_layout("transformer" if mixer == "plain" else mixer, ratio or None, args.layers)
    # at context T the cost model's attention term, 2 T d per token (the paper's Table 4: one FLOP per multiply-add),
    # is the hardware count of causal attention: QK^T and AV over the mean span T/2 at 2 FLOPs per multiply-add
    cost = layout_cost(layout, cfg, context=args.seq_len)
    row = {"params_m": "", "fwd_gflops_per_token": round(cost.flops_per_token / 1e9, 4), "mode": args.mode, "first_step_s": "", "step_ms": "", "tok_s": "", "mfu": "", "peak_gib": "",
           "status": "ok"}
    model = opt = step = None
    with variant_settings(variant):  # @rope, @norope, @composed, @logits, @torchconv, @chunkN: this row only
        try:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                # what earlier rows left allocated: on the H100 three rows ran out of memory at their first step, one
                # with 36 MiB free after 0.6 s, and the table could not say whether a row before it still held memory
                row["held_gib_at_start"] = round(torch.cuda.memory_allocated() / 2**30, 2)
            torch.manual_seed(0)
            with torch.device(dev):
                model = plain_transformer(resolve_config(layout, cfg)) if mixer == "plain" else build_model(layout, cfg)
            row["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
            ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq_len + 1), device=dev)
            x, y = ids[:, :-1], ids[:, 1:].contiguous()
            graph = args.mode == "graph"
            t0 = time.perf_counter()
            opt = make_optimizer(model, 3e-4, betas=(0.9, 0.95), weight_decay=0.1, graph=graph)
            # hlnas's rows take the step's loss as hlnas.lm.trainer does (the head's loss in chunks on CUDA); plain's model has
            # no lm_head and keeps the whole logits, as one writes it
            loss_fn, model_kwargs = lm_step_loss(model, dev, lm_loss)
            step, mode = make_step(compiled(model, True, "train.compile") if compile_model else model, opt, loss_fn, (x, y),
                                   graph=graph, clip=1.0, autocast=torch.bfloat16 if dev.type == "cuda" else None,
                                   rewind_warmup=True, model_kwargs=model_kwargs)
            mode += (("+compile" if compile_model else "") + ("+rope" if "rope" in flags else "")
                     + ("+norope" if "norope" in flags else "")
                     + ("+composed" if "composed" in flags else "")
                     + ("+chunked_ce" if model_kwargs else "")
                     + "".join(f"+{f}" for f in sorted(flags) if f in (*TORCH_OP_FLAGS, "atenconv") or f.startswith("chunk")))
            loss = step(x, y)
            _sync(dev)
            row["first_step_s"] = round(time.perf_counter() - t0, 2)
            dt, loss = _timed_steps(step, x, y, dev, args, row)
            if not math.isfinite(loss.item()):
                row["status"] = f"non-finite loss {loss.item()}"
            tok = args.batch * args.seq_len / dt
            # mode: "eager" where a graph was asked for but capture failed (its reason is in the row's notes)
            row.update(step_ms=round(dt * 1e3, 1), tok_s=round(tok), mfu=round(3 * cost.flops_per_token * tok / PEAK_BF16, 4),
                       mode=mode)
            if dev.type == "cuda":
                row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
            if profile is not None:
                profile.append((f"{spec}@{variant}" if variant else spec, profile_steps(step, x, y, dev)))
        except torch.cuda.OutOfMemoryError as e:
            row["status"] = "oom: " + str(e).splitlines()[0][:160]
            del e
        except Exception as e:  # a kernel that fails to compile or run is a row too (a CUDA fault also fails the rows after it)
            row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            del e
        finally:
            del model, opt, step
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return row


@contextlib.contextmanager
def variant_settings(variant: str):
    """A row's variant for that row only, every setting put back after: RoPE's cos/sin from one table (@rope) or
    computed in place (@norope; otherwise as shipped, hlnas.model.nn.ROPE_TABLE), the gated norms' composed form (@composed), the whole logits' loss (@logits), the short convs' PyTorch
    path (@torchconv: HLNAS_TORCH_OPS, read at each call), the q/k l2norm's (@torchl2norm), N MiB of logits a head-loss chunk (@chunkN), aten's conv1d
    under torch.compile (@atenconv)."""
    import hlnas.model.kernels.causal_conv1d as conv
    import hlnas.model.nn as hnn
    import hlnas.training.head_loss as head_loss

    flags = set(variant.split("+"))
    saved = (hnn.ROPE_TABLE, hnn.LEAN_GATED_NORM, head_loss.CHUNKED_HEAD_LOSS, head_loss.CHUNK_LOGIT_BYTES,
             conv.SHIFTED_SUM_UNDER_COMPILE, os.environ.get("HLNAS_TORCH_OPS"))
    try:
        # RoPE as shipped unless the row says: until session 37 every row without @rope computed cos/sin in place,
        # while hlnas trains with the table (on since 2026-12-04), so the compiled rows timed a kernel hlnas never runs
        hnn.ROPE_TABLE = True if "rope" in flags else False if "norope" in flags else saved[0]
        hnn.LEAN_GATED_NORM = "composed" not in flags
        head_loss.CHUNKED_HEAD_LOSS = "logits" not in flags
        conv.SHIFTED_SUM_UNDER_COMPILE = "atenconv" not in flags
        for f in flags:
            if f.startswith("chunk"):
                head_loss.CHUNK_LOGIT_BYTES = int(f[len("chunk"):]) * 2**20
        torch_ops = [op for f, op in TORCH_OP_FLAGS.items() if f in flags]
        if torch_ops:
            os.environ["HLNAS_TORCH_OPS"] = ",".join(filter(None, [saved[-1], *torch_ops]))
        yield
    finally:
        (hnn.ROPE_TABLE, hnn.LEAN_GATED_NORM, head_loss.CHUNKED_HEAD_LOSS, head_loss.CHUNK_LOGIT_BYTES,
         conv.SHIFTED_SUM_UNDER_COMPILE, torch_ops) = saved
        if torch_ops is None:
            os.environ.pop("HLNAS_TORCH_OPS", None)
        else:
            os.environ["HLNAS_TORCH_OPS"] = torch_ops


def recall_config(space_path: str):
    """The fresh recall model a space's ``score.mqar`` trains (its width, heads, vocabulary, init and mixer options:
    :func:`hlnas.recall.proxy.recall_model_config`), as a model config for the rows."""
    from hlnas.recall.proxy import recall_model_config
    from hlnas.space import builtin_spaces, load_space

    space = load_space(builtin_spaces().get(space_path, space_path))
    mq = space.score.mqar
    return recall_model_config(space.model, dict(mq.model), mq.vocab)


def profile_steps(step, x, y, dev) -> tuple[list[dict], list[dict]]:
    """Top 15 kernels by self device time over PROFILE_STEPS steps (a CPU run: CPU ops by self CPU time), and every
    kernel's time summed by kind (experiments.bench.kernel_classes: what limits the step)."""
    from experiments.bench.kernel_classes import by_kind

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(PROFILE_STEPS):
            step(x, y)
        _sync(dev)
    events = prof.key_averages()
    if dev.type == "cuda":
        # the kernels themselves (aten ops carry their kernels' time too); every event if none is marked CUDA
        kern = [e for e in events if e.device_type == DeviceType.CUDA] or list(events)
        us = lambda e: e.self_device_time_total  # noqa: E731
    else:
        kern = list(events)
        us = lambda e: e.self_cpu_time_total  # noqa: E731
    total = sum(us(e) for e in kern) or 1
    top = sorted(kern, key=us, reverse=True)[:15]
    kinds = by_kind([(e.key, us(e) / 1e3 / PROFILE_STEPS) for e in kern])
    return [{"op": e.key[:90], "calls": e.count // PROFILE_STEPS, "ms_per_step": round(us(e) / 1e3 / PROFILE_STEPS, 2),
             "share": round(us(e) / total, 3)} for e in top], kinds


# -- the tables ----------------------------------------------------------------------------------------------------
def _ratios(rows: list[dict]) -> None:
    base = next((r for r in rows if r["row"] == "plain" and r.get("tok_s")), None)
    mm = next((r for r in rows if r["row"] == "matmul" and r.get("tflops")), None)
    for r in rows:
        if r.get("tok_s") and base:
            r["tok_s_vs_plain"] = round(r["tok_s"] / base["tok_s"], 3)
            if r.get("peak_gib") and base.get("peak_gib"):
                r["peak_vs_plain"] = round(r["peak_gib"] / base["peak_gib"], 3)
        if "@" in r["row"] and r.get("tok_s"):  # a variant against its own row of the same run: without its last flag
            spec, _, variant = r["row"].partition("@")  # (x@compile+rope against x@compile, x@compile against x)
            mine = spec + "@" + variant.rpartition("+")[0] if "+" in variant else spec
            own = next((o for o in rows if o["row"] == mine and o.get("tok_s")), None)
            if own:
                r["tok_s_vs_own"] = round(r["tok_s"] / own["tok_s"], 3)
                if r.get("peak_gib") and own.get("peak_gib"):
                    r["peak_vs_own"] = round(r["peak_gib"] / own["peak_gib"], 3)
        if r.get("mfu") and mm and r["row"] != "matmul":
            r["mfu_of_matmul"] = round(r["mfu"] * PEAK_BF16 / (mm["tflops"] * 1e12), 4)


def _summary(rows: list[dict]) -> str:
    by = {r["row"]: r for r in rows}
    out = []
    gla, gdn = by.get("gla:3:1", {}), by.get("gated_deltanet:3:1", {})
    if gla.get("step_ms") and gdn.get("step_ms"):
        out.append(f"GatedDeltaNet 3:1 runs at {gla['step_ms'] / gdn['step_ms']:.2f}x GLA 3:1's speed "
                   "(GLA step time / GatedDeltaNet step time; the issue asks >= 0.8).")
    t = by.get("transformer", {})
    if t.get("tok_s_vs_plain"):
        out.append(f"hlnas's Transformer: {t['tok_s_vs_plain']:.2f}x the plain one's tokens/s at "
                   f"{t.get('peak_vs_plain', 'n/a')}x its peak memory (the issue asks >= 1.0x with no more memory).")
    return " ".join(out)


COLUMNS = ["row", "params M", "first step s", "step ms", "tok/s", "MFU", "MFU of matmul", "peak GiB", "held at start GiB",
           "tok/s vs plain", "peak vs plain", "tok/s vs own row", "peak vs own row", "status", "notes"]


def _cells(r):
    pct = lambda v: f"{100 * v:.1f}%" if v != "" and v is not None else ""  # noqa: E731
    tok = f"{r['tok_s']:,}" if r.get("tok_s") else (f"{r['tflops']} TFLOP/s" if r.get("tflops") else "")
    return (r["row"], r.get("params_m", ""), r.get("first_step_s", ""), r.get("step_ms", ""), tok, pct(r.get("mfu", "")),
            pct(r.get("mfu_of_matmul", "")), r.get("peak_gib", ""), r.get("held_gib_at_start", ""), r.get("tok_s_vs_plain", ""),
            r.get("peak_vs_plain", ""), r.get("tok_s_vs_own", ""), r.get("peak_vs_own", ""), r.get("status", ""), r.get("notes", ""))


def _write(args, rows, command, name="paper_scale"):
    _ratios(rows)
    model = f"the recall model of {args.recall_space}" if args.recall_space else f"preset {args.preset}"
    note = (f"B={args.batch}, T={args.seq_len}, {model}, {args.mode} steps, {args.steps} timed after "
            f"{args.warmup} warm-up. MFU: 3 x hlnas.model.cost's forward FLOPs per token at context T (causal attention at "
            f"2 FLOPs per multiply-add) x tok/s over 989 TFLOP/s. Baseline: the `plain` row (and `matmul`) of the same "
            f"run. {environment()}. {getattr(args, 'setup', '')}" + ("" if args.recall_space else _summary(rows)))
    title = "Recall-model training speed" if args.recall_space else "Paper-scale training speed"
    return write_results(args.out, name, args.device_name, title, command, note, COLUMNS,
                         _cells, rows, quiet=True)


def write_profile(stem, profile: list, name: str = "paper_scale") -> None:
    """Per row: its top 15 kernels, then every kernel summed by kind with the kind that limits the step."""
    from experiments.bench.kernel_classes import limit_line

    lines = [f"# Per-op profile beside {stem.name}.md ({PROFILE_STEPS} steps per row, self time)", ""]
    for spec, (top, kinds) in profile:
        lines += [f"## {spec}", "", "| op | calls/step | ms/step | share |", "|---|---|---|---|"]
        lines += [f"| `{t['op']}` | {t['calls']} | {t['ms_per_step']} | {100 * t['share']:.1f}% |" for t in top] + [""]
        lines += [f"Every kernel by kind (`experiments/bench/kernel_classes.py`), {limit_line(kinds)}:", "",
                  "| kind | ms/step | share |", "|---|---|---|"]
        lines += [f"| {k['kind']} | {k['ms_per_step']} | {100 * k['share']:.1f}% |" for k in kinds] + [""]
    path = stem.parent / stem.name.replace(f"{name}_", f"{name}_profile_", 1)
    path.with_suffix(".md").write_text("\n".join(lines))


def autotune_compare(args, argv) -> int:
    """The selected rows under quick and full autotune, each in a child process on an empty Triton cache."""
    rows = []
    child = [a for a in argv if a != "--autotune-compare"]
    deadline = time.monotonic() + args.child_timeout * 2
    for mode in ("quick", "full"):
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "HLNAS_TRITON_AUTOTUNE": mode, "TRITON_CACHE_DIR": cache}
            # quick compiles in seconds; full got only its half on the H100 (not finished within 250 s), so it
            # takes whatever quick left of the two halves
            left = max(10, deadline - time.monotonic() if mode == "full" else min(args.child_timeout, deadline - time.monotonic()))
            try:
                subprocess.run([sys.executable, "-m", "experiments.bench.paper_scale", *child, "--out", out, "--json"],
                               env=env, timeout=left, check=False)
                got = [json.loads(line) for f in sorted(os.listdir(out)) if f.endswith(".jsonl")
                       for line in open(os.path.join(out, f))]
            except subprocess.TimeoutExpired:
                got = []
            done = {r["row"] for r in got}
            got += [{"row": s, "status": f"not finished within {left:.0f} s (compile)"} for s in args.only.split(",")
                    if s not in done]
            rows += [{**r, "autotune": mode} for r in got]
    for r in rows:
        q = next((o for o in rows if o["row"] == r["row"] and o["autotune"] == "quick"), {})
        if r["autotune"] == "full" and r.get("tok_s") and q.get("tok_s"):
            r["tok_s_full_vs_quick"] = round(r["tok_s"] / q["tok_s"], 3)
    shape = f"the recall model of {args.recall_space}" if args.recall_space else f"preset {args.preset}"
    note = (f"B={args.batch}, T={args.seq_len}, {shape}; each mode in its own process on an empty Triton "
            f"cache, so `first step s` is the compile cost. Baseline: the quick rows of the same run. {environment()}.")
    write_results(args.out, "paper_scale_autotune", args.device_name, "Triton autotune: quick vs full",
                  "python -m experiments.bench.paper_scale " + " ".join(argv), note,
                  ["row", "autotune", "first step s", "step ms", "tok/s", "MFU", "full / quick tok/s", "status"],
                  lambda r: (r["row"], r["autotune"], r.get("first_step_s", ""), r.get("step_ms", ""), r.get("tok_s", ""),
                             r.get("mfu", ""), r.get("tok_s_full_vs_quick", ""), r.get("status", "")), rows)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=PAPER_ROWS, help=f"rows, comma-separated (default: {PAPER_ROWS})")
    p.add_argument("--preset", default="paper-340m")
    p.add_argument("--recall-space", default="", metavar="SPACE",
                   help="instead of --preset: the fresh recall model of this space's score.mqar (a YAML path or a shipped "
                        "name), e.g. with --batch 256 --seq-len 128 --mode graph for a recall-proxy step (issue #21)")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--batch", type=int, default=None, help="default 8, or the recall space's score.mqar.batch")
    p.add_argument("--seq-len", type=int, default=None, help="default 4096, or the recall space's score.mqar.seq_len")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--slow-step-s", type=float, default=8.0,
                   help="a row whose warm-up steps take longer than this each times only 2 steps")
    p.add_argument("--mode", choices=("eager", "graph"), default="eager",
                   help="the training step: eager, or captured as one CUDA graph as hlnas.lm.trainer does by default")
    p.add_argument("--matmul-n", type=int, default=0, help="matmul row size (default: 8192 on CUDA, 256 on CPU)")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--autotune-compare", action="store_true")
    p.add_argument("--child-timeout", type=float, default=270, help="seconds per autotune mode (--autotune-compare); full also gets what quick left")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # rows also as JSON lines (the children's)
    p.add_argument("--device-name", default=None, help=DEVICE_NAME_HELP)
    p.add_argument("--out", default="experiments/bench")
    args = p.parse_args(argv)
    mq = None
    if args.recall_space:  # the recall proxy's own shape unless given
        from hlnas.space import builtin_spaces, load_space

        mq = load_space(builtin_spaces().get(args.recall_space, args.recall_space)).score.mqar
    args.batch = args.batch or (mq.batch if mq else 8)
    args.seq_len = args.seq_len or (mq.seq_len if mq else 4096)
    if args.autotune_compare:
        return autotune_compare(args, argv)

    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    notes = _Notes()
    for name in ("hlnas.model.kernels", "hlnas.training.step"):
        logging.getLogger(name).addHandler(notes)
    command = "python -m experiments.bench.paper_scale " + " ".join(argv)
    args.setup = ""
    if dev.type == "cuda":  # fla's import (17 s on the H200) is paid here, not in the first fla row's first step
        from hlnas.model.kernels import backends

        t = time.perf_counter()
        ok, why = backends.fla_status()
        gated = backends.fla_gated_backward_ok()[1] if ok else ""
        args.setup = (f"fla: {why} (import {time.perf_counter() - t:.0f} s); GatedDeltaNet's gated backward: "
                      f"{gated}. ")
    rows, profile = [], [] if args.profile else None
    name = "recall_step" if args.recall_space else "paper_scale"  # a recall-step table never overwrites a paper one
    stem = None
    for spec in args.only.split(","):
        t = time.perf_counter()
        seen = len(notes.lines)
        if spec == "matmul":
            row = {"row": spec, **matmul_row(dev, args.matmul_n or (8192 if dev.type == "cuda" else 256)), "status": "ok"}
        else:
            row = {"row": spec, **model_row(spec, args, dev, profile)}
        row["notes"] = "; ".join(notes.lines[seen:])
        row["wall_s"] = round(time.perf_counter() - t, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        stem = _write(args, rows, command, name)
        if args.json:
            with open(f"{stem}.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if profile:
            write_profile(stem, profile, name)
    print(f"wrote {stem}.csv and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
