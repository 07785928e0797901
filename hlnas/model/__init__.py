"""The model wing: a layout (:mod:`~hlnas.model.layout`), its config (:mod:`~hlnas.model.config`), its exact cost
(:mod:`~hlnas.model.cost`), and the model built from it (:mod:`~hlnas.model.build`) out of the token mixers
(:mod:`hlnas.model.mixers`), their sequence kernels (:mod:`hlnas.model.kernels`) and shared blocks (:mod:`~hlnas.model.nn`).

Nothing is imported here, so ``import hlnas.model.layout`` does not import torch.
"""
