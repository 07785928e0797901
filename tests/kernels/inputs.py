"""Random inputs of the right shapes and ranges for each sequence op: what the kernel tests, the GPU check
(experiments/gpu_check.py) and the kernel benchmark feed the ops (kept out of the library's kernel modules)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["DELTA_SHAPES", "delta_shape_id", "delta_case", "make_inputs", *[f"{op}_inputs" for op in ("attention", "delta_rule", "gated_delta_rule", "gla", "hgrn", "simple_gla", "causal_conv1d",
                                                          "l2norm", "kda", "rwkv7")]]


def attention_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Random q, k, v for tests and benchmarks (V is ignored: attention has V == K here)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    mk = lambda: torch.randn(B, T, H, K, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return {"q": mk(), "k": mk(), "v": mk()}


def delta_rule_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Random q, k (l2-normalized), v, beta in (0, 1) for tests and benchmarks."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    out = {
        "q": rnd(B, T, H, K),
        "k": F.normalize(rnd(B, T, H, K), p=2, dim=-1),
        "v": rnd(B, T, H, V),
        "beta": torch.sigmoid(rnd(B, T, H)),
    }
    return {n: t.to(device=device, dtype=dtype) for n, t in out.items()}


def gated_delta_rule_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Random q, k (l2-normalized), v, g (log-decay in about [-2.5, -0.005], mostly near -0.15), beta in (0, 1)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    out = {
        "q": rnd(B, T, H, K),
        "k": F.normalize(rnd(B, T, H, K), p=2, dim=-1),
        "v": rnd(B, T, H, V),
        "g": F.logsigmoid(2.0 + rnd(B, T, H)),
        "beta": torch.sigmoid(rnd(B, T, H)),
    }
    return {n: t.to(device=device, dtype=dtype) for n, t in out.items()}


def kda_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0,
               strong: bool = False) -> dict:
    """Random q, k (l2-normalized), v, per-channel log-decays g ``[B,T,H,K]`` (about [-2.5, -0.005] as the gated delta
    rule's; ``strong``: down to -20 a step, KDA's gate at A = 16) and beta in (0, 1)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    g = F.logsigmoid(2.0 + rnd(B, T, H, K))
    out = {"q": rnd(B, T, H, K), "k": F.normalize(rnd(B, T, H, K), p=2, dim=-1), "v": rnd(B, T, H, V),
           "g": g * 12 if strong else g, "beta": torch.sigmoid(rnd(B, T, H))}
    return {n: t.to(device=device, dtype=dtype) for n, t in out.items()}


def rwkv7_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """r, k, v ~ N(0, 1), log-decays w in [-exp(-0.5), 0] (the mixer's range), and the removal term as the mixer forms
    it: a = -kappa, b = kappa * alpha, kappa an l2-normalized key, alpha in (0, 1)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    kappa, alpha = F.normalize(rnd(B, T, H, K), p=2, dim=-1), torch.sigmoid(rnd(B, T, H, K))
    out = {"r": rnd(B, T, H, K), "w": -0.6065306597126334 * torch.sigmoid(rnd(B, T, H, K)), "k": rnd(B, T, H, K) / K**0.5,
           "v": rnd(B, T, H, V), "a": -kappa, "b": kappa * alpha}
    return {n: t.to(device=device, dtype=dtype) for n, t in out.items()}


def gla_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Random q, k, v ~ N(0,1) and log-gates g = logsigmoid(N(0,1)) (mean -0.8: a decay of ~0.45 a step)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    out = {"q": rnd(B, T, H, K), "k": rnd(B, T, H, K), "v": rnd(B, T, H, V), "g": F.logsigmoid(rnd(B, T, H, K))}
    return {name: x.to(device=device, dtype=dtype) for name, x in out.items()}


def hgrn_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """x and g ``[B, T, H*K]`` (HGRN has no heads: D = H*K channels; V is ignored).

    g = logsigmoid(N(2, 1)): per-step decays mostly in (0.7, 0.99), the range HGRN's gates sit in.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    D = H * K
    x = torch.randn(B, T, D, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, D, generator=gen) + 2.0)
    return {"x": x.to(device=device, dtype=dtype), "g": g.to(device=device, dtype=dtype)}


def simple_gla_inputs(
    B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0, decay: str = "g"
) -> dict:
    """q, k ``[B,T,H,K]``, v ``[B,T,H,V]`` and the decay: ``decay="g"`` gives g ``[B,T,H]`` =
    logsigmoid(N(3, 1)) (per-step decays mostly in 0.88..0.99), ``"g_gamma"`` RetNet's per-head
    constants log(1 - 2^(-5-h)), ``"none"`` no decay."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = {
        "q": torch.randn(B, T, H, K, generator=gen),
        "k": torch.randn(B, T, H, K, generator=gen),
        "v": torch.randn(B, T, H, V, generator=gen),
    }
    if decay == "g":
        out["g"] = F.logsigmoid(torch.randn(B, T, H, generator=gen) + 3.0)
    elif decay == "g_gamma":
        out["g_gamma"] = torch.log1p(-(2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64))))
    elif decay != "none":
        raise ValueError(f"decay must be 'g', 'g_gamma' or 'none'; got {decay!r}")
    return {name: t.to(device=device, dtype=dtype) for name, t in out.items()}


def causal_conv1d_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0,
                         width: int = 4) -> dict:
    """Random x ``[B, T, H*K]``, a depthwise weight ``[H*K, 1, width]`` and bias for the short convolution (H and K
    give the channel count as a mixer's heads x head dim do; V is ignored), SiLU as the q/k/v convs use."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    C = H * K
    out = {"x": torch.randn(B, T, C, generator=g), "weight": torch.randn(C, 1, width, generator=g) / width**0.5,
           "bias": 0.1 * torch.randn(C, generator=g)}
    return {**{n: t.to(device=device, dtype=dtype) for n, t in out.items()}, "activation": "silu"}


def l2norm_inputs(B: int, T: int, H: int, K: int, V: int, *, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Random x ``[B, T, H, K]`` as the delta rules' q or k reach their l2norm (V is ignored)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return {"x": torch.randn(B, T, H, K, generator=g).to(device=device, dtype=dtype)}


_BY_OP = {"causal_conv1d": causal_conv1d_inputs, "l2norm": l2norm_inputs, "attention": attention_inputs, "delta_rule": delta_rule_inputs, "gated_delta_rule": gated_delta_rule_inputs,
          "gla": gla_inputs, "hgrn": hgrn_inputs, "simple_gla": simple_gla_inputs, "kda": kda_inputs, "rwkv7": rwkv7_inputs}


def make_inputs(op: str, *args, **kwargs) -> dict:
    """The inputs of ``op`` (a name of :data:`hlnas.model.kernels.OPS`)."""
    return _BY_OP[op](*args, **kwargs)


# the delta-rule family's test shapes: (B, T, H, K, V, chunk_size, with initial_state)
DELTA_SHAPES = [
    (2, 100, 3, 16, 32, 32, False),  # T not a multiple of the chunk
    (2, 100, 3, 16, 32, 32, True),
    (1, 1, 2, 8, 8, 64, True),  # one decode step
    (2, 64, 2, 16, 16, 64, False),  # exactly one chunk
    (1, 130, 2, 32, 8, 16, True),  # many chunks, K > V
    (1, 37, 4, 8, 16, 64, True),  # T < chunk
]


def delta_shape_id(s) -> str:
    B, T, H, K, V, C, h0 = s
    return f"B{B}-T{T}-H{H}-K{K}-V{V}-C{C}" + ("-h0" if h0 else "")


def delta_case(make, B, T, H, K, V, h0, dtype=torch.float64, seed=0) -> dict:
    """``make``'s inputs (a ``*_inputs`` above), with an initial state when ``h0``, all requiring grad."""
    inp = make(B, T, H, K, V, dtype=dtype, seed=seed)
    if h0:
        inp["initial_state"] = 0.1 * torch.randn(B, H, K, V, dtype=dtype)
    for t in inp.values():
        t.requires_grad_(True)
    return inp
