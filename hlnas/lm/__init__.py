"""The LM half of a trial: training a candidate on text (:mod:`~hlnas.lm.trainer`) from :mod:`hlnas.data`, its
held-out loss (:mod:`~hlnas.lm.validation`), and the recall documents a recipe may mix into that training
(:mod:`~hlnas.lm.recall_mix`).
"""
