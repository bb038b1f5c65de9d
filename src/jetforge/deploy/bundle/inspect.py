"""``jetforge info BUNDLE``: a bundle's manifest, files, targets and model, after checking every hash.

A bundle from someone else is hostile until verified, so inspection opens it the one way jetforge opens bundles
(:func:`~jetforge.deploy.bundle.verify.open_bundle`: no path may leave the folder, no links, every file's size and
SHA-256 as the manifest says); a bundle that fails is the usual one-line :class:`BundleError`.  Its model is then
described as any ONNX is (:func:`jetforge.runtime.model_inspect.onnx_info`).
"""

from typing import Any, Dict

from jetforge.deploy.bundle.verify import open_bundle, verify_bundle
from jetforge.fileio import PathLike
from jetforge.runtime.model_inspect import onnx_info


def bundle_info(path: PathLike, *, macs: bool = True, batch: int = 1) -> Dict[str, Any]:
    """The facts of a verified bundle folder or tar; a bundle that fails verification raises BundleError."""
    bundle = open_bundle(path, verify=False)  # a tar is unpacked safely; the folder is checked next, hashed once
    report = verify_bundle(bundle.path)
    report.raise_if_bad()
    m = report.manifest
    assert m is not None  # raise_if_bad refused a bundle without one
    info: Dict[str, Any] = {
        "kind": "bundle", "path": str(bundle.source), "folder": str(bundle.path), "name": m.name,
        "bundle_hash": m.bundle_hash, "jetforge_version": m.jetforge_version, "created": m.created,
        "targets": m.target_names, "prepared": [p.to_dict() for p in m.prepared],
        "calibration": [dict(c) for c in m.calibration], "build_options": dict(m.build_options),
        "files": [dict(f.to_dict(), verified=True) for f in m.files],
        "verified": {"files": report.checked, "unexpected": list(report.unexpected), "ok": report.ok},
        "notes": list(m.notes),
        "model": onnx_info(bundle.onnx, macs=macs, batch=batch),
    }
    return info


__all__ = ["bundle_info"]
