"""Helpers shared by the benchmark scripts (``benchmarks/<study>/*.py``); none of them is a benchmark itself.

* :mod:`.paths` -- ``import jetforge`` from this checkout, where results go and how they are named;
* :mod:`.gpu_timing` -- timing a model's forward on a CUDA GPU through jetforge's ``TorchSession`` (CUDA graph);
* :mod:`.device_env` -- running from a plain checkout on a host without jetforge's environment (wheels, digests);
* :mod:`.estimate_fit`, :mod:`.estimate_models` -- the estimator study's fitting code and model zoo;
* :mod:`.pipeline_gpu_ops`, :mod:`.pipeline_gpu_prep`, :mod:`.pipeline_gpu_report` -- the GPU pipeline study's
  torch ops, carry folder and report.

Importing this package imports nothing else (the modules import torch etc. only where they need it).
"""
