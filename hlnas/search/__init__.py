"""The search, a module per concept: the ask/dedupe/fallback/tell loop (:mod:`~hlnas.search.loop`), where trials run
(:mod:`~hlnas.search.executors`), one driver per study (:mod:`~hlnas.search.lease`), storage URLs
(:mod:`~hlnas.search.storage`), samplers (:mod:`~hlnas.search.samplers`), the calibration runner
(:mod:`~hlnas.search.calibration`), study creation and resume (:mod:`~hlnas.search.study`), and the one module that
touches Optuna's private attributes (:mod:`~hlnas.search.optuna_adapter`).

Nothing is imported here, so ``import hlnas.search.storage`` stays light.
"""
