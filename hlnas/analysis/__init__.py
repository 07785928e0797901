"""Reading a study: Pareto fronts and hypervolume (:mod:`~hlnas.analysis.pareto`), figures, the report, the dashboard,
the paper's published numbers (:mod:`~hlnas.analysis.paper`), and the tabular sampler benchmarks.
"""
