"""From a workstation to a Jetson: bundles, the on-board engine cache, and remote deployment over SSH.

* :mod:`.bundle` — one folder (optionally one tar) with everything a board needs to build and run a
  model: the ONNX model and its Q/DQ variant, calibration caches per TensorRT version, sidecars,
  per-layer precisions, the app configuration and a manifest with checksums.  Written atomically;
  :func:`~jetforge.deploy.bundle.verify_bundle` says exactly what is missing or corrupt.
* :mod:`.onboard` — ``jetforge build BUNDLE --target auto`` on the board: detect the board and its
  TensorRT, pick the calibration cache or Q/DQ model, build through the engine cache.
* :mod:`jetforge.runtime.tensorrt.engine_cache` (in the TensorRT package) — engines keyed by bundle hash,
  TensorRT version, device and build options; a stale or foreign entry is never loaded.
* :mod:`.remote` and :mod:`.workflow` — ``jetforge deploy BUNDLE user@host``: ssh/rsync through
  subprocess, one-line errors, resumable copies, remote doctor/build/bench, results fetched back.
* :mod:`.safety` — the checks on values from outside (manifest paths and names, links, SSH
  destinations, ``--remote-env`` keys, ``--app-command`` fields) that every module above applies.

Everything here is torch-free, Python 3.8, and imports only ``runtime``, ``targets`` and the root package.
"""
