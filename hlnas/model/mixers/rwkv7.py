"""RWKV-7 "Goose" time mixing (Peng et al. 2025, arXiv 2503.14456), shaped like fla's ``RWKV7Attention`` layer.

    x_prev = x shifted one token (the decode cache keeps the last one); xr..xg = x + (x_prev - x) * mu_r..mu_g
    r, k, v = r_proj(xr), k_proj(xk), v_proj(xv)
    w = -exp(-0.5) * sigmoid(w_lora(xw))                    # log-decay per channel, in [-0.607, 0]
    v = lerp(v, v_first, sigmoid(v_lora(xv)))              # value residual to layer 0's v (layer 0 keeps its own)
    alpha = sigmoid(a_lora(xa)), kappa = l2norm(k * k_k)   # in-context learning rate, removal key (per head)
    k = k * (1 + (alpha - 1) * k_a)
    o, S = rwkv7(r, w, k, v, a=-kappa, b=kappa * alpha)   # S_t = diag(e^w) S - kappa (alpha kappa)^T S + k v^T
    o = (GroupNorm_heads(o) + ((r * k * r_k).sum per head) * v) * g_lora(xg)   # the bonus term, then the gate
    y = o_proj(o)

The LoRAs are low-rank pairs d -> r -> d (tanh inside w's, sigmoid inside g's; g's has no bias); their ranks default
to the RWKV-7 reference's rule, ``32 * round(c * sqrt(d) / 32)`` at least 32 (c = 2.5, 5, 2.5, 1.7 for decay, gate,
a and v, the first, third and fourth scaled by head_dim / 64), the rule fla's layer applies when none is given.

Value residual: layer 0 hands its v to every later layer (through ``shared``, the model's dict of values a forward
hands between layers: :class:`hlnas.model.build.HybridLM`);
layer 0 has no ``v_lora``. As in fla, the producer is layer 0 of the model: where layer 0 is not an RWKV-7 layer,
the later ones lerp toward zeros. No value expansion (fla's ``value_dim`` > hidden size).

Decode cache: ``"shift"`` ``[B, 1, d_model]`` (the last token, activation dtype) and ``"state"`` ``[B, H, K, K]``
(float32; float64 for a float64 module).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.l2norm import l2norm
from hlnas.model.kernels.rwkv7 import rwkv7
from hlnas.model.mixers.base import Mixer
from hlnas.model.mixers.deltanet import state_itemsize
from hlnas.model.nn import compute_dtype

#: exp(-0.5): the largest per-step log-decay magnitude RWKV-7's decay allows
DECAY_SCALE = math.exp(-0.5)
_MIX = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")


def lora_rank(coeff: float, d_model: int, factor: float = 1.0) -> int:
    """The RWKV-7 reference's LoRA width: a multiple of 32 near ``coeff * sqrt(d_model) * factor``, at least 32."""
    return max(32, int(round(coeff * d_model**0.5 * factor / 32) * 32))


class LowRank(nn.Module):
    """d -> rank -> out, an optional activation between (RWKV's LoRA; fla's ``LoRA``)."""

    def __init__(self, d: int, out: int, rank: int, act: str | None, bias: bool = True):
        super().__init__()
        self.down = nn.Linear(d, rank, bias=False)
        self.act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, None: lambda t: t}[act]
        self.up = nn.Linear(rank, out, bias=bias)

    @staticmethod
    def param_count(d: int, out: int, rank: int, bias: bool = True) -> int:
        return d * rank + rank * out + (out if bias else 0)

    def forward(self, x: Tensor) -> Tensor:
        return self.up(self.act(self.down(x)))


class RWKV7(Mixer):
    name = "rwkv7"
    bare_parameters = (*_MIX, "k_k", "k_a", "r_k", "g_norm_weight", "g_norm_bias")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        head_dim: int = 64
        decay_low_rank_dim: int = 64
        gate_low_rank_dim: int = 128
        a_low_rank_dim: int = 64
        v_low_rank_dim: int = 32
        num_layers: int = 24  # depth the init's per-layer schedules are spread over (fla: num_hidden_layers)
        norm_eps: float = 1e-5  # the output GroupNorm's eps is head_dim * norm_eps, as in fla

    @classmethod
    def defaults(cls, cfg) -> dict:
        d = cfg.d_model
        head_dim = min(64, max(1, d // 4))  # fla's 64, shrunk below d_model 256 so that there are 4 heads
        f = head_dim / 64
        return dict(head_dim=head_dim, decay_low_rank_dim=lora_rank(2.5, d, f), gate_low_rank_dim=lora_rank(5, d),
                    a_low_rank_dim=lora_rank(2.5, d, f), v_low_rank_dim=lora_rank(1.7, d, f), num_layers=cfg.n_layers,
                    norm_eps=cfg.norm_eps)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        if hp.head_dim < 1 or d_model % hp.head_dim:
            raise ConfigError(f"rwkv7: head_dim={hp.head_dim} must divide d_model={d_model}")
        ranks = {f: getattr(hp, f) for f in ("decay_low_rank_dim", "gate_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim")}
        bad = {f: r for f, r in ranks.items() if r < 1}
        if bad:
            raise ConfigError(f"rwkv7: low-rank widths must be >= 1, got {bad}")

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        """A layer past the first (with the value residual's v_lora); :meth:`layer_param_count` for layer 0."""
        d = d_model
        n = 6 * d + 2 * d + d  # the six token-shift mixes; k_k, k_a; r_k (heads x head_dim)
        n += 4 * d * d  # r, k, v, o projections
        n += LowRank.param_count(d, d, hp.decay_low_rank_dim) + LowRank.param_count(d, d, hp.a_low_rank_dim)
        n += LowRank.param_count(d, d, hp.gate_low_rank_dim, bias=False) + LowRank.param_count(d, d, hp.v_low_rank_dim)
        return n + 2 * d  # the output GroupNorm's weight and bias

    @classmethod
    def layer_param_count(cls, d_model: int, hp: Hparams, layer_idx: int) -> int:
        first = LowRank.param_count(d_model, d_model, hp.v_low_rank_dim) if layer_idx == 0 else 0  # no v_lora
        return cls.param_count(d_model, hp) - first

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return batch * d_model * hp.head_dim * state_itemsize(dtype) + batch * d_model * itemsize  # H K K; shift

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        d = d_model
        ranks = hp.decay_low_rank_dim + hp.gate_low_rank_dim + hp.a_low_rank_dim + hp.v_low_rank_dim
        proj = 2 * (4 * d * d + 2 * d * ranks)
        # the state update touches each H x K x K entry five times (decay, a^T S, the rank-1 removal, k v^T, r^T S)
        return proj + 10 * d * hp.head_dim

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        d, self.num_heads = d_model, d_model // hp.head_dim
        for name in _MIX:
            setattr(self, name, nn.Parameter(torch.zeros(d)))
        self.k_k = nn.Parameter(torch.zeros(d))
        self.k_a = nn.Parameter(torch.zeros(d))
        self.r_k = nn.Parameter(torch.zeros(self.num_heads, hp.head_dim))
        self.r_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w_lora = LowRank(d, d, hp.decay_low_rank_dim, "tanh")
        self.v_lora = LowRank(d, d, hp.v_low_rank_dim, None) if layer_idx != 0 else None
        self.a_lora = LowRank(d, d, hp.a_low_rank_dim, None)
        self.g_lora = LowRank(d, d, hp.gate_low_rank_dim, "sigmoid", bias=False)
        self.g_norm_weight = nn.Parameter(torch.ones(d))
        self.g_norm_bias = nn.Parameter(torch.zeros(d))
        self.shared: dict | None = None  # the model's per-forward dict: layer 0's v for the value residual
        self.reset_special_parameters()

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        """The RWKV-7 reference's schedules over channels and depth (as fla's layer): token-shift mixes from
        ``1 - (n/d)^(c * (1 - l/L))``, decay biases from -6 to 0 across channels with a zigzag per head, the
        removal key scale 0.71 - 0.1 * linear, k_a 1.02, r_k -0.04, the group norm's weight ((l+1)/L)^0.7, the
        LoRAs' first layers at zero (each LoRA starts as its bias). The projections keep the model's init."""
        d, hd, i, L = self.d_model, self.hp.head_dim, self.layer_idx, max(self.hp.num_layers, 2)
        r01, r10 = i / (L - 1), 1.0 - i / L
        n = torch.arange(d, dtype=torch.float64)
        ddd = n / d
        linear = n / max(d - 1, 1) - 0.5
        zig = ((n % hd) - (hd - 1) / 2) / max((hd - 1) / 2, 1)
        zig = zig * zig.abs()
        for name, c in zip(_MIX, (0.2, 0.9, 0.7, 0.7, 0.9, 0.2)):
            getattr(self, name).copy_(1.0 - ddd.pow(c * r10))
        self.k_k.copy_(0.71 - 0.1 * linear)
        self.k_a.fill_(1.02)
        self.r_k.fill_(-0.04)
        self.w_lora.up.bias.copy_(-6 + 6 * (n / max(d - 1, 1)).pow(1 + r01**0.3) + 0.5 + 2.5 * zig)
        self.a_lora.up.bias.copy_(-0.19 + 0.3 * zig + 0.4 * linear)
        if self.v_lora is not None:
            self.v_lora.up.bias.copy_(0.73 - 0.4 * linear)
        for lora in (self.w_lora, self.v_lora, self.a_lora, self.g_lora):
            if lora is not None:
                lora.down.weight.zero_()
        self.g_norm_weight.fill_(((i + 1) / L) ** 0.7)
        self.g_norm_bias.zero_()

    def _group_norm(self, o: Tensor) -> Tensor:
        """Per-head normalisation of o ``[B, T, H, K]`` (eps head_dim * norm_eps), then the flat weight and bias."""
        of = o.to(compute_dtype(o))
        mean = of.mean(-1, keepdim=True)
        var = (of - mean).square().mean(-1, keepdim=True)
        y = ((of - mean) * torch.rsqrt(var + self.hp.head_dim * self.hp.norm_eps)).flatten(-2)
        return (y * self.g_norm_weight.to(y.dtype) + self.g_norm_bias.to(y.dtype)).to(o.dtype)

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; ``cache`` (a dict) is read and updated in place."""
        B, T, d = x.shape
        H, K = self.num_heads, self.hp.head_dim
        prev = cache.get("shift") if cache is not None else None
        shifted = torch.cat([x.new_zeros(B, 1, d) if prev is None else prev.to(x.dtype), x[:, :-1]], 1)
        if cache is not None:
            cache["shift"] = x[:, -1:].detach()
        delta = shifted - x
        xr, xw, xk, xv, xa, xg = (torch.addcmul(x, delta, getattr(self, name).to(x.dtype)) for name in _MIX)
        r, k, v = self.r_proj(xr), self.k_proj(xk), self.v_proj(xv)
        ft = compute_dtype(x)
        w = -DECAY_SCALE * torch.sigmoid(self.w_lora(xw).to(ft))
        if self.layer_idx == 0:
            if self.shared is not None:
                self.shared["v_first"] = v
        else:
            first = None if self.shared is None else self.shared.get("v_first")
            v = torch.lerp(v, torch.zeros_like(v) if first is None else first.to(v.dtype), torch.sigmoid(self.v_lora(xv)))
        alpha = torch.sigmoid(self.a_lora(xa))
        g = self.g_lora(xg)
        kappa = l2norm((k * self.k_k.to(k.dtype)).view(B, T, H, K))
        k = k * (1 + (alpha - 1) * self.k_a.to(k.dtype))
        heads = lambda t: t.view(B, T, H, K)  # noqa: E731
        r, w, k, v, alpha = map(heads, (r, w, k, v, alpha))
        state = cache.get("state") if cache is not None else None
        o, state = rwkv7(r, w, k, v, -kappa, kappa * alpha, scale=1.0, initial_state=state,
                         output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = state.detach()
        bonus = ((r * k * self.r_k.to(r.dtype)).sum(-1, keepdim=True) * v).flatten(-2)
        return self.o_proj((self._group_norm(o) + bonus) * g)
