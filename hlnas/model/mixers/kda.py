"""Kimi Delta Attention (Kimi Linear, arXiv 2510.26692), shaped like fla's ``KimiDeltaAttention`` layer.

x -> q, k, v projections -> short causal convolutions (kernel 4, SiLU) -> heads -> q, k l2-normalized ->
beta = sigmoid(b_proj(x)), g = -exp(A_log) * softplus(f_proj(x) + dt_bias), a decay per key channel (f_proj is a
low-rank pair d -> head_v -> H * head_dim) -> KDA (:mod:`hlnas.model.kernels.kda`) -> per-head RMSNorm(o) *
sigmoid(g_proj(x)) (g_proj low-rank too, its second half with a bias) -> o_proj.

The decay per channel is what sets KDA apart from Gated DeltaNet's one decay per head; ``A_log`` stays per head and
``dt_bias`` has one entry per key channel, as in fla. Default widths: ``head_dim = 128`` (Kimi Linear's, fla's) with
``num_heads * head_dim = d_model`` (fla's 16 x 128 at d_model 2048), the head shrinking to ``d_model / 4`` below 512
so that there are 4 heads (64 -> 4 x 16). No grouped value heads (fla's ``num_v_heads``), no ``safe_gate``.

Decode cache: ``"state"`` ``[B, H, dk, dv]`` (float32; float64 for a float64 module) and the conv states
``"conv_q"``, ``"conv_k"``, ``"conv_v"`` ``[B, conv_size-1, C]`` in the activation dtype.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.model.kernels.kda import kda
from hlnas.model.mixers.base import Mixer
from hlnas.model.mixers.deltanet import HeadDimDelta, inverse_softplus_dt
from hlnas.model.nn import GatedRMSNorm, compute_dtype


class KDA(HeadDimDelta, Mixer):
    name = "kda"
    bare_parameters = ("A_log", "dt_bias")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        num_heads: int
        head_dim: int  # key head dim; value head dim = head_dim * expand_v
        expand_v: float = 1.0  # fla's default
        use_short_conv: bool = True
        conv_size: int = 4
        conv_bias: bool = False
        allow_neg_eigval: bool = False  # beta in (0, 2) instead of (0, 1)
        norm_eps: float = 1e-6  # fla's models pass config.norm_eps to the layer

    @classmethod
    def defaults(cls, cfg) -> dict:
        head_dim = min(128, max(1, cfg.d_model // 4))
        return dict(num_heads=max(1, cfg.d_model // head_dim), head_dim=head_dim, norm_eps=cfg.norm_eps)

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        key_dim, value_dim, head_v = cls._dims(hp)
        n = 2 * d_model * key_dim + 2 * d_model * value_dim  # q, k, v, o projections
        n += d_model * head_v + head_v * key_dim  # f_proj: the low-rank decay projection
        n += d_model * head_v + head_v * value_dim + value_dim  # g_proj: the low-rank output gate, with a bias
        n += d_model * hp.num_heads + hp.num_heads + key_dim  # b_proj; A_log per head, dt_bias per key channel
        return n + cls._conv_params(hp) + head_v  # output norm weight

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        key_dim, value_dim, head_v = cls._dims(hp)
        proj = 2 * d_model * key_dim + 2 * d_model * value_dim + d_model * hp.num_heads
        proj += 2 * d_model * head_v + head_v * (key_dim + value_dim)  # the low-rank f and g projections
        # the state update is the gated delta rule's (decay, read, correct, query: 8 d^2 / H, the paper's Table 4
        # for GatedDeltaNet) with the decay per channel, which costs the same multiply per state entry
        return 2 * proj + 8 * key_dim * value_dim // hp.num_heads

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        self.key_dim, self.value_dim, self.head_v_dim = self._dims(hp)
        H = hp.num_heads
        self.head_k_dim = hp.head_dim
        self._make_qkv_proj(d_model, self.key_dim, self.value_dim)
        if hp.use_short_conv:
            self._make_qkv_convs(self.key_dim, self.value_dim)
        self.f_proj = nn.Sequential(nn.Linear(d_model, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.key_dim, bias=False))
        self.b_proj = nn.Linear(d_model, H, bias=False)
        self.A_log = nn.Parameter(torch.empty(H))
        self.dt_bias = nn.Parameter(torch.empty(self.key_dim))
        self.A_log._no_weight_decay = True  # optimizers that honour it skip weight decay on these (as fla)
        self.dt_bias._no_weight_decay = True
        self.g_proj = nn.Sequential(nn.Linear(d_model, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.value_dim, bias=True))
        self.o_norm = GatedRMSNorm(self.head_v_dim, eps=hp.norm_eps, act="sigmoid")
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)
        self.reset_special_parameters()

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        """As Mamba's and fla's KDA: A ~ U(1, 16) so A_log = log A, and dt_bias = softplus^-1(dt) per key channel with
        dt log-uniform in [1e-3, 1e-1] (floored at 1e-4)."""
        self.A_log.copy_(torch.empty(self.hp.num_heads).uniform_(1, 16).log())
        self.dt_bias.copy_(inverse_softplus_dt(self.dt_bias.numel()))

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; ``cache`` (a dict) is read and updated in place."""
        B, T, _ = x.shape
        hp = self.hp
        H, K = hp.num_heads, hp.head_dim
        q, k, v = self._qkv(x, cache)
        beta = self._beta(x)
        # log-decays per key channel in float32 (float64 stays): -exp(A_log[h]) * softplus(f + dt_bias) <= 0
        ft = compute_dtype(x)
        f = (self.f_proj(x).to(ft) + self.dt_bias.to(ft)).view(B, T, H, K)
        g = -self.A_log.to(ft).exp().unsqueeze(-1) * F.softplus(f)
        state = cache.get("state") if cache is not None else None
        o, state = kda(q, k, v, g, beta, initial_state=state, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = state.detach()
        o = self.o_norm(o, self.g_proj(x).view(B, T, H, self.head_v_dim))
        return self.o_proj(o.reshape(B, T, self.value_dim))
