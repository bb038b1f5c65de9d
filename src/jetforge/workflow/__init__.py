"""Workflow: what the ``jetforge`` commands do between parsing their flags and calling the library layers.

This layer sits below the CLI and above every other layer: it may import what the CLI may (``apps``,
``deploy``, ``runtime``, ``targets``; ``calibrate`` and ``compress`` only inside functions, so a device-side
command still starts without them), and the CLI imports it.  It holds the steps that join layers and that
a script, a benchmark or a test calls as well as a command does:

* :mod:`~jetforge.workflow.model_refs`: the model export cache (the default classifier, MTCNN, the person
  detector exported once from verified assets and reused while current) and loading a torch model from an
  architecture name, weights and a prune plan;
* :mod:`~jetforge.workflow.bundle_references`: a bundle's reference samples (real inputs with jetforge's FP32
  and simulated-INT8 outputs, for ``board-check``).

Nothing here parses a command line: the flags are the CLI's (:mod:`jetforge.cli.arguments`).
"""
