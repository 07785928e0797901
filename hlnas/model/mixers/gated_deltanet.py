"""Gated DeltaNet (arXiv 2412.06464), shaped like fla's ``fla/layers/gated_deltanet.py``.

x -> q, k, v projections -> short causal convolutions (kernel 4, SiLU) -> heads -> q, k
l2-normalized -> beta = sigmoid(b_proj(x)), g = -exp(A_log) * softplus(a_proj(x) + dt_bias) ->
gated delta rule -> per-head RMSNorm(o) * swish(g_proj(x)) -> o_proj.

Default widths: ``head_dim=256`` (fla) with ``num_heads * head_dim = d_model`` and ``expand_v=1``, the
shapes of the paper's checkpoints (reference/paper_grid.md section 2: 340M = 4 heads x 256, expand_v 1;
1.3B = 8 heads x 256). fla's own defaults are 6 heads x 256 with expand_v=2 (key_dim 0.75 d at
d=2048); set them through ``mixer_hparams``. Below d_model=1024 the 4 heads shrink their head_dim.
No grouped value heads (fla's ``num_v_heads``).

Decode cache: ``"state"`` ``[B, H, dk, dv]`` (float32; float64 for a float64 module) and the three
conv states ``"conv_q"``, ``"conv_k"``, ``"conv_v"`` ``[B, conv_size-1, C]`` in the activation dtype.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.gated_delta_rule import gated_delta_rule
from hlnas.model.mixers.base import Mixer
from hlnas.model.mixers.deltanet import HeadDimDelta, inverse_softplus_dt
from hlnas.model.nn import compute_dtype, GatedRMSNorm, RMSNorm


class GatedDeltaNet(HeadDimDelta, Mixer):
    name = "gated_deltanet"
    bare_parameters = ("A_log", "dt_bias")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        num_heads: int
        head_dim: int  # key head dim; value head dim = head_dim * expand_v
        expand_v: float = 1.0  # paper checkpoints (fla's layer default is 2)
        use_gate: bool = True  # output gate: GatedRMSNorm(o, g_proj(x))
        gate_act: str = "swish"  # fla's output_gate_activation
        use_short_conv: bool = True
        conv_size: int = 4
        conv_bias: bool = False
        allow_neg_eigval: bool = False  # beta in (0, 2) instead of (0, 1)
        norm_eps: float = 1e-6  # fla's models pass config.norm_eps = 1e-6 to the layer

    @classmethod
    def defaults(cls, cfg) -> dict:
        # paper: num_heads * 256 = d_model from d_model=1024 up; at least 4 heads below (64 -> 4 x 16)
        num_heads = max(4, cfg.d_model // 256)
        return dict(num_heads=num_heads, head_dim=max(1, cfg.d_model // num_heads), norm_eps=cfg.norm_eps)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        super().validate(d_model, hp)
        if hp.gate_act not in ("swish", "sigmoid"):
            raise ConfigError(f"gated_deltanet: gate_act={hp.gate_act!r}; allowed: swish, sigmoid")

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        key_dim, value_dim, head_v = cls._dims(hp)
        n = 2 * d_model * key_dim + 2 * d_model * value_dim  # q, k, v, o projections
        n += 2 * d_model * hp.num_heads + 2 * hp.num_heads  # a_proj, b_proj; A_log, dt_bias
        n += d_model * value_dim if hp.use_gate else 0
        return n + cls._conv_params(hp) + head_v  # output norm weight

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        key_dim, value_dim, _ = cls._dims(hp)
        proj = 2 * (2 * d_model * key_dim + 2 * d_model * value_dim + 2 * d_model * hp.num_heads)
        proj += 2 * d_model * value_dim if hp.use_gate else 0
        # the paper's Table 4: 8 d^2 / H for the gated delta rule; d^2 generalizes to key_dim * value_dim
        return proj + 8 * key_dim * value_dim // hp.num_heads

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        self.key_dim, self.value_dim, self.head_v_dim = self._dims(hp)
        H = hp.num_heads
        self.head_k_dim = hp.head_dim
        self._make_qkv_proj(d_model, self.key_dim, self.value_dim)
        self.a_proj = nn.Linear(d_model, H, bias=False)
        self.b_proj = nn.Linear(d_model, H, bias=False)
        self.A_log = nn.Parameter(torch.empty(H))
        self.dt_bias = nn.Parameter(torch.empty(H))
        # optimizers that honour it skip weight decay on these (fla sets the same flag)
        self.A_log._no_weight_decay = True
        self.dt_bias._no_weight_decay = True
        if hp.use_short_conv:
            self._make_qkv_convs(self.key_dim, self.value_dim)
        if hp.use_gate:
            self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
            self.o_norm = GatedRMSNorm(self.head_v_dim, eps=hp.norm_eps, act=hp.gate_act)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, eps=hp.norm_eps)
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)
        self.reset_special_parameters()

    @torch.no_grad()
    def reset_special_parameters(self) -> None:
        """Mamba-style init (as fla's GatedDeltaNet): A ~ U(0, 16) so A_log = log A, and dt_bias =
        softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1] (floored at 1e-4)."""
        H = self.hp.num_heads
        A = torch.empty(H, dtype=torch.float32).uniform_(0, 16).clamp_(min=1e-4)  # the floor keeps log(A) finite
        self.A_log.copy_(A.log())
        self.dt_bias.copy_(inverse_softplus_dt(H))

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; ``cache`` (a dict) is read and updated in place."""
        B, T, _ = x.shape
        hp = self.hp
        H = hp.num_heads
        q, k, v = self._qkv(x, cache)
        beta = self._beta(x)
        # log-decay in float32 (float64 stays): -exp(A_log) * softplus(a + dt_bias) <= 0
        ft = compute_dtype(x)
        g = -self.A_log.to(ft).exp() * F.softplus(self.a_proj(x).to(ft) + self.dt_bias.to(ft))
        state = cache.get("state") if cache is not None else None
        o, state = gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = state.detach()
        if hp.use_gate:
            o = self.o_norm(o, self.g_proj(x).view(B, T, H, self.head_v_dim))
        else:
            o = self.o_norm(o)
        return self.o_proj(o.reshape(B, T, self.value_dim))
