"""Bundles: one folder (and optionally one tar file) with everything a board needs to build and run a model.

Layout of a bundle folder::

    manifest.json                 format, jetforge version, targets, what is prepared, checksums, build options
    model.onnx, model.onnx.json   the model and its sidecar (task, labels, preprocessing, input shapes)
    model.qdq.onnx(.json)         the explicitly quantized variant (TensorRT >= 10 GPU, TensorRT 11)
    calib/trt-<N>.calib           one calibration cache per TensorRT version (N = the cache header number)
    model.precisions.json         the per-layer precision list from `jetforge calibrate --mixed-precision`
    app.yaml                      the app configuration, if any
    samples/samples.npz(.json)    a few real inputs with jetforge's FP32 and simulated-INT8 outputs (board-check)

A bundle from someone else is hostile until verified (:mod:`jetforge.deploy.safety`): every
path its manifest names (``files[].path``, ``calibration[].file``) must be a normalised relative
path inside the folder, every file it uses a regular file reached through no symbolic link and with
one hard link, its name a plain folder name (it becomes ``~/jetforge/bundles/<name>`` on the board),
and its build options may name no path (the board decides the calibration cache and timing cache).
The name is part of the bundle hash.

One job per module:

* :mod:`.manifest` — ``manifest.json``: the file names, the manifest types, the strict reader and its checks.
* :mod:`.verify` — re-hash every file against the manifest and name each missing, corrupt or unexpected file;
  open a verified bundle folder or tar (:func:`open_bundle`).
* :mod:`.tar` — the bundle as one tar: written atomically, extracted safely into the cache.
* :mod:`.create` — ``jetforge bundle create`` (:func:`create_bundle`), assembled in :mod:`.staging` (a hidden
  folder renamed into place when complete), with :mod:`.prepare` deciding the calibration caches per TensorRT
  version and planning every (target, TensorRT version) the bundle is prepared for.

The names below are the public interface; import them from ``jetforge.deploy.bundle``.
"""

from jetforge.deploy.bundle.create import CreateResult, create_bundle
from jetforge.deploy.bundle.manifest import (APP_CONFIG, BOARD_DECIDED, BUNDLE_FORMAT, BUNDLE_KIND, CALIB_DIR,
                                             MANIFEST, NOT_BUNDLE_FILES, ONNX, PARTIAL_DIR, PATH_OPTIONS, PRECISIONS,
                                             QDQ, REMOTE_MARKER, TAR_SUFFIXES, BundleError, BundleFile,
                                             BundleNotPreparedError, Manifest, Prepared, manifest_problems,
                                             read_manifest)
from jetforge.deploy.bundle.prepare import layer_precisions_from_file
from jetforge.deploy.bundle.tar import safe_extract, single_top, unpack_tar, write_tar
from jetforge.deploy.bundle.verify import Bundle, VerifyReport, is_bundle_path, open_bundle, verify_bundle

__all__ = ["APP_CONFIG", "BOARD_DECIDED", "BUNDLE_FORMAT", "BUNDLE_KIND", "CALIB_DIR", "MANIFEST", "NOT_BUNDLE_FILES",
           "ONNX", "PARTIAL_DIR", "PATH_OPTIONS", "PRECISIONS", "QDQ", "REMOTE_MARKER", "TAR_SUFFIXES", "Bundle",
           "BundleError", "BundleFile", "BundleNotPreparedError", "CreateResult", "Manifest", "Prepared",
           "VerifyReport", "create_bundle", "is_bundle_path", "layer_precisions_from_file", "manifest_problems",
           "open_bundle", "read_manifest", "safe_extract", "single_top", "unpack_tar", "verify_bundle", "write_tar"]
