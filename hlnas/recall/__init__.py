"""The recall half of a trial: fresh recall models of a candidate's layout trained on synthetic recall tasks
(:mod:`~hlnas.recall.proxy`), the tasks (:mod:`~hlnas.recall.mqar`, :mod:`~hlnas.recall.vt`), and the no-recall
baselines every recall number is reported beside (:mod:`~hlnas.recall.baselines`).
"""
