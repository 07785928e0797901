"""What every benchmark in experiments/bench writes: one CSV of its rows and a markdown table beside it, headed by
the command, the date, the device and the Triton autotune mode; and the peak its MFU is measured against."""

from __future__ import annotations

import csv
import datetime as dt
import os
from pathlib import Path

PEAK_BF16 = 989e12  # H200 SXM dense bf16, NVIDIA datasheet


def write_results(out: str, name: str, device: str, title: str, command: str, note: str,
                  columns: list[str], cells, rows: list[dict], quiet: bool = False) -> Path:
    """``OUT/<name>_<device>_<date>.csv`` (every field of ``rows``) and ``.md`` (``columns``, a row's cells from
    ``cells(row)``); returns the path without its suffix."""
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
