"""The LM head and its cross-entropy in one, a chunk of tokens at a time, never holding the whole logits.

At paper-340m (B=8, T=4096, vocabulary 32000) the composed ``cross_entropy(lm_head(h).float())`` holds float32 logits
(3.9 GiB), their log-softmax for backward (3.9 GiB) and, in backward, the float32 and bf16 gradients of the logits:
about 10 GiB at the moment every layer's activations are still held, the step's peak. On an 80 GB GPU three paper-scale
rows ran out of memory, one while allocating exactly those 3.91 GiB.

Here the forward computes, per chunk of about :data:`CHUNK_LOGIT_BYTES` of float32 logits, the chunk's loss terms and
at once their gradients with respect to the hidden states and the head's weight (softmax minus the one-hot target,
over the count of scored tokens), and keeps only those: the hidden states' gradient ``[N, d]`` and the weight's
``[V, d]``. Backward scales them by the incoming gradient. The matmuls run in the autocast dtype when autocast is on
(as ``lm_head`` would), the softmax in float32 (float64 for float64 inputs). Tokens whose target is -100 are not
scored; with none scored the loss is 0 (``F.cross_entropy`` gives NaN)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["CHUNK_LOGIT_BYTES", "CHUNKED_HEAD_LOSS", "linear_cross_entropy", "head_loss", "lm_step_loss"]

#: float32 logits one chunk computes at a time (1 GiB: 8,388 tokens at a 32,000 vocabulary). Why 1 GiB: at paper-340m
#: the Transformer's step ran 1.016x with 1 GiB chunks against 256 MiB and 1.015x with 2 or 4 GiB: larger chunks buy
#: nothing more, and peak memory grows about 3x what the chunk grows (1 GiB chunks: 2.3 GiB above 256 MiB ones, still
#: 0.83x the plain Transformer's peak)
CHUNK_LOGIT_BYTES = 2**30
IGNORE_INDEX = -100
#: the LM step takes :func:`lm_step_loss`'s chunked loss where the fused forms run (CUDA, or hlnas.model.nn.FUSED_ON_CPU);
#: off, the composed one there too (the paper-scale benchmark's ``@logits`` rows measure the difference)
CHUNKED_HEAD_LOSS = True


def _matmul_dtype(h: Tensor) -> torch.dtype:
    dev = h.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else h.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, targets: Tensor, chunk: int) -> Tensor:
        mm = _matmul_dtype(h)
        acc = torch.float64 if mm == torch.float64 else torch.float32  # the softmax's and the sums' dtype
        with torch.autocast(h.device.type, enabled=False):
            w = weight.to(mm)
            scored = targets != IGNORE_INDEX
            count = scored.sum().clamp(min=1).to(acc)
            loss = torch.zeros((), dtype=acc, device=h.device)
            grad_h = torch.empty_like(h)
            grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device)
            for s in range(0, h.shape[0], chunk):
                hc, tc, sc = h[s : s + chunk].to(mm), targets[s : s + chunk], scored[s : s + chunk]
                rows, tgt = torch.arange(hc.shape[0], device=h.device), tc.clamp(min=0)
                # the upcast fused into log_softmax, and no op over the chunk's logits that broadcasts: the paper-340m
                # profile had six passes over them and two broadcast (non-vectorised) ones where this makes three
                logp = torch.log_softmax(hc @ w.t(), -1, dtype=acc)
                picked = logp[rows, tgt]
                loss -= (picked * sc).sum()
                # d loss / d logits = (softmax - onehot) * scale: the softmax cast once to the matmul dtype, the
                # target's p - 1 as expm1 in acc before rounding (p near 1 would cancel in bf16), and the per-token
                # scale (1 / count, 0 where not scored) put on the [n, d] sides, never on the [n, V] one
                g = logp.exp_() if mm == acc else torch.exp(logp, out=torch.empty_like(logp, dtype=mm))
                del logp
                g[rows, tgt] = torch.expm1(picked).to(mm)
                scale = (sc / count)[:, None]  # in acc: rounded per element below, never as one biased factor
                grad_h[s : s + chunk] = (g @ w) * scale
                grad_w += (g.t() @ (hc * scale).to(mm)).to(acc)
        ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return loss / count

    @staticmethod
    def backward(ctx, dloss: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * dloss.to(grad_h.dtype), grad_w * dloss.to(grad_w.dtype), None, None


def linear_cross_entropy(h: Tensor, weight: Tensor, targets: Tensor, chunk: int | None = None) -> Tensor:
    """``F.cross_entropy((h @ weight.T).float(), targets, ignore_index=-100)`` for h ``[..., d]``, weight ``[V, d]``,
    targets ``[...]``, without the whole logits; ``chunk``: tokens a chunk (default from :data:`CHUNK_LOGIT_BYTES`)."""
    chunk = chunk or max(1, CHUNK_LOGIT_BYTES // (4 * weight.shape[0]))
    return _LinearCrossEntropy.apply(h.flatten(0, -2), weight, targets.flatten(), chunk)


def head_loss(head: nn.Linear) -> Callable[[Tensor, Tensor], Tensor]:
    """A step's loss on the model's final hidden states (``model(x, head=False)``) through ``head`` (bias-free)."""
    if head.bias is not None:
        raise ValueError("head_loss takes a bias-free LM head")
    return lambda h, targets: linear_cross_entropy(h, head.weight, targets)


def lm_step_loss(model: nn.Module, device: torch.device,
                 composed: Callable[[Tensor, Tensor], Tensor]) -> tuple[Callable[[Tensor, Tensor], Tensor], dict]:
    """``(loss_fn, model_kwargs)`` for an LM training step (:func:`hlnas.training.step.make_step`): on the fused forms'
    devices the chunked head loss on ``model(x, head=False)``, else ``composed`` on the logits (the CPU default keeps
    its path bit for bit)."""
    from hlnas.model.nn import fused_on

    head = getattr(model, "lm_head", None)
    if CHUNKED_HEAD_LOSS and fused_on(device) and isinstance(head, nn.Linear) and head.bias is None:
        return head_loss(head), {"head": False}
    return composed, {}
