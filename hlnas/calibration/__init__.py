"""Controls before a search spends its budget: the runs a calibration trains and its verdict
(:mod:`~hlnas.calibration.protocol`), the verdict as text (:mod:`~hlnas.calibration.text`), which checks can still pass
(:mod:`~hlnas.calibration.outlook`), and the verdict under other thresholds (:mod:`~hlnas.calibration.whatif`).
The runs themselves go through the search's workers (:mod:`hlnas.search.calibration`).
"""
