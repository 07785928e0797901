"""Held-out language-modelling loss: the LM objective every trial scores.

Separate from :mod:`hlnas.score.lm` (the lm-eval adapter) so scoring needs no lm-eval import: GPU
machines that carry only hlnas's core needs still compute it. The one definition lives in :mod:`hlnas.lm.validation`,
which the LM trainer also reports at the end of training.
"""

from __future__ import annotations

from hlnas.training.loop import autocast_context
from hlnas.lm.validation import validation_loss
from hlnas.training.loop import model_device

__all__ = ["validation_loss", "model_device", "autocast_context"]
