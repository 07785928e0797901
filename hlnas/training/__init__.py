"""Training, written once: the step loop, its learning-rate schedule and autocast (:mod:`hlnas.training.loop`), and
the step itself, eager or one captured CUDA graph, with its AdamW (:mod:`hlnas.training.step`), and the state a
training saves and resumes from (:mod:`hlnas.training.checkpoint`).

The LM trainer (:func:`hlnas.lm.trainer.train`) and the recall proxy (:mod:`hlnas.recall.proxy`) both train through
:func:`hlnas.training.loop.run_steps`; what differs is passed in: the data, the loss, the stop rule, the step.
"""
