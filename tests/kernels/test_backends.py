"""hlnas.model.kernels.backends: which path a call takes (the backend asked for, the per-op rules that refuse fla,
each given faked facts) and the arguments each fla_<op> hands fla's kernels, checked on CPU with the
kernels replaced by spies bound to their real signatures; on CUDA, every fla kernel each fla_<op> can
take, against the PyTorch path. Why each rule exists: the comments beside it in backends.py."""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import logging
import pathlib
from types import SimpleNamespace

import pytest
import torch

import hlnas.model.kernels as kernels
import hlnas.model.kernels.backends as backends
import hlnas.model.kernels.fla_calls as fla_calls
from hlnas.errors import KernelUnavailable
from hlnas.model.kernels import OPS
from tests.helpers import assert_close
from tests.kernels.inputs import make_inputs

CUDA_X = SimpleNamespace(is_cuda=True, device=torch.device("cuda", 0))  # what resolve_backend reads of a tensor
#: op -> fla's kernels its fla_<op> may call, the chunked one first
FLA_KERNELS = {op: (f"fla.ops.{op}", (f"chunk_{op}", f"fused_recurrent_{op}"))
               for op in ("hgrn", "gla", "simple_gla", "delta_rule", "gated_delta_rule", "kda", "rwkv7")}


@pytest.fixture
def clean(monkeypatch):
    """No backend set by the environment or a use_backend block; no fallback warning given yet."""
    monkeypatch.delenv("HLNAS_KERNEL_BACKEND", raising=False)
    monkeypatch.delenv("HLNAS_TORCH_OPS", raising=False)
    monkeypatch.setattr(backends, "_override", None)
    monkeypatch.setattr(backends, "_logged", set())
    monkeypatch.setattr(backends, "fla_status", lambda: (True, "ok"))
    return monkeypatch


def test_only_backends_and_fla_calls_import_fla():
    """fla is imported in two places: where the path is chosen (its import probe) and where its ops are called."""
    found = []
    for path in pathlib.Path(kernels.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                names = [str(node.args[0].value)] if getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "import_module", "__import__", "find_spec") else []
            found += [f"{path.name}: {n}" for n in names if n == "fla" or n.startswith("fla.")]
    assert found and all(f.startswith(("backends.py:", "fla_calls.py:")) for f in found), found


def test_rules_name_real_ops():
    assert set(backends.RULES) <= set(OPS)  # a misspelt key would drop an op's rules without a word


# -- the backend asked for -------------------------------------------------------------------------------
@pytest.mark.parametrize("arg, block, env, want", [
    (None, None, None, "fla"),  # auto on CUDA with fla importable
    (None, None, "torch", "torch"),
    (None, "fla", "torch", "fla"),  # a use_backend block beats the environment
    ("torch", "fla", "fla", "torch"),  # the argument beats both
    ("fla", "torch", "torch", "fla"),
    ("auto", "torch", "torch", "fla"),
])
def test_argument_then_block_then_environment(clean, arg, block, env, want):
    if env:
        clean.setenv("HLNAS_KERNEL_BACKEND", env)
    with backends.use_backend(block) if block else contextlib.nullcontext():
        assert backends.resolve_backend("gla", CUDA_X, arg) == want


def test_use_backend_restores_on_error(clean):
    with pytest.raises(ZeroDivisionError), backends.use_backend("torch"):
        1 / 0
    assert backends._override is None and backends.resolve_backend("gla", CUDA_X) == "fla"


UNKNOWN = "cannot use backend 'cuda': unknown backend; allowed: auto, fla, torch"


@pytest.mark.parametrize("how", ["argument", "environment", "block"])
def test_unknown_backend_names_the_allowed_ones(clean, how):
    if how == "block":
        with pytest.raises(KernelUnavailable, match=rf"kernel '\*' {UNKNOWN}"), backends.use_backend("cuda"):
            pass
        return
    if how == "environment":
        clean.setenv("HLNAS_KERNEL_BACKEND", "cuda")
    clean.setenv("HLNAS_TORCH_OPS", "gla")  # checked before an op is sent to PyTorch
    with pytest.raises(KernelUnavailable, match=f"kernel 'gla' {UNKNOWN}"):
        backends.resolve_backend("gla", CUDA_X, "cuda" if how == "argument" else None)


def test_torch_ops_keep_named_ops_on_pytorch_even_when_fla_is_asked_for(clean):
    clean.setenv("HLNAS_TORCH_OPS", " simple_gla, gla ,")
    assert backends.resolve_backend("gla", CUDA_X, "fla") == "torch"
    assert backends.resolve_backend("simple_gla", CUDA_X) == "torch"
    assert backends.resolve_backend("hgrn", CUDA_X) == "fla"


def test_cpu_tensors(clean):
    x = torch.zeros(1)
    assert backends.resolve_backend("gla", x) == "torch"
    with pytest.raises(KernelUnavailable, match="tensors are on cpu; fla's Triton kernels need CUDA"):
        backends.resolve_backend("gla", x, "fla")
    clean.setenv("HLNAS_KERNEL_BACKEND", "fla")
    with pytest.raises(KernelUnavailable, match="tensors are on cpu"):
        backends.resolve_backend("gla", x)


def test_fla_not_importable(clean, caplog):
    clean.setattr(backends, "fla_status", lambda: (False, "fla cannot be imported: ImportError: no triton"))
    with caplog.at_level(logging.WARNING, logger="hlnas.model.kernels"):
        assert backends.resolve_backend("gla", CUDA_X) == "torch"
        assert backends.resolve_backend("hgrn", CUDA_X) == "torch"
    assert [r.getMessage() for r in caplog.records] == [
        "using the PyTorch kernels on CUDA: fla cannot be imported: ImportError: no triton"]
    with pytest.raises(KernelUnavailable, match="cannot use backend 'fla': fla cannot be imported: ImportError: no triton"):
        backends.resolve_backend("gla", CUDA_X, "fla")


def test_fla_status_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine")
    assert backends.fla_status() == (False, "no CUDA device")


def test_a_process_fact_met_inside_a_compiled_function_is_probed_once_and_eagerly(monkeypatch):
    """Dynamo traces through ``functools.cache``, and importing fla inside the trace failed, which sent every op of a
    compiled recall model to the PyTorch kernels (H100, 2026-12-06). A process fact is probed outside any trace, once,
    and the compiled function reads its answer; the compile wrapper probes every fact before compiling."""
    from hlnas.training import step

    seen = []

    @backends._process_fact
    def probe():
        seen.append(torch.compiler.is_compiling())  # True inside a trace: what an import there would run under
        return True, "ok"

    def f(x):
        ok, _ = probe()
        return x + 1 if ok else x - 1

    compiled = torch.compile(f, backend="eager")
    assert torch.equal(compiled(torch.zeros(3)), torch.ones(3)) and torch.equal(compiled(torch.ones(3)), 2 * torch.ones(3))
    assert seen == [False]
    probed = []
    monkeypatch.setattr(backends, "fla_status", lambda: probed.append("fla") or (True, "ok"))
    monkeypatch.setattr(backends, "tilelang_usable", lambda: probed.append("tilelang") or (True, "ok"))
    monkeypatch.setattr(torch, "compile", lambda m, **kw: probed.append("compile") or m)
    step.compile_module(torch.nn.Linear(2, 2))
    assert probed == ["fla", "tilelang", "compile"]


# -- the per-op rules, given faked facts -----------------------------------------------------------------
@pytest.fixture
def on_fla(clean):
    """resolve_backend says fla, as on a GPU machine; the #640 verdict counts its calls and says no."""
    clean.setattr(backends, "resolve_backend", lambda *a, **k: "fla")
    asked = []
    clean.setattr(backends, "fla_gated_backward_ok", lambda: asked.append(1) or (False, "Hopper, triton 3.6.0 (#640)"))
    return asked


def _inputs(op, T=8, K=64, dtype=torch.float32, grad=(), **kw):
    inp = make_inputs(op, 1, T, 2, K, 16, dtype=dtype, **kw)
    if "initial_state" in grad:
        inp["initial_state"] = torch.zeros(1, 2, K, 16, dtype=dtype)
    for name in grad:
        inp[name].requires_grad_()
    return inp


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "hlnas.model.kernels"]


@pytest.mark.parametrize("K, want", [(16, "torch"), (32, "torch"), (63, "torch"), (64, "fla"), (128, "fla")])
def test_simple_gla_small_key_heads_stay_on_pytorch(on_fla, caplog, K, want):
    inp = _inputs("simple_gla", K=K, decay="g_gamma")
    with caplog.at_level(logging.WARNING):
        assert backends.route("simple_gla", "fla", **inp) == want
        assert backends.route("simple_gla", "fla", **inp) == want
    expect = [f"simple_gla: using the PyTorch kernel instead of fla: key head dim {K} < 64 faulted in fla's kernel on Hopper"]
    assert _warnings(caplog) == (expect if want == "torch" else [])  # once, however many calls


@pytest.mark.parametrize("decay, grad, no_grad, asks", [
    ("g", ("q",), False, True),  # Mamba-2 training: a gated backward
    ("g", ("initial_state",), False, True),  # a gradient through the state alone is one too
    ("g", ("q",), True, False),  # under no_grad: forward only, fla's forward is fine
    ("g", (), False, False),
    ("g_gamma", ("q", "k", "v"), False, False),  # RetNet: a constant g_gamma, no gated backward
    ("g_gamma", ("g_gamma",), False, True),  # a learned g_gamma is handed to fla as a g
    ("none", ("q",), False, False),
])
@pytest.mark.parametrize("verdict", [False, True])
def test_simple_gla_gated_backward(on_fla, clean, caplog, decay, grad, no_grad, asks, verdict):
    clean.setattr(backends, "fla_gated_backward_ok", lambda: on_fla.append(1) or (verdict, "Hopper, triton 3.6.0 (#640)"))
    inp = _inputs("simple_gla", decay=decay, grad=grad)
    with caplog.at_level(logging.WARNING), torch.set_grad_enabled(not no_grad):
        got = backends.route("simple_gla", None, **inp)
    assert len(on_fla) == asks
    assert got == ("torch" if asks and not verdict else "fla")
    assert _warnings(caplog) == (["simple_gla: using the PyTorch kernel (forward and backward) instead of fla: "
                                  "Hopper, triton 3.6.0 (#640)"] if got == "torch" else [])


@pytest.mark.parametrize("dtype, want", [(torch.bfloat16, "torch"), (torch.float16, "torch"), (torch.float32, "fla")])
def test_tilelang_rescues_simple_glas_gated_backward_only_in_float32(clean, caplog, dtype, want):
    """Found on the H200 with tilelang installed: fla's TileLang backend took GatedDeltaNet's gated backward but
    refused simple_gla's in bf16 (its states are float32), and fla's Triton kernel then raised #640."""
    clean.setattr(backends, "resolve_backend", lambda *a, **k: "fla")
    clean.setattr(backends, "_cuda_capability", lambda: (9, 0))
    clean.setattr(backends, "_triton_version", lambda: "3.6.0")
    clean.setattr(backends, "tilelang_usable", lambda: (True, "tilelang installed and enabled"))
    inp = _inputs("simple_gla", dtype=dtype, decay="g", grad=("q",))
    with caplog.at_level(logging.WARNING):
        assert backends.route("simple_gla", None, **inp) == want
        assert backends.route("gated_delta_rule", None, **_inputs("gated_delta_rule", dtype=dtype, grad=("q",))) == "fla"
    if want == "torch":
        (msg,) = _warnings(caplog)
        assert msg.startswith("simple_gla: using the PyTorch kernel (forward and backward) instead of fla: fla's gated "
                              "backward (chunk_bwd_dqkwg) raises on Hopper (sm 90) with triton 3.6.0")
        assert f"only for float32 inputs (simple_gla keeps its states in float32), not {str(dtype)[6:]}" in msg
        assert msg.endswith("Remedy: triton >= 3.7.1")  # tilelang is there already
    else:
        assert _warnings(caplog) == []
    clean.setattr(backends, "_cuda_capability", lambda: (8, 0))  # an A100: no #640, any dtype runs fla
    assert backends.route("simple_gla", None, **inp) == "fla"


@pytest.mark.parametrize("op", ["delta_rule", "gated_delta_rule"])
@pytest.mark.parametrize("dtype, want", [(torch.float64, "torch"), (torch.float32, "fla"), (torch.bfloat16, "fla")])
def test_delta_rules_run_float64_on_pytorch_silently(on_fla, caplog, op, dtype, want):
    inp = _inputs(op, dtype=dtype, grad=("q",) if dtype == torch.float64 else ())
    with caplog.at_level(logging.WARNING):
        assert backends.route(op, "fla", **inp) == want
    assert _warnings(caplog) == [] and on_fla == []  # float64 is decided before the #640 probe


@pytest.mark.parametrize("grad, no_grad, asks", [
    (("q",), False, True), (("beta",), False, True), (("g",), False, True), (("initial_state",), False, True),
    (("q", "k", "v", "g", "beta"), True, False), ((), False, False)])
def test_gated_delta_rule_backward(on_fla, caplog, grad, no_grad, asks):
    inp = _inputs("gated_delta_rule", dtype=torch.bfloat16, grad=grad)
    with caplog.at_level(logging.WARNING), torch.set_grad_enabled(not no_grad):
        got = backends.route("gated_delta_rule", None, **inp)
    assert (got, len(on_fla)) == (("torch", 1) if asks else ("fla", 0))
    assert _warnings(caplog) == (["gated_delta_rule: using the PyTorch kernel (forward and backward) instead of fla: "
                                  "Hopper, triton 3.6.0 (#640)"] if asks else [])


def test_rules_run_only_on_the_fla_route(clean):
    clean.setattr(backends, "fla_gated_backward_ok", lambda: pytest.fail("probed for a PyTorch call"))
    inp = _inputs("gated_delta_rule", grad=("q",))
    assert backends.route("gated_delta_rule", "torch", **inp) == "torch"
    assert backends.route("gated_delta_rule", None, **inp) == "torch"  # CPU tensors


def test_the_leading_input_decides_the_device(clean):
    inp = _inputs("hgrn")
    assert backends.route("hgrn", None, **inp) == "torch"
    assert backends.route("hgrn", None, x=CUDA_X, g=inp["g"]) == "fla"  # hgrn has no rules


# -- the arguments fla's kernels get ----------------------------------------------------------------------
@pytest.fixture
def spies(monkeypatch):
    """Replace every fla kernel the fla_<op> functions call by a spy: it binds the call to the kernel's real
    signature (a wrong keyword fails here) and returns float32 zeros shaped like v (hgrn: x), no state."""
    calls = []
    for module, names in FLA_KERNELS.values():
        mod = pytest.importorskip(module)
        for name in names:
            sig = inspect.signature(getattr(mod, name))

            def spy(*a, _name=name, _sig=sig, **kw):
                calls.append((_name, _sig.bind(*a, **kw).arguments))
                return torch.zeros((a[2] if len(a) > 2 else a[0]).shape), None

            monkeypatch.setattr(mod, name, spy)
    return calls


def _call(fn, op, spies, T, dtype=torch.bfloat16, grad=False, no_grad=False, h0=False, **kw):
    inp = make_inputs(op, 1, T, 2, 64, 16, dtype=dtype, **{k: kw.pop(k) for k in ("decay",) if k in kw})
    if h0:
        inp["initial_state"] = torch.zeros((1, 128) if op == "hgrn" else (1, 2, 64, 16), dtype=dtype)
    for t in inp.values():
        t.requires_grad_(grad)
    with torch.set_grad_enabled(not no_grad):
        out = fn(**inp, **kw)
    (name, args), = spies
    return name, args, inp, out


@pytest.mark.parametrize("T, grad, no_grad, final, h0, kernel", [
    (100, True, False, False, False, "chunk_hgrn"),
    (100, False, True, True, True, "chunk_hgrn"),
    (64, False, True, True, False, "fused_recurrent_hgrn"),  # decode
    (100, True, False, True, False, "fused_recurrent_hgrn"),  # chunk_hgrn drops dht
    (100, True, False, False, True, "fused_recurrent_hgrn"),  # and dh0
])
def test_fla_hgrn(spies, T, grad, no_grad, final, h0, kernel):
    name, args, inp, (o, _) = _call(fla_calls.fla_hgrn, "hgrn", spies, T, grad=grad, no_grad=no_grad, h0=h0,
                                    output_final_state=final)
    assert name == kernel and args["output_final_state"] is final
    fused = kernel.startswith("fused")  # its state is kept in x's dtype: it runs in float32, o cast back
    assert args["x"].dtype == args["g"].dtype == (torch.float32 if fused else torch.bfloat16)
    assert o.dtype == torch.bfloat16 or not fused
    assert (args["initial_state"].dtype == torch.float32) if h0 else args.get("initial_state") is None


@pytest.mark.parametrize("T, kernel, gate", [(64, "fused_recurrent_gla", "gk"), (65, "chunk_gla", "g")])
def test_fla_gla(spies, T, kernel, gate):
    name, args, inp, _ = _call(fla_calls.fla_gla, "gla", spies, T, grad=True, h0=True, scale=0.5)
    assert name == kernel and args[gate] is inp["g"] and args["scale"] == 0.5
    assert args["initial_state"].dtype == torch.float32  # fla asserts a float32 state


@pytest.mark.parametrize("T, grad, no_grad, kernel", [
    (64, False, True, "fused_recurrent_simple_gla"), (65, False, True, "chunk_simple_gla"),
    (16, True, False, "chunk_simple_gla"), (16, False, False, "chunk_simple_gla")])
def test_fla_simple_gla_kernel_by_length_and_grad(spies, T, grad, no_grad, kernel):
    name, args, inp, _ = _call(fla_calls.fla_simple_gla, "simple_gla", spies, T, grad=grad, no_grad=no_grad, h0=True)
    assert name == kernel and args["g"].dtype == torch.float32 and args["initial_state"].dtype == torch.float32
    assert args["scale"] == 64**-0.5  # fla's default made explicit


@pytest.mark.parametrize("learned", [False, True])
def test_fla_simple_gla_g_gamma(spies, learned):
    name, args, inp, _ = _call(fla_calls.fla_simple_gla, "simple_gla", spies, 100, dtype=torch.float32, grad=learned,
                               decay="g_gamma")
    if learned:  # fla returns no gradient for g_gamma: it goes in as a [B,T,H] g
        assert args.get("g_gamma") is None and args["g"].shape == (1, 100, 2) and args["g"].is_contiguous()
        assert args["g"].requires_grad and torch.equal(args["g"][0, 7], inp["g_gamma"])
    else:
        assert args.get("g") is None and torch.equal(args["g_gamma"], inp["g_gamma"])


def test_fla_simple_gla_casts_k_and_v_to_q(spies):
    q, k, v = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16), torch.zeros(1, 8, 2, 64), torch.zeros(1, 8, 2, 16)
    fla_calls.fla_simple_gla(q, k, v)
    (_, args), = spies
    assert args["k"].dtype == args["v"].dtype == torch.bfloat16


@pytest.mark.parametrize("T, dtype, kernel", [
    (100, torch.float32, "fused_recurrent_delta_rule"),  # chunk_delta_rule refuses float32
    (64, torch.bfloat16, "fused_recurrent_delta_rule"), (65, torch.bfloat16, "chunk_delta_rule")])
def test_fla_delta_rule(spies, T, dtype, kernel):
    name, args, inp, (o, _) = _call(fla_calls.fla_delta_rule, "delta_rule", spies, T, dtype=dtype, grad=True, h0=True)
    assert name == kernel and args["beta"].dtype == dtype and args["initial_state"].dtype == torch.float32
    assert o.dtype == dtype


@pytest.mark.parametrize("T, grad, no_grad, kernel", [
    (64, False, True, "fused_recurrent_gated_delta_rule"), (65, False, True, "chunk_gated_delta_rule"),
    (16, True, False, "chunk_gated_delta_rule")])  # the fused recurrent kernel has no backward
def test_fla_gated_delta_rule(spies, T, grad, no_grad, kernel):
    name, args, inp, (o, _) = _call(fla_calls.fla_gated_delta_rule, "gated_delta_rule", spies, T, grad=grad,
                                    no_grad=no_grad, h0=True)
    assert name == kernel and args["g"].dtype == torch.float32 and args["beta"].dtype == torch.bfloat16
    assert args["initial_state"].dtype == torch.float32 and o.dtype == torch.bfloat16


@pytest.mark.parametrize("T, grad, no_grad, kernel", [
    (64, False, True, "fused_recurrent_kda"), (65, False, True, "chunk_kda"), (16, True, False, "chunk_kda")])
def test_fla_kda(spies, T, grad, no_grad, kernel):
    name, args, inp, (o, _) = _call(fla_calls.fla_kda, "kda", spies, T, grad=grad, no_grad=no_grad, h0=True)
    assert name == kernel and args["g"].dtype == torch.float32 and args["beta"].dtype == torch.bfloat16
    assert args["initial_state"].dtype == torch.float32 and o.dtype == torch.bfloat16
    # the mixer computed the gate, the key norm and beta's sigmoid: fla must not apply them again
    for flag in ("use_gate_in_kernel", "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel"):
        assert not args.get(flag, False)


@pytest.mark.parametrize("T, grad, no_grad, kernel", [
    (64, False, True, "fused_recurrent_rwkv7"), (65, False, True, "chunk_rwkv7"), (16, True, False, "chunk_rwkv7")])
def test_fla_rwkv7(spies, T, grad, no_grad, kernel):
    name, args, inp, (o, _) = _call(fla_calls.fla_rwkv7, "rwkv7", spies, T, grad=grad, no_grad=no_grad, h0=True)
    assert name == kernel and all(args[n].dtype == torch.bfloat16 for n in ("r", "w", "k", "v", "a", "b"))
    assert args["scale"] == 1.0 and args["initial_state"].dtype == torch.float32


# -- GPU: every fla kernel each fla_<op> can take, against the PyTorch path ----------------------------------
GATED = "#640"  # the route is this kernel where fla's gated backward works here, else the PyTorch path
GPU_ROUTES = [  # (op, T, dtype, inputs without a gradient, output_final_state, make_inputs options, kernel)
    ("hgrn", 500, torch.bfloat16, ("initial_state",), False, {}, "chunk_hgrn"),
    ("hgrn", 500, torch.bfloat16, "all", True, {}, "chunk_hgrn"),
    ("hgrn", 500, torch.bfloat16, ("initial_state",), True, {}, "fused_recurrent_hgrn"),
    ("hgrn", 500, torch.bfloat16, (), False, {}, "fused_recurrent_hgrn"),
    ("hgrn", 16, torch.bfloat16, "all", True, {}, "fused_recurrent_hgrn"),
    ("gla", 37, torch.bfloat16, (), True, {}, "fused_recurrent_gla"),
    ("gla", 500, torch.bfloat16, (), True, {}, "chunk_gla"),
    ("simple_gla", 500, torch.bfloat16, ("g_gamma",), True, {"decay": "g_gamma"}, "chunk_simple_gla"),
    ("simple_gla", 16, torch.bfloat16, "all", True, {"decay": "g_gamma"}, "fused_recurrent_simple_gla"),
    ("simple_gla", 500, torch.bfloat16, (), True, {"decay": "g_gamma"}, ("chunk_simple_gla", GATED)),
    ("simple_gla", 500, torch.bfloat16, (), True, {"decay": "g"}, ("chunk_simple_gla", GATED)),
    ("delta_rule", 40, torch.bfloat16, (), True, {}, "fused_recurrent_delta_rule"),
    ("delta_rule", 500, torch.float32, (), True, {}, "fused_recurrent_delta_rule"),
    ("delta_rule", 500, torch.bfloat16, (), True, {}, "chunk_delta_rule"),
    ("gated_delta_rule", 40, torch.bfloat16, "all", True, {}, "fused_recurrent_gated_delta_rule"),
    ("gated_delta_rule", 500, torch.bfloat16, "all", True, {}, "chunk_gated_delta_rule"),
    ("gated_delta_rule", 500, torch.bfloat16, (), True, {}, ("chunk_gated_delta_rule", GATED)),
    ("kda", 40, torch.bfloat16, "all", True, {}, "fused_recurrent_kda"),
    ("kda", 500, torch.bfloat16, "all", True, {}, "chunk_kda"),
    ("kda", 500, torch.bfloat16, (), True, {}, "chunk_kda"),
    ("kda", 300, torch.bfloat16, (), False, {"strong": True}, "chunk_kda"),
    ("rwkv7", 40, torch.bfloat16, "all", True, {}, "fused_recurrent_rwkv7"),
    ("rwkv7", 500, torch.bfloat16, "all", True, {}, "chunk_rwkv7"),
    ("rwkv7", 500, torch.bfloat16, (), True, {}, "chunk_rwkv7"),
]


def _gpu_id(case) -> str:
    op, T, dtype, const, final, opts, _ = case
    grads = "nograd" if const == "all" else "grad" + "".join(f"-no_d{c}" for c in const)
    return f"{op}-T{T}-{str(dtype)[6:]}-{grads}{'-final' if final else ''}" + "".join(f"-{v}" for v in opts.values())


def _run_op(op, inputs, const, final, backend):
    """``const="all"``: a forward under no_grad (decode, prefill); else the gradients of all inputs not in const."""
    leaves = {n: t.detach().clone().requires_grad_(const != "all" and n not in const) for n, t in inputs.items()}
    fn = getattr(importlib.import_module(f"hlnas.model.kernels.{op}"), op)
    with torch.set_grad_enabled(const != "all"):
        o, s = fn(**leaves, output_final_state=final, backend=backend)
    wrt = [n for n, t in leaves.items() if t.requires_grad]
    if not wrt:
        return o, s, {}
    gen = torch.Generator(device="cpu").manual_seed(2)
    loss = (o.float() * torch.randn(o.shape, generator=gen).to(o.device)).sum()
    if final:
        loss = loss + (s * torch.randn(s.shape, generator=gen).to(s.device)).sum()
    return o, s, dict(zip(wrt, torch.autograd.grad(loss, [leaves[n] for n in wrt])))


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_ROUTES, ids=_gpu_id)
def test_every_fla_route_matches_pytorch_on_cuda(monkeypatch, case):
    op, T, dtype, const, final, opts, kernel = case
    monkeypatch.delenv("HLNAS_TORCH_OPS", raising=False)
    if isinstance(kernel, tuple):
        ok, reason = backends.simple_gla_gated_backward_ok(dtype) if op == "simple_gla" else backends.fla_gated_backward_ok()
        print(f"fla gated backward usable: {ok} ({reason})")
        kernel = kernel[0] if ok else None
    (module, names), calls = FLA_KERNELS[op], []
    mod = importlib.import_module(module)
    for name in names:
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _n=name, _f=real, **kw: calls.append(_n) or _f(*a, **kw))
    B, H, K, V = 2, 4, 64, 64
    inputs = make_inputs(op, B, T, H, K, V, dtype=dtype, device="cuda", **opts)
    gen = torch.Generator(device="cpu").manual_seed(1)
    inputs["initial_state"] = 0.1 * torch.randn((B, H * K) if op == "hgrn" else (B, H, K, V), generator=gen).cuda()
    o, s, g = _run_op(op, inputs, const, final, "fla")
    assert calls == ([kernel] if kernel else [])
    o_ref, s_ref, g_ref = _run_op(op, {n: t.float() for n, t in inputs.items()}, const, final, "torch")
    assert (s is None) is not final and (s is None or s.dtype == torch.float32)
    assert_close("o", o_ref, o, 1e-2)
    if final:
        assert_close("final state", s_ref, s, 1e-2)
    assert g.keys() == g_ref.keys()
    for n in g:
        assert_close(f"d{n}", g_ref[n], g[n], 1e-2)


def test_fla_calls_get_dense_inputs():
    """The fla entry points see contiguous tensors, whatever views the mixers hand over (hlnas.model.nn.fused_linear's
    split projections): fla's Triton pointers assume dense inputs."""
    from hlnas.model.kernels.fla_calls import _contiguous_inputs

    seen = []
    probe = _contiguous_inputs(lambda *a, **k: seen.extend([*a, *k.values()]))
    base = torch.randn(2, 5, 12)
    q, k, v = base.split([4, 4, 4], dim=-1)
    assert not q.is_contiguous()
    probe(q, k, v=v, scale=0.5, initial_state=None)
    assert [t.is_contiguous() for t in seen if isinstance(t, torch.Tensor)] == [True, True, True]
    assert torch.equal(seen[0], q) and seen[3:] == [0.5, None]
