"""What every benchmark in experiments/bench writes: one CSV of its rows and a markdown table beside it, headed by
the command, the date, the device and the Triton autotune mode; and the peak its MFU is measured against."""

from __future__ import annotations

import csv
import datetime as dt
import os
from pathlib import Path

PEAK_BF16 = 989e12  # H200 SXM dense bf16, NVIDIA datasheet


#: --device-name's help in every benchmark: the file names say which card measured them (a run asked of the "H200"
#: device kind can land on an H100: on 2026-12-05 two benchmark files were named h200 from a fixed default)
DEVICE_NAME_HELP = "names the output files and the table's title (default: the card, e.g. h100 or h200; cpu without one)"


def card_name() -> str:
    """The card this process runs on, short and lower case (``NVIDIA H100 80GB HBM3`` -> ``h100``); ``cpu`` without
    CUDA; the full name, slugged, for a card with no ``H``/``A``/``B`` + digits model number."""
    import re

    import torch

    if not torch.cuda.is_available():
        return "cpu"
    full = torch.cuda.get_device_name()
    model = re.search(r"\b([HABL]\d{2,3})\b", full)
    return model.group(1).lower() if model else re.sub(r"[^a-z0-9]+", "-", full.lower()).strip("-")


def write_results(out: str, name: str, device: str | None, title: str, command: str, note: str,
                  columns: list[str], cells, rows: list[dict], quiet: bool = False) -> Path:
    """``OUT/<name>_<device>_<date>.csv`` (every field of ``rows``) and ``.md`` (``columns``, a row's cells from
    ``cells(row)``); returns the path without its suffix. ``device`` None: :func:`card_name`."""
    device = device or card_name()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{name}_{device}_{dt.date.today().isoformat()}"
    with open(f"{stem}.csv", "w", newline="") as f:
        # every field of every row, in first-seen order: an error row may carry fields the others lack
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), restval="")
        w.writeheader()
        w.writerows(rows)
    lines = [f"# {title}, {device}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Command: `{command}`; HLNAS_TRITON_AUTOTUNE={os.environ.get('HLNAS_TRITON_AUTOTUNE', 'full')}. {note}", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in cells(r)) + " |" for r in rows]
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print(f"wrote {stem}.csv and .md")
    return stem


def environment() -> str:
    """The software and device a benchmark ran on, for its markdown note (package versions without importing them)."""
    from importlib import metadata

    import torch

    def version(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "absent"

    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    return (f"{dev}; torch {torch.__version__}, triton {version('triton')}, flash-linear-attention "
            f"{version('flash-linear-attention')}, tilelang {version('tilelang')}")
