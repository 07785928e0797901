"""How many recall-proxy training steps one GPU does per second: N recall models as N worker processes (which
time-slice the GPU) against N runs in one worker process, each on a CUDA stream of its own (hlnas.search.executors,
``runs_per_worker``; issue #21), and against N worker processes under NVIDIA's Multi-Process Service (mode
``mps``: one shared GPU context, kernels of different processes at once; a row says why where the daemon cannot
start), and against the N runs trained in one process as replicas of one model (mode ``replicas``: stacked weights,
the replicas folded into the kernels' batch, one optimizer state per replica; hlnas.training.replicas), and against
N worker processes whose steps run under torch.compile before capture (mode ``compiled``: ``score.mqar.compile``,
issue #21 point 2; each run compiles its own model inside the timed window, as a search's runs would), and those
compiled workers under MPS (mode ``mps_compiled``: how the protocol's sweeps and calibrations run, if MPS wins).
Same runs, same call: the ratio is each mode's aggregate steps/s over the separate processes' at the same N.

    python -m experiments.bench.proxy_throughput                              # H200: 1, 4, 12 runs; control and GLA 3:1
    python -m experiments.bench.proxy_throughput --runs 1,2 --layers 4 --d-model 32 --steps 20 --modes processes,streams,replicas --device-name cpu   # smoke

Each run is a fresh-model MQAR run of the paper-depth protocol (search_spaces/paper_grid_h200.yaml's recall model:
24 layers, d=128, 2 heads, zero-initialised residual outputs, the attention-input conv, L=128, K=32, batch 64),
trained for ``--steps`` steps with no early stop and one validation check at the end, on the CUDA-graph step. A
warm-up round (imports, Triton compiles, capture) runs first in the same workers and is not timed. The timed
window runs from the first submit to the last result, so each run's model build and graph capture are inside it
(the same for both modes): ``steps_per_s`` and ``ratio``. Beside them, ``steady_steps_per_s`` and ``steady_ratio``
count only the steps every run was training at once: from the last run's first validation check to the first run's
last (``--checks`` checks a run; each run's ``clock``, hlnas.recall.proxy), each run's steps in that window
interpolated between its checks; ``overlap`` is that window over a run's mean time between its first and last check
(near 1: the runs trained side by side throughout). Build and capture dilute the whole-round ratio; a sweep or a
calibration of 4000-step runs sees the steady one. MFU: 3 x the cost model's forward FLOPs per token
(``hlnas.model.cost``) x tokens per step, over the H200's dense bf16 peak (989 TFLOP/s, NVIDIA's datasheet). Writes ``OUT/proxy_throughput_<device>_<date>.csv``
(columns: layout, n_runs, mode, steps_per_s, tokens_per_s, mfu, ratio, steady_steps_per_s, steady_ratio, overlap,
wall_s, warmup_s: the untimed warm-up round's wall, where the compiles land, a cost each calibration unit pays once;
peak_gib: on CUDA, the replica modes' peak allocation in this process, and the worker modes' largest worker
peak) and a markdown table beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from typing import NamedTuple

from experiments.bench.results import DEVICE_NAME_HELP, PEAK_BF16, write_results


def recall_spec(number: int, layout: str, args, steps: int, compile: bool = False):
    """Run ``number``'s spec; ``compile``: its step under torch.compile with ``--compile-backend``."""
    from hlnas.model.config import preset
    from hlnas.data.sources import DataConfig
    from hlnas.model.layout import Layout
    from hlnas.pipeline.recipe import RunConfig
    from hlnas.score.objectives import MqarConfig, ScoreConfig
    from hlnas.lm.trainer import TrainConfig
    from hlnas.search.trial import TrialSpec

    hp = {"attention": {"input_conv": 4}, "gla": {"use_short_conv": True}, "hgrn": {"use_short_conv": True},
          "hgrn2": {"use_short_conv": True}}
    mqar = MqarConfig(seq_len=args.seq_len, kv_pairs=args.kv_pairs, vocab=args.vocab, batch=args.batch, steps=steps,
                      eval_every=max(1, steps // args.checks), test=64, val=64, target=None,
                      compile=args.compile_backend if compile else False,
                      model={"d_model": args.d_model, "n_heads": 2, "residual_init": "zero", "mixer_hparams": hp})
    recipe = RunConfig(layout=Layout.parse(layout), model=preset("proxy-gpu"),
                       train=TrainConfig(seed=number, tokens=1, batch_size=1, seq_len=1), data=DataConfig(),
                       score=ScoreConfig(objectives=("mqar",), mqar=mqar), preset="proxy-gpu")
    return TrialSpec(number=number, recipe=recipe, recall_only=True)


def steady_rate(clocks: list[list[list[float]]]) -> tuple[float | None, float]:
    """Aggregate steps/s of runs while all of them trained, and how much of a run that window is. ``clocks``: each
    run's ``[steps done, unix time]`` at its checks. The window runs from the last first check to the first last check;
    a run's steps in it are interpolated between its checks. ``(None, 0.0)`` where the runs never trained at once."""
    import numpy as np

    clocks = [c for c in clocks if len(c) >= 2]
    if not clocks:
        return None, 0.0
    lo, hi = max(c[0][1] for c in clocks), min(c[-1][1] for c in clocks)
    if hi <= lo:
        return None, 0.0
    def steps_at(c, t):
        return float(np.interp(t, [x[1] for x in c], [x[0] for x in c]))
    steps = sum(steps_at(c, hi) - steps_at(c, lo) for c in clocks)
    span = sum(c[-1][1] - c[0][1] for c in clocks) / len(clocks)
    return steps / (hi - lo), (hi - lo) / span


def _clocks(metrics: list[dict]) -> list[list[list[float]]]:
    """Each run's clock from its trial metrics (a recall-only trial's one rate run)."""
    return [run.get("clock") or [] for m in metrics for run in m.get("mqar", {}).get("runs", [])[:1]]


class Round(NamedTuple):
    """One timed round of N runs: wall seconds, each run's clock, the peak GiB (None off CUDA), and how many CUDA runs
    trained eagerly because their step could not be captured (one of the 10 processes of 2026-12-06 did, out of memory
    beside the others: a mode then measures slower for a reason beside the mode)."""
    wall: float
    clocks: list
    peak: float | None = None
    eager: int = 0
    warmup: float | None = None  # the untimed warm-up round's wall: imports, Triton and inductor compiles, capture


def _eager_on_cuda(results: list[dict]) -> int:
    """How many of these recall results (``train_mqar``'s) ran on CUDA without their captured step."""
    return sum(1 for m in results if m.get("mqar_device_name", "cpu") != "cpu"
               and (m.get("mqar") or {}).get("mode") == "eager")


def run_round(ex, specs) -> Round:
    """The round from the first submit until every run is back (all N at once); the peak is the largest worker's;
    raises on a failed run."""
    t0 = time.perf_counter()
    queue, done = list(specs), []
    while queue or ex.in_flight():
        while queue and ex.in_flight() < ex.capacity:
            ex.submit(queue.pop(0))
        for r in ex.wait(timeout=5):
            for x in (r, *r.replicas):
                if not x.ok or x.metrics.get("replicas_error"):
                    raise SystemExit(f"run {x.number} failed: {x.error_kind}: {(x.error or x.metrics['replicas_error'])[:400]}")
            done.append(r)
    results = [x.metrics for r in done for x in (r, *r.replicas)]  # every run, a unit's replicas too
    peaks = [m.get("mqar", {}).get("peak_gib") for m in results]
    return Round(time.perf_counter() - t0, _clocks(results), max((p for p in peaks if p is not None), default=None),
                 _eager_on_cuda(results))


MPS_DIRS = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/hlnas-mps/pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/hlnas-mps/log"}


def _wait_gone(name: str, timeout: float = 15.0) -> None:
    """Until no process called ``name`` runs (``pgrep -x``), for at most ``timeout`` seconds."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            if subprocess.run(["pgrep", "-x", name], capture_output=True).returncode != 0:
                return
        except FileNotFoundError:  # no pgrep: a fixed pause
            time.sleep(2.0)
            return
        time.sleep(0.2)


@contextlib.contextmanager
def mps_daemon():
    """NVIDIA's Multi-Process Service for the block: CUDA processes started inside it (the workers) share one GPU
    context, so their kernels run at the same time instead of time-slicing. Raises when it cannot start."""
    for d in MPS_DIRS.values():
        os.makedirs(d, exist_ok=True)
    env = {**os.environ, **MPS_DIRS}
    started = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        raise RuntimeError(f"nvidia-cuda-mps-control -d: {started.stderr.strip() or started.returncode}")
    before = {k: os.environ.get(k) for k in MPS_DIRS}
    os.environ.update(MPS_DIRS)  # the worker processes inherit it and connect to the daemon
    try:
        yield
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True, capture_output=True)
        _wait_gone("nvidia-cuda-mps-control")  # quit returns at once: a next mode's daemon would find it still there
        for k, v in before.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def release_memory() -> None:
    """The GPU memory a failed in-process mode held, back before the next mode: the error's traceback kept its frames
    (the model, its activations) alive, so after a 10-run mixed model ran out of memory on the H100 (2026-12-06) the
    next mode's workers ran out too, on memory no one used."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_layouts(layouts: list[str], n: int) -> list[str]:
    """Each of the ``n`` runs' layout: run ``i`` trains the ``(i mod len)``-th."""
    return [layouts[i % len(layouts)] for i in range(n)]


def replicas_round(layouts: list[str], n: int, args, steps: int, compile: bool = False) -> Round:
    """Wall seconds of the ``n`` runs (run ``i``: seed ``i``, layout ``layouts[i % len]``, the protocol's rate)
    trained in this process as replicas of one model (hlnas.recall.replicas; of one mixed model where the
    layouts differ, hlnas.training.mixed_replicas), from the first model build to the last run's result; ``compile``:
    the replicas' step under torch.compile before capture; and each run's clock (the peak: :func:`measure`'s)."""
    from hlnas.recall.replicas import train_mqar_layouts

    recipes = [recall_spec(i, lay, args, steps, compile).recipe for i, lay in enumerate(run_layouts(layouts, n))]
    units: dict = {}
    for r in recipes:
        units.setdefault(r.layout, []).append(r.train.seed)
    r0 = recipes[0]
    t0 = time.perf_counter()
    got = train_mqar_layouts(list(units.items()), r0.model, r0.score.mqar)
    wall = time.perf_counter() - t0
    out = [run for unit in got for res in unit for run in res["mqar"]["runs"][:1]]
    bad = [o for o in out if o["error"] is not None or o["steps"] != steps]
    if bad:
        raise SystemExit(f"replica run: {bad[0]['error'] or str(bad[0]['steps']) + ' steps'}")
    return Round(wall, [o.get("clock") or [] for o in out], eager=_eager_on_cuda([res for unit in got for res in unit]))


def _layout_units(layouts: list[str], n: int, args, steps: int, compile: bool) -> list:
    """The ``n`` runs as one spec per layout carrying that layout's other runs as replicas (what the calibration's
    ``--replicas`` submits: a worker process per layout)."""
    import dataclasses

    specs: dict[str, list] = {}
    for i, lay in enumerate(run_layouts(layouts, n)):
        specs.setdefault(lay, []).append(recall_spec(i, lay, args, steps, compile))
    return [dataclasses.replace(first, replicas=tuple(rest)) for first, *rest in specs.values()]


#: modes that train in this process as replicas (``_mixed``: the runs' layouts in one mixed model)
REPLICA_MODES = ("replicas", "replicas_compiled", "replicas_mixed", "replicas_mixed_compiled", "replicas_mixed_where",
                 "replicas_mixed_where_compiled")


def measure(layouts: list[str], n: int, mode: str, args) -> Round:
    """Wall seconds, the runs' clocks and (on CUDA) the peak GiB allocated (this process's, or the largest worker's) of one timed round of ``n``
    runs (:func:`run_layouts`) in ``mode``: processes (n workers, one run each), streams (one worker, n runs on n CUDA streams), mps (n workers
    under the MPS daemon), replicas (this process, the n runs as replicas of one model: stacked weights, the replicas
    folded into the batch, hlnas.training.replicas; one layout only), replicas_mixed (the same with several layouts
    in one mixed model, hlnas.training.mixed_replicas, each layer's kinds computing their own replicas' rows where an
    order groups them), replicas_mixed_where (every kind on every row, each row's own kept), layout_replicas (a
    worker process per layout, its runs as replicas: the calibration's --replicas), compiled (as processes, each
    run's step under torch.compile: ``score.mqar.compile``), mps_compiled (those under MPS), or ``*_compiled`` of the
    replica modes."""
    from hlnas.search.executors import ProcessExecutor

    compile = mode.endswith("compiled")
    if mode in REPLICA_MODES:
        import torch

        if len(layouts) > 1 and not mode.startswith("replicas_mixed"):
            raise SystemExit(f"{mode} trains one layout; for several use replicas_mixed or layout_replicas")
        import hlnas.recall.replicas as rr

        from hlnas.training.loop import peak_gib

        threads, ranges = torch.get_num_threads(), rr.MIXED_RANGES
        torch.set_num_threads(1)  # as a worker process runs (hlnas.search.executors): on a CPU, one core's work
        rr.MIXED_RANGES = "_where" not in mode  # where: every kind on every row (any slot may change layout)
        try:
            warmup = replicas_round(layouts, n, args, args.warmup_steps, compile).wall  # imports, compiles
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            timed = replicas_round(layouts, n, args, args.steps, compile)
            # the replicated model's peak, in this process (what a calibration unit of these runs needs)
            return timed._replace(peak=peak_gib("cuda" if torch.cuda.is_available() else "cpu"), warmup=warmup)
        finally:
            torch.set_num_threads(threads)
            rr.MIXED_RANGES = ranges
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # the next mode's workers get the memory back

    def specs(steps: int) -> list:
        if mode.startswith("layout_replicas"):
            return _layout_units(layouts, n, args, steps, compile)
        return [recall_spec(i, lay, args, steps, compile) for i, lay in enumerate(run_layouts(layouts, n))]

    with mps_daemon() if mode in ("mps", "mps_compiled") else contextlib.nullcontext():
        workers = len(set(run_layouts(layouts, n))) if mode.startswith("layout_replicas") else n  # a worker per unit
        ex = ProcessExecutor(1, runs_per_worker=n) if mode == "streams" else ProcessExecutor(workers, runs_per_worker=1)
        # each run's torch.compile (a new model per run) is inside the timed window
        try:
            warmup = run_round(ex, specs(args.warmup_steps)).wall  # imports, compiles
            # peak: the largest worker's (each worker is its own process)
            return run_round(ex, specs(args.steps))._replace(warmup=warmup)
        finally:
            ex.shutdown()


def _layouts(spec: str, layers: int) -> list[str]:
    """A ``--layouts`` entry as layout strings: ``mixer[:ratio]`` at the paper placement, ``family:mixer`` (that mixer
    pure and at 24:1, 12:1, 6:1 and 3:1, those that divide ``layers``: the grid's layouts of one mixer), or a layout
    string."""
    from hlnas.model.layout import build_layout

    mixer, _, ratio = spec.partition(":")
    if mixer == "family":  # at a depth the paper's ratios do not all divide, those that do
        return [str(build_layout(ratio, r, layers)) for r in ("pure", "24:1", "12:1", "6:1", "3:1")
                if r == "pure" or layers % int(r.split(":")[0]) == 0]
    return [str(build_layout(mixer, ratio or None, layers)) if mixer.isalpha() and mixer.islower() else spec]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="1,4,12", help="numbers of recall runs at once")
    p.add_argument("--layouts", default="transformer,gla:3:1",
                   help="mixer[:ratio] at --layers, layout strings, or family:mixer (the mixer pure and at 24:1, 12:1, 6:1, "
                        "3:1, those that divide --layers; run i takes the (i mod 5)th)")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--kv-pairs", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=600, help="timed steps per run")
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--checks", type=int, default=6, help="validation checks a run: the clock points of the steady rate")
    p.add_argument("--modes", default="processes,streams,mps,replicas",
                   help="processes: N workers; streams: N runs on N CUDA streams of one worker; mps: N workers under "
                        "NVIDIA's Multi-Process Service (their kernels overlap instead of time-slicing); replicas: the N "
                        "runs as replicas of one model in one process (stacked weights, batch N x --batch); compiled: "
                        "as processes, each run's step under torch.compile (inductor), then captured; mps_compiled: "
                        "compiled under MPS; replicas_compiled: replicas with the compiled step; replicas_mixed(_compiled): "
                        "several layouts as replicas of one mixed model (replicas_mixed_where(_compiled): every kind on every "
                        "row); layout_replicas(_compiled): a worker per layout, "
                        "its runs as replicas (the calibration's --replicas)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend in the compiled modes")
    p.add_argument("--device-name", default=None, help=DEVICE_NAME_HELP)
    p.add_argument("--out", default="experiments/bench")
    args = p.parse_args(argv)

    from hlnas.model.cost import layout_cost
    from hlnas.model.config import preset
    from hlnas.model.layout import Layout
    from hlnas.recall.proxy import recall_model_config

    rows = []

    def write(quiet: bool) -> None:  # after every row: a call cut off by its limit keeps the rows it measured
        write_results(args.out, "proxy_throughput", args.device_name, "Recall-proxy throughput",
                      f"python -m experiments.bench.proxy_throughput {' '.join(sys.argv[1:] if argv is None else argv)}",
                      "Baseline: the same N runs as N worker processes, measured in the same call. ratio = each mode "
                      "/ processes at the same N, over the "
                      "whole round (builds and captures inside); steady: only while every run trained (overlap: that "
                      "window over a run's time between its first and last check).",
                      ["layout", "runs", "mode", f"steps/s (batch-{args.batch} steps, all runs)", "tokens/s", "MFU", "ratio",
                       "steady steps/s", "steady ratio", "overlap", "wall s", "warm-up s", "peak GiB", "note"],
                      lambda r: (r["layout"], r["n_runs"], r["mode"], r["steps_per_s"], f"{r['tokens_per_s']:,}",
                                 f"{100 * r['mfu']:.2f}%", r["ratio"], r["steady_steps_per_s"], r["steady_ratio"],
                                 r["overlap"], r["wall_s"], r.get("warmup_s", ""), r.get("peak_gib", ""), r.get("error", "")), rows, quiet=quiet)

    for spec in args.layouts.split(","):
        layouts = _layouts(spec, args.layers)
        layout = layouts[0] if len(layouts) == 1 else spec
        rcfg = recall_model_config(preset("proxy-gpu"), {"d_model": args.d_model, "n_heads": 2}, args.vocab)
        for n in (int(x) for x in args.runs.split(",")):
            # the runs' mean model FLOPs per step
            flops_step = sum(3 * layout_cost(Layout.parse(lay), rcfg, context=args.seq_len).flops_per_token
                             * args.batch * args.seq_len for lay in run_layouts(layouts, n)) / n
            base = steady_base = None
            for mode in args.modes.split(","):
                try:
                    got = measure(layouts, n, mode, args)
                except (RuntimeError, SystemExit, OSError) as e:  # a mode that cannot run here is a row saying why
                    rows.append({"layout": layout, "n_runs": n, "mode": mode, "steps_per_s": "", "tokens_per_s": 0,
                                 "mfu": 0.0, "ratio": "", "steady_steps_per_s": "", "steady_ratio": "", "overlap": "",
                                 "wall_s": "", "error": " ".join(str(e).split())[:200]})  # one line: a table cell
                    print(rows[-1], flush=True)
                    write(quiet=True)
                    del e
                    release_memory()
                    continue
                sps, (steady, overlap) = n * args.steps / got.wall, steady_rate(got.clocks)
                row = {"layout": layout, "n_runs": n, "mode": mode, "steps_per_s": round(sps, 2),
                       "tokens_per_s": round(sps * args.batch * args.seq_len), "mfu": round(sps * flops_step / PEAK_BF16, 5),
                       "ratio": "", "steady_steps_per_s": "" if steady is None else round(steady, 2), "steady_ratio": "",
                       "overlap": round(overlap, 2), "wall_s": round(got.wall, 2),
                       "peak_gib": "" if got.peak is None else got.peak,
                       "warmup_s": "" if got.warmup is None else round(got.warmup, 1),
                       # runs whose step was not captured train slower: the row says so beside its rate
                       **({"error": f"{got.eager} of {n} runs eager (their CUDA graph was not captured)"} if got.eager else {})}
                if mode == "processes":
                    base, steady_base = sps, steady
                else:
                    row["ratio"] = round(sps / base, 3) if base else ""
                    row["steady_ratio"] = round(steady / steady_base, 3) if steady and steady_base else ""
                rows.append(row)
                print(row, flush=True)
                write(quiet=True)
    write(quiet=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
