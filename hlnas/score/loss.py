"""Held-out language-modelling loss: the LM objective every trial scores.

Separate from :mod:`hlnas.score.lm` (the lm-eval adapter) so scoring needs no lm-eval import: GPU
machines that carry only hlnas's core needs still compute it. The one definition lives in :mod:`hlnas.train`,
whose runs report the same loss at the end of training.
"""

from __future__ import annotations

from hlnas.train import autocast_context, model_device, validation_loss

__all__ = ["validation_loss", "model_device", "autocast_context"]
