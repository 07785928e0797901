"""Helpers shared by the tests: comparisons for kernel and mixer tests, torch threads, a worker killer, the
experiments' paper_grid scripts loaded as modules, a results CSV written, a CUDA graph capture."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import pathlib

import torch


@contextlib.contextmanager
def torch_threads(n: int):
    """torch on ``n`` threads for the block, then as it was (the one_thread fixture, and module fixtures, which run
    before it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (0 when both are zero)."""
    ref64, out64 = ref.detach().double(), out.detach().double()
    denom = ref64.norm().item()
    diff = (out64 - ref64).norm().item()
    return diff / denom if denom > 0 else diff


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, tol: float) -> None:
    """Relative (norm-wise) error below ``tol``; the message prints both errors."""
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{name}: non-finite values"
    err = rel_err(ref, out)
    abs_err = (out.detach().double() - ref.detach().double()).abs().max().item()
    assert err < tol, f"{name}: relative error {err:.3e} >= {tol:.1e} (max abs {abs_err:.3e})"


def assert_runs_close(ref: tuple, out: tuple, tol: float, *, state: str = "final_state", name: str = "") -> None:
    """Two ``(o, final_state, {input: grad})`` runs (:func:`forward_and_grads`): the output, the final state and every
    gradient of ``ref`` within ``tol`` (``state`` names the state in messages, ``name`` prefixes them all)."""
    (o_ref, s_ref, g_ref), (o, s, g) = ref, out
    assert_close(f"{name}o", o_ref, o, tol)
    assert_close(f"{name}{state}", s_ref, s, tol)
    for n in g_ref:
        assert_close(f"{name}d{n}", g_ref[n], g[n], tol)


def assert_decode_matches_parallel(op, inputs: dict, state, tol: float = 1e-10) -> None:
    """One call of ``op`` over all T tokens of ``inputs`` (``[B, T, ...]`` each) == a call over a prefix, then one token
    at a time carrying its final state (``state``: the initial one, or None)."""
    T = next(iter(inputs.values())).shape[1]
    full, s_full = op(**inputs, initial_state=state, output_final_state=True)
    P = T // 2 + 3
    cut = lambda lo, hi: {n: t[:, lo:hi] for n, t in inputs.items()}  # noqa: E731
    o, state = op(**cut(0, P), initial_state=state, output_final_state=True)
    parts = [o]
    for t in range(P, T):
        o, state = op(**cut(t, t + 1), initial_state=state, output_final_state=True)
        parts.append(o)
    assert_close("decode o", full, torch.cat(parts, 1), tol)
    assert_close("decode state", s_full, state, tol)


def forward_and_grads(fn, inputs: dict, const=(), **kw):
    """Run a state-returning op and differentiate it.

    Calls ``fn(**inputs, output_final_state=True, **kw) -> (o, final_state)`` on fresh leaf copies,
    then takes gradients of <o, do> + <S, dS> (fixed random cotangents) for every input not named
    in ``const``. Returns ``(o, final_state, {name: grad})``.
    """
    leaves = {n: t.detach().clone().requires_grad_(n not in const) for n, t in inputs.items()}
    o, ht = fn(**leaves, output_final_state=True, **kw)
    gen = torch.Generator(device="cpu").manual_seed(2)
    do = torch.randn(o.shape, generator=gen).to(o)
    dht = torch.randn(ht.shape, generator=gen).to(ht)
    wrt = [n for n in leaves if n not in const]
    grads = torch.autograd.grad((o * do).sum() + (ht * dht).sum(), [leaves[n] for n in wrt])
    return o, ht, dict(zip(wrt, grads))


def captured_replay(fn, *leaves: torch.Tensor):
    """``fn(*leaves)`` captured in a CUDA graph and replayed, on fresh copies of ``leaves`` first used on the capture's
    own side stream (warm-up there, then capture on it). Autograd remembers the stream a leaf was first used on and
    makes the capture wait on it at the end of backward: leaves already used on the default stream (an eager run to
    compare with) invalidate the capture (pytorch #164302), as the first run of two such tests on an H100 showed."""
    fresh = tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in leaves)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*fresh)  # warm-up, as a capture wants
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = fn(*fresh)
    graph.replay()
    torch.cuda.synchronize()
    return out


def kill_first_worker_at_next_start(seen: dict):
    """A search ``on_event`` hook: once a trial finishes, SIGKILL the worker process that ran it as soon as
    the next trial starts (on the same worker when there is one). Fills ``seen`` with "pid" and "killed"
    (the trial number that was running when the worker died)."""
    import os
    import signal

    def on_event(kind, data):
        if kind == "finished" and "pid" not in seen:
            seen["pid"] = data["metrics"]["worker_pid"]
        elif kind == "started" and "pid" in seen and "killed" not in seen:
            seen["killed"] = data["number"]
            os.kill(seen["pid"], signal.SIGKILL)

    return on_event


def paper_grid_script(name: str):
    """``experiments/paper_grid/<name>.py`` loaded as a module (the scripts are run by path, not installed)."""
    path = pathlib.Path(__file__).parents[1] / "experiments" / "paper_grid" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"paper_grid_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_csv(path, rows: list[dict]) -> str:
    """``rows`` as a CSV at ``path`` (the columns: every key, in first-seen order), as collect.py writes its tables;
    returns the path."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    return str(path)


def filling_up(limit: int):
    """A stand-in for ``open`` (monkeypatched into the module under test): a real file whose writes past ``limit`` bytes fail with ENOSPC, as a full
    disk fails them."""
    import errno
    import os

    class FillsUp:
        def __init__(self, name, mode="r", *args, **kwargs):
            self.f, self.n = open(name, mode, *args, **kwargs), 0

        def write(self, b):
            if self.n + len(b) > limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.n += len(b)
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    return FillsUp
