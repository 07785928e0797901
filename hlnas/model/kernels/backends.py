"""Which path each sequence op runs, and every call into flash-linear-attention (fla).

The only module of :mod:`hlnas.model.kernels` that imports fla (tests/kernels/test_backends.py checks it);
the op modules keep their PyTorch paths and ask :func:`route` which one a call takes:

1. the ``backend=`` argument, else a :func:`use_backend` block, else ``HLNAS_KERNEL_BACKEND``
   (``auto`` | ``fla`` | ``torch``), else ``auto``; ``torch``, or an op named in ``HLNAS_TORCH_OPS``,
   takes the PyTorch path;
2. tensors off CUDA, or fla not importable (probed once per process): PyTorch, or
   :class:`~hlnas.errors.KernelUnavailable` where ``fla`` was asked for explicitly;
3. the op's :data:`RULES`, in order: faults of fla's kernels found on Hopper (sm90). The first that refuses
   sends the call to PyTorch (an explicit ``fla`` too) and its reason is logged once per process.

``fla_<op>`` then calls fla's kernel with the arguments adapted (float32 states, the fused recurrent
kernel for short or grad-free calls, dtype casts). Fallback warnings go to the ``hlnas.model.kernels`` logger.

Compile time: fla autotunes every Triton kernel over dozens of configs, and a cold compile of one mixer
took up to 6 minutes on a Hopper GPU. ``HLNAS_TRITON_AUTOTUNE=quick`` keeps one
config per kernel (num_warps nearest 4, num_stages nearest 2) so kernels compile in seconds, at some
cost in kernel speed; for short GPU leases where compiling would eat the budget.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from hlnas.errors import KernelUnavailable

__all__ = [
    "BACKENDS", "RULES", "Rule", "route", "resolve_backend", "fla_status", "use_backend", "warn_once", "needs_grad",
    "FLA_MIN_HEAD_DIM", "gated_backward_verdict", "fla_gated_backward_ok", "simple_gla_gated_backward_ok",
    "tilelang_usable", "probe_process", "kernel_paths", "kernel_fallbacks",
   
   
    "quick_autotune",
]

log = logging.getLogger("hlnas.model.kernels")

BACKENDS = ("auto", "fla", "torch")
_override: str | None = None
_logged: set[str] = set()
_taken: set[tuple[str, str]] = set()  # (op, path) of every routed call in this process: kernel_paths()


# -- the backend asked for, and whether fla can run at all -------------------------------------------
def _process_fact(fn: Callable[[], tuple[bool, str]]) -> Callable[[], tuple[bool, str]]:
    """A fact about this process that routing reads on every op call (is fla importable? is TileLang usable?):
    computed once, eagerly, and kept in a plain dict.

    Not ``functools.cache``: dynamo ignores a cache wrapper and traces the function inside, so every compiled recall
    model probed again while being traced, and importing fla inside the trace failed (fla's version check). Every op
    then went to the PyTorch kernels (on a GPU: each compiled run of a K=128 recall probe, and a compiled 10-run
    mixed model, which ran out of memory on them). Met first inside a trace, the probe still runs eagerly (one graph
    break, once); :func:`probe_process` runs every probe before anything compiles."""
    facts: dict[str, tuple[bool, str]] = {}
    eager = torch.compiler.disable(fn)

    @functools.wraps(fn)
    def fact() -> tuple[bool, str]:
        if "answer" not in facts:
            facts["answer"] = eager()
        return facts["answer"]

    fact.forget = facts.clear  # tests: probe again
    return fact


@_process_fact
def fla_status() -> tuple[bool, str]:
    """(importable, reason). Importing fla takes seconds (17 s measured on a GPU host), so only once."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        # the import is the probe (find_spec would miss triton failing as fla.ops loads); the module itself is unused
        importlib.import_module("fla.ops")
    except Exception as e:  # ImportError, or triton failing to find a driver
        return False, f"fla cannot be imported: {type(e).__name__}: {e}"
    return True, "ok"


def probe_process() -> None:
    """Every process fact the routing reads, probed now, eagerly: call it before ``torch.compile`` (hlnas's
    ``compile_module`` does), so no trace meets a probe."""
    if fla_status()[0]:
        tilelang_usable()


def resolve_backend(op: str, x: Tensor, backend: str | None = None) -> str:
    """Return 'fla' or 'torch' for running ``op`` on tensors like ``x`` (steps 1-2, not the op's rules)."""
    choice = backend or _override or os.environ.get("HLNAS_KERNEL_BACKEND", "auto")
    if choice not in BACKENDS:
        raise KernelUnavailable(op, choice, f"unknown backend; allowed: {', '.join(BACKENDS)}")
    if choice == "torch" or op in _torch_ops():
        return "torch"
    if not x.is_cuda:
        if choice == "fla":
            raise KernelUnavailable(op, "fla", f"tensors are on {x.device}; fla's Triton kernels need CUDA")
        return "torch"
    ok, reason = fla_status()
    if ok:
        return "fla"
    if choice == "fla":
        raise KernelUnavailable(op, "fla", reason)
    warn_once(f"using the PyTorch kernels on CUDA: {reason}")
    return "torch"


def warn_once(message: str) -> None:
    """Log a kernel-path warning once per process (a fallback is chosen on every call of an op)."""
    if message not in _logged:
        _logged.add(message)
        log.warning(message)


def kernel_fallbacks() -> list[str]:
    """Every kernel-path warning this process has given (an op sent from fla to the PyTorch kernels on CUDA, and why),
    sorted. Results record it beside their numbers: a bug had sent every op of a series of compiled recall-only probe
    runs (the delta-rule probes) to the PyTorch kernels, told only in a log line."""
    return sorted(_logged)


def _torch_ops() -> set[str]:
    """``HLNAS_TORCH_OPS=simple_gla,...``: ops kept on the PyTorch path even on CUDA (a kernel under suspicion)."""
    return {o.strip() for o in os.environ.get("HLNAS_TORCH_OPS", "").split(",") if o.strip()}


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend inside a block (tests, benchmarks)."""
    global _override
    if name not in BACKENDS:
        raise KernelUnavailable("*", name, f"unknown backend; allowed: {', '.join(BACKENDS)}")
    old, _override = _override, name
    try:
        yield
    finally:
        _override = old


# -- per op: when fla is refused -----------------------------------------------------------------------
def needs_grad(*tensors: Tensor | None) -> bool:
    """Whether autograd will want a backward through a call on these tensors."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


FLA_CONV_MAX_WIDTH = 4  # fla's causal_conv1d: its layers' short convs are width 4 (its CUDA backend takes 2-4)
FLA_MIN_HEAD_DIM = 64  # smallest key head dim whose fla kernels passed on Hopper (sm90; _simple_gla_head_dim)


@dataclass(frozen=True)
class Rule:
    """One reason for an op to refuse fla: ``verify(**inputs) -> (ok, reason)`` reads the call's tensors by
    name. ``says`` leads the once-logged warning when it refuses (``"<op>: <says>: <reason>"``); None
    refuses silently."""

    verify: Callable[..., tuple[bool, str]]
    says: str | None = "using the PyTorch kernel instead of fla"


_BOTH = "using the PyTorch kernel (forward and backward) instead of fla"


def _not_float64(**inputs: Tensor | None) -> tuple[bool, str]:
    # fla's Triton kernels take 16/32-bit floats; float64 (tests) always runs the PyTorch path (the leading tensor's
    # dtype: q, or the conv's x)
    return next(iter(inputs.values())).dtype != torch.float64, "fla's kernels take 16/32-bit floats, not float64"


def _simple_gla_head_dim(q: Tensor, **_) -> tuple[bool, str]:
    if q.shape[-1] < FLA_MIN_HEAD_DIM:
        # on Hopper (sm90; triton 3.6, fla 0.6.0) fla's chunk_simple_gla backward hit an illegal memory access
        # with RetNet's key heads of 16 and 32 (a 128- and a 256-wide model); only K >= 64 passed the check
        return False, f"key head dim {q.shape[-1]} < {FLA_MIN_HEAD_DIM} faulted in fla's kernel on Hopper"
    return True, f"key head dim {q.shape[-1]} >= {FLA_MIN_HEAD_DIM}"


def _simple_gla_gated_backward(q, k, v, g=None, g_gamma=None, initial_state=None) -> tuple[bool, str]:
    grad = needs_grad(q, k, v, g, g_gamma, initial_state)
    if grad and (g is not None or (g_gamma is not None and g_gamma.requires_grad)):
        # a gated backward (a data-dependent g, or a learned g_gamma passed as g) runs fla's gated
        # chunk_bwd_dqkwg, which gives wrong results on Hopper with triton < 3.7.1 (fla #640)
        return simple_gla_gated_backward_ok(q.dtype)
    return True, "no gated backward"


def _gated_delta_rule_backward(q, k, v, g, beta, initial_state=None) -> tuple[bool, str]:
    # forward-only calls still use fla, whose forward is unaffected by fla #640
    if needs_grad(q, k, v, g, beta, initial_state):
        return fla_gated_backward_ok()
    return True, "no gradient needed"


def _conv_without_state(x: Tensor, weight: Tensor, initial_state: Tensor | None = None,
                        output_final_state: bool = False) -> tuple[bool, str]:
    # fla keeps a conv state as [N, C, K] and hlnas's decode cache as the last K - 1 inputs [B, K - 1, C]: decoding
    # (a few tokens a call) stays on PyTorch, training and prefill without a cache take fla's kernel
    if initial_state is not None or output_final_state:
        return False, "a decode state in or out stays on the PyTorch path"
    if not 2 <= weight.shape[-1] <= FLA_CONV_MAX_WIDTH:  # the widths fla's own layers use; wider ones never ran here
        return False, f"conv width {weight.shape[-1]} outside 2..{FLA_CONV_MAX_WIDTH}"
    return True, "no decode state, a width fla's layers use"


def _not_compiling(**_) -> tuple[bool, str]:
    # inside torch.compile fla's kernel would break the graph; the PyTorch path's shifted multiply-adds fuse there
    return not torch.compiler.is_compiling(), "under torch.compile"


#: op -> the rules a call must pass to run on fla, checked in order (ops not listed have none).
RULES: dict[str, tuple[Rule, ...]] = {
    "causal_conv1d": (Rule(_conv_without_state, None), Rule(_not_float64, None), Rule(_not_compiling, None)),
    "l2norm": (Rule(_not_float64, None), Rule(_not_compiling, None)),
    "simple_gla": (Rule(_simple_gla_head_dim), Rule(_simple_gla_gated_backward, _BOTH)),
    "delta_rule": (Rule(_not_float64, None),),
    "gated_delta_rule": (Rule(_not_float64, None), Rule(_gated_delta_rule_backward, _BOTH)),
    "kda": (Rule(_not_float64, None),),
    "rwkv7": (Rule(_not_float64, None),),
}


def route(op: str, backend: str | None = None, /, **inputs: Tensor | None) -> str:
    """'fla' or 'torch' for one call of ``op``: :func:`resolve_backend`, then the op's :data:`RULES`.

    ``inputs``: the call's tensors by the op's argument names, its leading one first (q, or hgrn's x:
    the tensor whose device decides).
    """
    path = _route(op, backend, inputs)
    if (op, path) not in _taken:
        _taken.add((op, path))
    return path


def _route(op: str, backend: str | None, inputs: dict) -> str:
    if resolve_backend(op, next(iter(inputs.values())), backend) == "torch":
        return "torch"
    for rule in RULES.get(op, ()):
        ok, reason = rule.verify(**inputs)
        if not ok:
            if rule.says:
                warn_once(f"{op}: {rule.says}: {reason}")
            return "torch"
    return "fla"


def kernel_paths() -> dict[str, str]:
    """``{op: path}`` of every op this process has routed ("fla", "torch", or "fla+torch" where calls went both
    ways): what a result ran on. A recall protocol's results depend on it (fla's and the PyTorch kernels round
    differently, and a deep recall model's take-off can turn on that), so results record it beside their numbers."""
    paths: dict[str, set[str]] = {}
    for op, path in _taken:
        paths.setdefault(op, set()).add(path)
    return {op: "+".join(sorted(p)) for op, p in sorted(paths.items())}


# -- can fla's gated backward run here? (fla issue #640) ------------------------------------------------
def gated_backward_verdict(capability: tuple[int, int] | None, triton_version: str | None,
                           tilelang: tuple[bool, str],
                           remedy: str = "`pip install tilelang` (needs nvcc), or triton >= 3.7.1") -> tuple[bool, str]:
    """(ok, reason) from the facts alone: fla 0.6 refuses the gated chunk_bwd_dqkwg on Hopper (sm 9.x)
    with 3.4.0 <= triton < 3.7.1 (fla/ops/common/chunk_o.py, fla issue #640) unless TileLang takes it over."""
    if capability is None or capability[0] != 9:
        return True, f"not a Hopper GPU (capability {capability})"
    tv = _version_tuple(triton_version)
    if tv is None or not ((3, 4, 0) <= tv < (3, 7, 1)):
        return True, f"triton {triton_version} is outside the affected range [3.4.0, 3.7.1)"
    usable, why = tilelang
    if usable:
        return True, f"fla's TileLang backend handles the gated backward ({why})"
    return False, (
        f"fla's gated backward (chunk_bwd_dqkwg) raises on Hopper (sm {capability[0]}{capability[1]}) with triton "
        f"{triton_version} (fla issue #640) and its TileLang backend is unavailable: {why}. "
        f"Remedy: {remedy}"
    )


def fla_gated_backward_ok() -> tuple[bool, str]:
    """Probe this process (CUDA capability, triton version, TileLang) and return the verdict."""
    return gated_backward_verdict(_cuda_capability(), _triton_version(), tilelang_usable())


def simple_gla_gated_backward_ok(dtype: torch.dtype) -> tuple[bool, str]:
    """:func:`fla_gated_backward_ok` for simple_gla's gated backward on inputs of ``dtype``. fla's TileLang backend
    takes it only in float32: its verifier wants the states in q's dtype, and simple_gla's backward keeps them in
    float32 (fla/ops/common/backends/tilelang/__init__.py). On Hopper with tilelang 0.1.15 installed, bf16 calls
    went to the Triton kernel, which raised fla #640."""
    if dtype == torch.float32:
        return fla_gated_backward_ok()
    tilelang = (False, f"fla's TileLang backend takes simple_gla's gated backward only for float32 inputs "
                       f"(simple_gla keeps its states in float32), not {str(dtype).removeprefix('torch.')}")
    return gated_backward_verdict(_cuda_capability(), _triton_version(), tilelang, remedy="triton >= 3.7.1")


def _version_tuple(version: str | None) -> tuple[int, int, int] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return None if m is None else (int(m[1]), int(m[2]), int(m[3] or 0))


def _cuda_capability() -> tuple[int, int] | None:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:
        return None
    return triton.__version__


@_process_fact
def tilelang_usable() -> tuple[bool, str]:
    """Whether fla would route the gated backward to TileLang: the same checks as fla's dispatch."""
    if importlib.util.find_spec("tilelang") is None:
        return False, "the tilelang package is not installed"
    if os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        return False, "FLA_DISABLE_BACKEND_DISPATCH=1 turns fla's backends off"
    try:
        from fla.ops.common.backends.tilelang import CommonTileLangBackend
    except Exception as e:
        return False, f"fla's TileLang backend cannot be imported: {type(e).__name__}: {e}"
    if not CommonTileLangBackend.is_available():
        return False, "tilelang is installed but fla finds no usable nvcc (set CUDA_HOME)"
    if not CommonTileLangBackend().is_enabled():
        return False, "fla's TileLang backend is disabled (FLA_TILELANG=0)"
    return True, "tilelang installed and enabled"


# -- compile time ------------------------------------------------------------------------------------
def quick_autotune() -> bool:
    """Make Triton's autotuner try one config per kernel (see the module docstring). Idempotent."""
    try:
        from triton.runtime import autotuner
    except Exception:  # no triton: nothing to tune
        return False
    if getattr(autotuner.Autotuner.prune_configs, "_hlnas_quick", False):
        return True
    full = autotuner.Autotuner.prune_configs

    def prune_configs(self, kwargs, *args, **kw):
        configs = full(self, kwargs, *args, **kw)
        if len(configs) <= 1:
            return configs
        return [min(configs, key=lambda c: (abs((c.num_warps or 4) - 4), abs((c.num_stages or 2) - 2)))]

    prune_configs._hlnas_quick = True
    autotuner.Autotuner.prune_configs = prune_configs
    log.info("HLNAS_TRITON_AUTOTUNE=quick: one Triton config per kernel")
    return True


if os.environ.get("HLNAS_TRITON_AUTOTUNE") == "quick":
    quick_autotune()
