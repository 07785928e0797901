"""RetNet's multi-scale retention (Sun et al. 2023, arXiv 2307.08621), shaped like fla's
``MultiScaleRetention`` layer (its defaults: expand_k=1, expand_v=2, 8 heads, swish output gate
fused with a per-head RMSNorm, no short convolution).

    q, k = RoPE(q_proj(x)), RoPE(k_proj(x))              # [B, T, H, dk]
    v, g = v_proj(x), g_proj(x)                          # [B, T, H, dv], dv = 2 dk
    S_t = gamma_h S_{t-1} + k_t^T v_t,  o_t = q_t S_t / sqrt(dk),  gamma_h = 1 - 2^(-5 - h)
    y = o_proj(RMSNorm_per_head(o) * silu(g))

The decay is fixed (not learned), as in RetNet and fla; it is recomputed in float32 each call
rather than stored, so it is exact in every activation dtype and not a parameter.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.simple_gla import simple_gla
from hlnas.model.mixers.base import STATE_DTYPE, Mixer
from hlnas.model.nn import GatedRMSNorm, fused_linear, rotary_qk

#: smallest key head width the heads are reduced to at small d_model (Triton's tl.dot needs >= 16)
MIN_HEAD_K_DIM = 16


class RetNet(Mixer):
    name = "retnet"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        num_heads: int = 8
        expand_k: float = 1.0
        expand_v: float = 2.0
        rope_theta: float = 10000.0
        norm_eps: float = 1e-6

    @classmethod
    def defaults(cls, cfg) -> dict:
        # fla's 8 heads, fewer when the key head would drop below 16 (d_model 64 -> 4 heads of 16)
        heads = max(1, min(8, cfg.d_model // MIN_HEAD_K_DIM))
        return dict(num_heads=heads, rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps)

    @staticmethod
    def _dims(d_model: int, hp: Hparams) -> tuple[int, int]:
        return round(d_model * hp.expand_k), round(d_model * hp.expand_v)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        dk, dv = cls._dims(d_model, hp)
        if dk != d_model * hp.expand_k or dv != d_model * hp.expand_v:
            raise ConfigError(
                f"retnet: d_model * expand_k = {d_model * hp.expand_k} and "
                f"d_model * expand_v = {d_model * hp.expand_v} must be integers"
            )
        if hp.num_heads < 1 or dk % hp.num_heads or dv % hp.num_heads:
            raise ConfigError(f"retnet: key dim {dk} and value dim {dv} must divide by num_heads={hp.num_heads}")
        if (dk // hp.num_heads) % 2:
            raise ConfigError(f"retnet: key head dim {dk // hp.num_heads} must be even for RoPE; change num_heads")

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        dk, dv = cls._dims(d_model, hp)
        return 2 * d_model * dk + 3 * d_model * dv + dv // hp.num_heads  # q, k; v, g, o; head norm

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        dk, dv = cls._dims(d_model, hp)
        H = hp.num_heads
        return batch * H * (dk // H) * (dv // H) * torch.empty((), dtype=STATE_DTYPE).element_size()

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        dk, dv = cls._dims(d_model, hp)
        # the paper's Table 4: RetNet 5 d^2 / H; with dk != dv the state is H x (dk/H) x (dv/H)
        return 2 * (2 * d_model * dk + 3 * d_model * dv) + 5 * dk * dv // hp.num_heads

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        dk, dv = self._dims(d_model, hp)
        self.head_k_dim, self.head_v_dim = dk // hp.num_heads, dv // hp.num_heads
        self.q_proj = nn.Linear(d_model, dk, bias=False)
        self.k_proj = nn.Linear(d_model, dk, bias=False)
        self.v_proj = nn.Linear(d_model, dv, bias=False)
        self.g_proj = nn.Linear(d_model, dv, bias=False)
        self.g_norm = GatedRMSNorm(self.head_v_dim, hp.norm_eps, act="swish")  # one weight shared by the heads
        self.o_proj = nn.Linear(dv, d_model, bias=False)

    def log_decay(self, device: torch.device) -> Tensor:
        """log(gamma_h) ``[H]`` float32, gamma_h = 1 - 2^(-5 - h) (RetNet's retention decays)."""
        h = torch.arange(self.hp.num_heads, dtype=torch.float32, device=device)
        return torch.log1p(-torch.exp2(-5.0 - h))

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; cache: "state" ``[B, H, dk, dv]`` float32, "pos"."""
        B, T, _ = x.shape
        H = self.hp.num_heads
        pos = cache.get("pos", 0) if cache is not None else 0
        q, k, v, g = fused_linear(x, self.q_proj, self.k_proj, self.v_proj, self.g_proj)
        q, k = rotary_qk(q.view(B, T, H, self.head_k_dim), k.view(B, T, H, self.head_k_dim), pos, self.hp.rope_theta)
        v = v.view(B, T, H, self.head_v_dim)
        h0 = None if cache is None else cache.get("state")
        o, ht = simple_gla(
            q, k, v, g_gamma=self.log_decay(x.device), initial_state=h0, output_final_state=cache is not None
        )
        if cache is not None:
            cache["state"], cache["pos"] = ht.detach(), pos + T
        o = self.g_norm(o, g.view(B, T, H, self.head_v_dim))
        return self.o_proj(o.reshape(B, T, -1))
