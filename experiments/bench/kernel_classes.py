"""What limits a training step: its profiled kernels' time summed by kind (issue #22 point 2 asks each paper-340m
hybrid for 35% MFU "or a per-op profile that says what limits it").

    python -m experiments.bench.kernel_classes experiments/bench/paper_scale_profile_h100_2026-12-06.md

``classify`` names a kernel's kind from its name: ``matmul`` (cuBLAS, CUTLASS, nvjet; ``aten::mm`` and kin on a
CPU), ``attention`` (SDPA's kernels), ``norm``, ``conv`` (PyTorch's own depthwise convolutions), ``inductor fused``
(``torch.compile``'s generated elementwise kernels), ``mixer kernels`` (fla's Triton and TileLang kernels: every
name that is not PyTorch's), and ``elementwise and copies`` (PyTorch's elementwise, copy, cast, cat, fill and
reduction kernels, the kind that float32 activations make dear). ``paper_scale --profile`` sums every kernel of a
step by kind (``by_kind``); this command does the same for a profile file's tables. Old files list only each row's
top 15 kernels, so there the sums cover only those, and the rest is reported as ``below the top 15``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# first match wins: a fused norm kernel from fla is a norm, an inductor kernel that fuses a convolution's backward is
# inductor's, a cuBLAS reduction that finishes a split-K matmul is the matmul's
KINDS = [
    ("inductor fused", re.compile(r"^triton_(poi|red|per|tem)_")),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|xmma|cublas|splitKreduce|^aten::(mm|addmm|bmm|baddbmm|matmul|linear)$",
                          re.I)),
    ("attention", re.compile(r"sdpa|flash|fmha|scaled_dot_product|attention", re.I)),
    ("norm", re.compile(r"layer_norm|layernorm|rms_?norm|GammaBeta|group_norm", re.I)),
    ("conv", re.compile(r"conv_depthwise|convolution|^aten::(conv|_conv)", re.I)),
    ("elementwise and copies", re.compile(r"^void at::native::|^void at::|^aten::|^Memcpy|^Memset|^void \(anonymous")),
]
MIXER = "mixer kernels"
ORDER = [k for k, _ in KINDS[1:4]] + [MIXER, "conv", "elementwise and copies", "inductor fused"]


def classify(name: str) -> str:
    """A profiled kernel's (or, on a CPU, an aten op's) kind."""
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return MIXER  # fla's Triton kernels (chunk_gla_bwd_kernel_inter, ...) and TileLang's carry their own names


def by_kind(ops: list[tuple[str, float]], total: float | None = None) -> list[dict]:
    """``(name, ms per step)`` pairs -> per kind: ms per step and share of ``total`` (default: their sum), largest
    first. A ``total`` larger than the sum (a file's top 15 of all kernels) adds a ``below the top 15`` line."""
    sums: dict[str, float] = {}
    for name, ms in ops:
        kind = classify(name)
        sums[kind] = sums.get(kind, 0.0) + ms
    listed = sum(sums.values())
    total = total if total and total > listed else listed
    rows = [{"kind": k, "ms_per_step": round(v, 2), "share": round(v / total, 3) if total else 0.0}
            for k, v in sorted(sums.items(), key=lambda kv: -kv[1])]
    if total > listed + 1e-9:
        rows.append({"kind": "below the top 15", "ms_per_step": round(total - listed, 2),
                     "share": round((total - listed) / total, 3)})
    return rows


def limit_line(kinds: list[dict]) -> str:
    """One sentence: the kind that takes the largest share of the step."""
    top = next((k for k in kinds if k["kind"] != "below the top 15"), None)
    if top is None:
        return "no kernels profiled"
    return f"limited by {top['kind']}: {100 * top['share']:.0f}% of the profiled step"


TABLE_ROW = re.compile(r"^\| `(?P<op>[^`]*)` \| (?P<calls>\d+) \| (?P<ms>[\d.]+) \| (?P<share>[\d.]+)% \|$")


def read_profile(path: Path) -> dict[str, list[tuple[str, float, float]]]:
    """A ``paper_scale --profile`` file -> per ``## row``: its listed ``(op, ms per step, share)``. Rows whose name
    repeats (a later call profiled the same row) keep the later table."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SystemExit(f"kernel_classes: cannot read {path}: {e.strerror}") from None
    out: dict[str, list[tuple[str, float, float]]] = {}
    row = None
    for line in text.splitlines():
        if line.startswith("## "):
            row = line[3:].strip()
            out[row] = []
        elif row is not None and (m := TABLE_ROW.match(line)):
            out[row].append((m["op"], float(m["ms"]), float(m["share"]) / 100))
    if not any(out.values()):
        raise SystemExit(f"kernel_classes: {path} holds no profile table (`## row` then `| op | calls/step | ...`)")
    return out


def report(path: Path) -> str:
    lines = [f"# What limits each row's step: {path.name}, kernels summed by kind", "",
             "Kinds: `experiments/bench/kernel_classes.py`. Shares are of the whole profiled step (the listed kernels' "
             "time over their share); `below the top 15` is the time of the kernels the file does not list.", "",
             "| row | " + " | ".join(ORDER) + " | below the top 15 | limited by |",
             "|---|" + "---|" * (len(ORDER) + 2)]
    for row, ops in read_profile(path).items():
        if not ops:
            continue
        # the file's shares are of every kernel's time: total = listed ms over listed share (summed, to dilute rounding)
        share = sum(sh for _, _, sh in ops)
        total = sum(ms for _, ms, _ in ops) / share if share else None
        kinds = {k["kind"]: k for k in by_kind([(o, ms) for o, ms, _ in ops], total)}
        cells = [f"{100 * kinds[k]['share']:.0f}%" if k in kinds else "" for k in [*ORDER, "below the top 15"]]
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {limit_line(list(kinds.values()))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profiles", nargs="+", type=Path, help="paper_scale_profile_*.md or recall_step_profile_*.md files")
    args = p.parse_args(argv)
    print("\n".join(report(path) for path in args.profiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
