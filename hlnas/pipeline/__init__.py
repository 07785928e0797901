"""One candidate from its recipe (:mod:`~hlnas.pipeline.recipe`) to its result (:mod:`~hlnas.pipeline.run`)."""
