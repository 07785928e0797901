"""The ``hlnas`` command line (:mod:`~hlnas.cli.main`) and what it prints on a terminal (:mod:`~hlnas.cli.console`)."""
