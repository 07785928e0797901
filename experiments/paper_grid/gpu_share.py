"""GPU-seconds per run from the GPU's measured utilisation, shared among the runs active at each sample.

Runs that share one GPU time-slice it, so a run's wall time holds the others' work too (``collect.py``'s ``gpu_s``
overstates a run's cost by about the number of runs beside it). h200.sh samples the GPU every 2 s
(``logs/gpu_util.csv``, nvidia-smi's ``timestamp, utilization.gpu, memory.used``); each sample's busy time,
utilisation x period, is split equally among the runs whose interval holds the sample:

    gpu_s(run) = sum over samples t in [start, end) of  util(t) x period / (runs active at t)

What this assumes, and where it errs:

* equal shares: time-slicing gives each process the same slices, and the runs sharing the GPU here are the same
  model width, so an equal split is close; a run that is compiling while another trains gets the same share;
* every run on the GPU is known: a run that was cut and never stored (a call's hard stop) still took its slices, and
  the stored runs beside it are charged for them;
* clocks agree: run times are the device's ``time.time()`` and the samples its nvidia-smi timestamps, both UTC.

Samples where no known run was active (the machine's start, installs) stay unattributed; ``attribute`` reports them.
A run the samples do not cover (a call whose ``gpu_util.csv`` was not kept, or a run that began before sampling did)
gets ``None``, not the part that was sampled: summed as it stood, a grid run trained in an uncovered calibration call
counted 11.2 GPU-s where its wall seconds put it near 118 (RetNet pure, seed 1, 2026-12-05).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from statistics import median

from hlnas.search.calibration import RECALL_ATTR


def read_util(paths) -> list[tuple[float, float]]:
    """nvidia-smi CSV files (``2026/12/04 19:51:51.072, 37 %, 1024 MiB``) -> sorted (unix time, busy fraction)."""
    out = []
    for path in paths:
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip() or line.startswith("timestamp"):
                continue
            try:
                stamp, util = (part.strip() for part in line.split(",")[:2])
                when = dt.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
                out.append((when.timestamp(), float(util.rstrip("%").strip()) / 100.0))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not an nvidia-smi utilisation line ({e}): {line!r}") from None
    return sorted(out)


def sample_period(samples: list[tuple[float, float]]) -> float:
    """The sampling period: the median gap between consecutive samples of one file (gaps between files are large)."""
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:]) if 0 < b[0] - a[0] < 30]
    if not gaps:
        raise ValueError("fewer than two utilisation samples: no sampling period")
    return median(gaps)


#: a run counts as covered by the samples when they account for this share of its interval, less two sample periods
#: (its first and last partial periods)
COVERED = 0.8


def attribute(intervals: dict[str, tuple[float, float]], samples: list[tuple[float, float]],
              period: float | None = None) -> tuple[dict[str, float | None], dict[str, float]]:
    """Split each sample's busy seconds among the runs active at it. Returns (GPU-seconds per run, None for a run the
    samples do not cover (:data:`COVERED`), totals) where totals has ``sampled`` (all busy seconds), ``attributed`` and
    ``unattributed`` (busy while no known run was active)."""
    period = sample_period(samples) if period is None else period
    share = {k: 0.0 for k in intervals}
    seen = {k: 0 for k in intervals}
    unattributed = 0.0
    for t, busy in samples:
        active = [k for k, (t0, t1) in intervals.items() if t0 <= t < t1]
        if not active:
            unattributed += busy * period
            continue
        for k in active:
            share[k] += busy * period / len(active)
            seen[k] += 1
    covered = {k: seen[k] * period >= COVERED * (t1 - t0) - 2 * period for k, (t0, t1) in intervals.items()}
    sampled = sum(b for _, b in samples) * period
    return ({k: round(v, 1) if covered[k] else None for k, v in share.items()},
            {"sampled": round(sampled, 1), "attributed": round(sampled - unattributed, 1),
             "unattributed": round(unattributed, 1)})


def recall_interval(result: dict, lm_wall_s: float | None = None) -> tuple[float, float] | None:
    """When a stored recall run (``train_mqar``'s result as the calibration stores it) held a GPU slot: from its last
    check back over its whole ``mqar_s`` (build, compile, steps, test) and the LM half before it, if any. None where
    the run has no clock (stored before 2026-12-04) or was paused and continued (its time spans device calls)."""
    runs = (result.get("mqar") or {}).get("runs") or []
    clocks = [c for r in runs for c in (r.get("clock") or [])]
    if not clocks or result.get("mqar_s") is None or any((r.get("resumed_s") or 0) > 0 for r in runs):
        return None
    end = max(t for _, t in clocks)
    return end - float(result["mqar_s"]) - float(lm_wall_s or 0.0), end


def calibration_spans(study) -> dict[str, tuple[float, float]]:
    """Each stored calibration run of ``study`` with a known interval (:func:`recall_interval` of its recall record,
    ``RECALL_ATTR + key``, reaching back over its LM half where it had one), by run key."""
    out = {}
    for key, run in ((study.user_attrs.get("hlnas_calibration") or {}).get("runs") or {}).items():
        stored = study.user_attrs.get(RECALL_ATTR + key) or {}
        span = recall_interval(stored.get("result") or {}, run.get("train_wall_s"))
        if span is not None:
            out[key] = span
    return out


def busy_seconds(paths) -> tuple[float, int]:
    """All busy GPU-seconds the utilisation files sampled (utilisation x period, each file at its own period) and how
    many files: a work's whole cost where runs share processes (a mixed-replica unit trains 10 runs in one), which
    the per-run split (:func:`attribute`) cannot tell apart."""
    total = 0.0
    for path in paths:
        samples = read_util([path])
        if len(samples) >= 2:
            total += sum(b for _, b in samples) * sample_period(samples)
    return round(total, 1), len(list(paths))


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="busy GPU-seconds of h200.sh calls (their logs/gpu_util.csv), in all and "
                                            "per candidate: e.g. the family grid's cost (paper_grid README block 7)")
    p.add_argument("files", nargs="+", help="gpu_util.csv files, one per device call")
    p.add_argument("--candidates", type=int, required=True, help="what the calls trained, e.g. 31 (one grid seed)")
    args = p.parse_args(argv)
    if args.candidates < 1:
        p.error(f"--candidates must be >= 1, got {args.candidates}")
    total, n = busy_seconds(args.files)
    print(f"{total} busy GPU-s over {n} call(s); {total / args.candidates:.1f} per candidate ({args.candidates})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
