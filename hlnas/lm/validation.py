"""Validation loss, defined once: the LM trainer's held-out loss and ``hlnas eval``'s (:mod:`hlnas.score.loss`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.training.loop import autocast_context, evaluating, model_device

__all__ = ["validation_loss"]


@torch.no_grad()
def validation_loss(
    model: nn.Module,
    batches: Iterable[Tensor],
    device: torch.device | str | None = None,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float | int]:
    """Mean next-token cross-entropy over held-out batches.

    Each batch is a LongTensor ``[B, T + 1]``: the model reads ``[:, :-1]`` and is scored on ``[:, 1:]``.
    Batches may differ in shape; the mean is over all target tokens (token-weighted, not batch-weighted).
    ``device`` defaults to the model's; batches are moved there (the model is not moved). The model runs in
    eval mode and its previous mode is restored.

    Returns ``{"loss": nats/token, "ppl": exp(loss), "tokens": target token count}``.
    """
    dev = torch.device(device) if device is not None else model_device(model)
    total_nats, tokens = 0.0, 0
    with evaluating(model):
        for i, batch in enumerate(batches):
            if not isinstance(batch, Tensor) or batch.dim() != 2 or batch.shape[1] < 2 or batch.dtype.is_floating_point:
                shape = tuple(batch.shape) if isinstance(batch, Tensor) else type(batch).__name__
                raise ConfigError(f"validation batch {i} has shape {shape}; expected an integer tensor [B, T + 1] with T >= 1")
            batch = batch.to(dev)
            with autocast_context(dev, autocast_dtype):
                logits = model(batch[:, :-1])
            # float32 softmax: bf16 logits lose ~3 digits of the loss
            nats = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
            total_nats += nats.item()
            tokens += batch[:, 1:].numel()
    if tokens == 0:
        raise ConfigError("validation_loss got no batches; give at least one LongTensor [B, T + 1]")
    loss = total_nats / tokens
    return {"loss": loss, "ppl": math.exp(loss), "tokens": tokens}
