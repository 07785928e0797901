"""Comparison helpers shared by kernel and mixer tests."""

from __future__ import annotations

import torch


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
