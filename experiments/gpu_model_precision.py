"""Where a bf16-trained model's gradient departs from float32, per mixer: the PyTorch path under bf16 autocast
(bf16 projections, float32 kernel) and the fla path under bf16 autocast (bf16 projections and bf16 kernel
inputs), each against the float32 PyTorch model, plus fla against PyTorch under the same autocast (the
kernel alone). Whole gradient (every parameter's, concatenated) and the worst single parameter.

    python -m experiments.gpu_model_precision --out experiments/results/gpu_model_precision_h200.md
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch

from hlnas.model.catalog import linear_mixer_names
from tests.helpers import rel_err
from tests.test_model_gpu import _model, _run  # the GPU test's model, inputs and step


def compare(a: tuple, b: tuple) -> str:
    (la, ga), (lb, gb) = a, b
    names = sorted(ga)
    whole = rel_err(torch.cat([gb[n].flatten() for n in names]), torch.cat([ga[n].flatten() for n in names]))
    worst = max(names, key=lambda n: rel_err(gb[n], ga[n]))
    return f"{rel_err(lb, la):.1e} | {whole:.1e} | {rel_err(gb[worst], ga[worst]):.1e} `{worst.removeprefix('blocks.')}`"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    args = ap.parse_args()
    lines = [f"# bf16 vs float32 gradients per mixer ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{torch.cuda.get_device_name()}, torch {torch.__version__})", "", f"command: python {' '.join(sys.argv)}", "",
             "Each cell: logits | whole gradient | worst parameter (relative errors).", "",
             "| mixer | torch bf16 vs fp32: logits | whole grad | worst parameter | fla bf16 vs fp32: logits | whole grad "
             "| worst parameter | fla vs torch, both bf16 (the kernel alone): logits | whole grad | worst parameter |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mixer in linear_mixer_names():
        model, ids = _model(mixer)
        ref = _run(model, ids, "torch", bf16=False)
        tb = _run(model, ids, "torch", bf16=True)
        fb = _run(model, ids, "fla", bf16=True)
        lines.append(f"| {mixer} | {compare(tb, ref)} | {compare(fb, ref)} | {compare(fb, tb)} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
