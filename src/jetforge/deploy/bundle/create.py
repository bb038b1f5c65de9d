"""``jetforge bundle create``: assemble a bundle folder (and optionally its tar) from a model and its files.

The folder is assembled in a hidden staging folder next to the destination, the manifest is written last,
and the staging folder is renamed into place: an interrupted write never leaves something that looks
complete.  For every (target, TensorRT version) the bundle is prepared for, :func:`create_bundle` runs
the real build planner (:func:`jetforge.runtime.tensorrt.plan.make_plan`) with the INT8 source the board
will pick (:mod:`jetforge.deploy.bundle.prepare`), so an impossible combination is found on the
workstation, not on the board.
"""

import dataclasses
import datetime
import logging
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jetforge
from jetforge.config import to_dict
from jetforge.deploy.bundle.external_data import external_locations
from jetforge.deploy.bundle.manifest import (APP_CONFIG, BOARD_DECIDED, MANIFEST, ONNX, PRECISIONS, QDQ, BundleError,
                                             Manifest, Prepared)
from jetforge.deploy.bundle.prepare import (layer_precisions_from_file, prepare_builds, retarget_caches, stage_caches,
                                            versions_per_target)
from jetforge.deploy.bundle.staging import Staging, check_created, swap_into_place
from jetforge.deploy.bundle.tar import write_tar
from jetforge.deploy.bundle.verify import verify_bundle
from jetforge.deploy.safety import sanitise_bundle_name
from jetforge.errors import ModelError
from jetforge.fileio import PathLike, check_not_input, require_file, sha256_file, staging_dir, write_json_atomic
from jetforge.optional import is_available
from jetforge.runtime.onnx_file import check_onnx_file, read_onnx
from jetforge.runtime.qdq_scales import qdq_model_problem
from jetforge.runtime.sidecar import read_sidecar, sidecar_path, static_shape
from jetforge.runtime.tensorrt.plan import BuildOptions
from jetforge.targets import get_target

log = logging.getLogger(__name__)


@dataclass
class CreateResult:
    path: Path
    manifest: Manifest
    tar: Optional[Path] = None
    warnings: List[str] = field(default_factory=list)


def _default_input_shapes(sidecar: Any) -> Dict[str, List[int]]:
    """Static shapes for the build: a dynamic batch axis becomes 1; any other dynamic axis needs --shape."""
    try:
        return {spec.name: static_shape(spec, 1, "the bundle") for spec in sidecar.inputs if spec.is_dynamic}
    except ModelError as err:
        raise BundleError(err.message, hint=err.hint) from err


def _resolve_targets(targets: Sequence[str]) -> List[Any]:
    """The target profiles, each once, in the order given."""
    if not targets:
        raise BundleError("a bundle needs at least one target", hint="pass --target NAME (see `jetforge targets list`)")
    resolved: List[Any] = []
    for name in targets:
        t = get_target(name)
        if t.name not in [r.name for r in resolved]:
            resolved.append(t)
    return resolved


def _check_destination(out_dir: Path, tar_path: Optional[Path], inputs: Sequence[PathLike], force: bool) -> None:
    """Refuse to write over an input (or a folder holding one), or over an existing folder or tar without ``--force``;
    with ``--force``, refuse to replace anything ``bundle create`` did not write (:func:`_check_replaceable`)."""
    check_not_input(out_dir, inputs, replaces_folder=True)
    if tar_path is not None:
        check_not_input(tar_path, inputs)
    for path, what in ((out_dir, "folder"), (tar_path, "tar file")):
        if path is not None and (path.exists() or path.is_symlink()) and not force:
            raise BundleError("%s already exists" % path,
                              hint="choose another path, or pass --force to replace the bundle %s" % what)
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise BundleError("%s exists and is not a folder" % out_dir, hint="choose another --out")
    if out_dir.exists():
        _check_replaceable(out_dir)
    if tar_path is not None and (tar_path.exists() or tar_path.is_symlink()):
        _check_replaceable_tar(tar_path)


def _check_replaceable(out_dir: Path) -> None:
    """``--force`` replaces only what ``bundle create`` wrote: an empty folder, or a bundle folder holding no file
    its manifest does not list.  Anything else (a project folder, a bundle the user added notes to) is refused
    whole, so ``--force`` can never delete a file jetforge did not create."""
    if not any(out_dir.iterdir()):
        return
    report = verify_bundle(out_dir)
    if report.manifest is None:
        raise BundleError("--force replaces only a bundle folder, and %s is not one (%s)"
                          % (out_dir, report.errors[0] if report.errors else "no manifest.json"),
                          hint="choose a new or empty --out; jetforge never deletes a folder it did not write")
    if report.unexpected:
        raise BundleError("%s holds %d file(s) that bundle create did not write (%s): --force would delete them"
                          % (out_dir, len(report.unexpected), ", ".join(report.unexpected[:3])),
                          hint="move those files out of the bundle folder, or choose another --out")


def _check_replaceable_tar(tar_path: Path) -> None:
    """``--force`` replaces only a tar that ``bundle create --tar`` wrote: one top folder holding a manifest.json."""
    if tar_path.is_symlink() or not tar_path.is_file():
        raise BundleError("%s exists and is not a plain file" % tar_path, hint="choose another --tar path")
    try:
        with tarfile.open(str(tar_path), "r:*") as tar:
            names = tar.getnames()
    except (tarfile.TarError, EOFError, OSError, ValueError):
        names = []
    tops = {n.split("/")[0] for n in names}
    if len(tops) != 1 or "%s/%s" % (next(iter(tops)), MANIFEST) not in names:
        raise BundleError("--force replaces only a bundle tar, and %s is not one" % tar_path,
                          hint="choose another --tar path; jetforge never deletes a file it did not write")


def _bundle_options(options: Optional[Any], int8: bool, sidecar: Any) -> Tuple[Any, Dict[str, Any], Any]:
    """(the build options, their manifest form without the board-decided keys, the options to plan with)."""
    opts = options if options is not None else BuildOptions(precision="int8" if int8 else "fp16")
    opt_dict = to_dict(opts)
    for key in BOARD_DECIDED:
        if opt_dict.get(key):
            raise BundleError("build option %s=%r cannot travel in a bundle: it is decided on the board"
                              % (key, opt_dict[key]),
                              hint="give calibration caches with --calib and drop %s from the build options" % key)
        opt_dict.pop(key, None)
    if not opt_dict.get("input_shapes") and not opt_dict.get("profiles"):
        opt_dict["input_shapes"] = _default_input_shapes(sidecar)
    options_for_plan = dataclasses.replace(opts, input_shapes=dict(opt_dict["input_shapes"] or {}))
    return opts, opt_dict, options_for_plan


def _stage_model_files(stage: Staging, model_path: Path, qdq_path: Optional[Path], precisions: Optional[PathLike],
                       app_config: Optional[PathLike], samples: Optional[Tuple[bytes, bytes]],
                       warnings: List[str]) -> Tuple[Path, Optional[Path]]:
    """Copy the model, its sidecar and the optional files into the staging folder; (ONNX, Q/DQ ONNX) there."""
    onnx_dst = stage.copy(model_path, ONNX, "onnx")
    stage.copy(sidecar_path(model_path), ONNX + ".json", "onnx_sidecar")
    _stage_external_data(stage, model_path, "model", "onnx_external_data", warnings)
    qdq_dst = None
    if qdq_path is not None:
        qdq_dst = stage.copy(qdq_path, QDQ, "qdq")
        _stage_external_data(stage, qdq_path, "Q/DQ model", "qdq_external_data", warnings)
        if sidecar_path(qdq_path).is_file():
            stage.copy(sidecar_path(qdq_path), QDQ + ".json", "qdq_sidecar")
        else:
            warnings.append("the Q/DQ model has no sidecar %s" % sidecar_path(qdq_path).name)
    if precisions is not None:
        layer_precisions_from_file(stage.copy(require_file(precisions, "per-layer precision list"), PRECISIONS,
                                              "precisions"))
    if app_config is not None:
        stage.copy(require_file(app_config, "app configuration"), APP_CONFIG, "app_config")
    if samples is not None:
        from jetforge.deploy.bundle_samples import ROLE_JSON, ROLE_NPZ, SAMPLES_JSON, SAMPLES_NPZ

        stage.write(samples[0], SAMPLES_NPZ, ROLE_NPZ)
        stage.write(samples[1], SAMPLES_JSON, ROLE_JSON)
    return onnx_dst, qdq_dst


def _check_qdq_model(qdq_path: Path) -> bool:
    """Refuse a Q/DQ model whose scales or zero points TensorRT cannot take, by the rules ``qat --translate`` applies
    (:mod:`jetforge.runtime.qdq_scales`); False when the ``onnx`` package is missing and only its bytes were checked.
    Checked here, so a broken one is named as the user's file, not the bundle's copy."""
    if not is_available("onnx"):
        check_onnx_file(qdq_path, "Q/DQ model")
        return False
    model = read_onnx(qdq_path, "Q/DQ model", purpose="checking a Q/DQ model's scales")
    problem = qdq_model_problem(model)
    if problem:
        raise ModelError("Q/DQ model %s: %s" % (qdq_path, problem),
                         hint="re-export it with INT8 zero points of 0 and calibrated, positive scales "
                              "(jetforge calibrate and jetforge qat write such models)")
    return True


def _stage_external_data(stage: Staging, model_path: Path, what: str, role: str, warnings: List[str]) -> None:
    """Copy the files ``model_path`` keeps its weights in, under the names the model gives them, beside the bundle's
    ONNX; a name that is already a file of the bundle with other content is refused (the model would read it)."""
    if not is_available("onnx"):
        warnings.append("the onnx package is not installed: weights kept outside %s (external data) cannot be "
                        "found and are not in the bundle" % model_path.name)
        return
    staged = {f.path: f for f in stage.files}
    for location in external_locations(model_path, what):
        src = model_path.parent / location
        if location in staged:
            if staged[location].sha256 != sha256_file(src):
                raise BundleError("%s %s keeps weights in %s, a name the bundle already uses for another file"
                                  % (what, model_path, location),
                                  hint="save its external data under another name (onnx.save(..., location=...))")
            continue
        stage.copy(src, location, role)


def _make_manifest(out_dir: Path, model_path: Path, sidecar: Any, resolved: List[Any],
                   per_target: Dict[str, List[str]], prepared: List[Prepared], stage: Staging,
                   calibration: List[Dict[str, Any]], opt_dict: Dict[str, Any], notes: List[str]) -> Manifest:
    manifest = Manifest(
        name=sanitise_bundle_name(out_dir.name), jetforge_version=jetforge.__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        model={"name": sidecar.model_name, "task": sidecar.task, "source": model_path.name,
               "inputs": [s.to_dict() for s in sidecar.inputs], "outputs": [s.to_dict() for s in sidecar.outputs],
               "labels": len(sidecar.labels)},
        targets=[{"name": t.name, "display_name": t.display_name, "kind": t.kind,
                  "tensorrt_versions": per_target[t.name], "dla_cores": t.dla_cores,
                  "compute_capability": "%d.%d" % t.compute_capability} for t in resolved],
        prepared=prepared, files=stage.files, calibration=calibration, build_options=opt_dict, notes=notes)
    manifest.bundle_hash = manifest.compute_hash()
    return manifest


def create_bundle(model: PathLike, out: PathLike, targets: Sequence[str], *, calib: Sequence[PathLike] = (),
                  qdq: Optional[PathLike] = None, precisions: Optional[PathLike] = None,
                  app_config: Optional[PathLike] = None, options: Optional[Any] = None,
                  tensorrt_versions: Sequence[str] = (), retarget_calib: bool = False, tar: Optional[PathLike] = None,
                  force: bool = False, samples: Optional[Tuple[bytes, bytes]] = None) -> CreateResult:
    """Assemble a bundle folder at ``out`` (and ``tar`` if given); see the module docstring.

    ``options`` is a :class:`~jetforge.runtime.tensorrt.plan.BuildOptions` (precision, DLA core, shapes,
    pools, per-layer precisions; default: INT8 when caches or a Q/DQ model are given, else FP16); its
    calibration cache, TensorRT version and timing cache are
    decided on the board.  ``tensorrt_versions`` restricts the versions prepared (default: every
    TensorRT of every target's JetPack releases).  ``retarget_calib`` re-stamps the first cache's
    scales for each version that has none (the scales do not depend on the TensorRT version).
    ``samples`` is the (npz, json) payload of :func:`jetforge.deploy.bundle_samples.samples_payload`:
    a few real inputs with jetforge's FP32 and simulated-INT8 outputs, for ``jetforge board-check``.
    """
    model_path = check_onnx_file(model)  # the user's file, checked whole before anything is copied
    out_dir = Path(out)
    resolved = _resolve_targets(targets)
    sidecar = read_sidecar(model_path)  # refuses a missing or stale sidecar with the fix
    qdq_path = Path(qdq) if qdq is not None else None
    qdq_unchecked = qdq_path is not None and not _check_qdq_model(qdq_path)
    inputs: List[PathLike] = [model_path, sidecar_path(model_path)] + list(calib)
    inputs += [p for p in (qdq_path, precisions, app_config) if p is not None]
    tar_path = Path(tar) if tar is not None else None
    _check_destination(out_dir, tar_path, inputs, force)
    opts, opt_dict, options_for_plan = _bundle_options(options, bool(calib or qdq_path), sidecar)

    warnings: List[str] = []
    notes: List[str] = []
    if qdq_unchecked:
        warnings.append("the onnx package is not installed: the Q/DQ model's scales and zero points are not checked")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Staging(staging_dir(out_dir))  # hidden, named after this process; a killed run's is removed
    try:
        onnx_dst, qdq_dst = _stage_model_files(stage, model_path, qdq_path, precisions, app_config, samples, warnings)
        calibration, first = stage_caches(stage, calib)
        per_target = versions_per_target(resolved, tensorrt_versions)
        if retarget_calib:
            retarget_caches(stage, calibration, first, per_target, notes)
        prepared = prepare_builds(resolved, per_target, opts, options_for_plan, stage.root, calibration,
                                  onnx_dst, qdq_dst, precisions is not None)
        warnings += ["not prepared for %s with TensorRT %s: %s" % (p.target, p.tensorrt, p.reason)
                     for p in prepared if not p.ok]
        manifest = _make_manifest(out_dir, model_path, sidecar, resolved, per_target, prepared, stage, calibration,
                                  opt_dict, notes)
        check_created(stage.root, manifest)
        write_json_atomic(stage.root / MANIFEST, manifest.to_dict())  # last: the folder is complete from here on
        swap_into_place(stage.root, out_dir)
    except BaseException:
        shutil.rmtree(str(stage.root), ignore_errors=True)
        raise
    result = CreateResult(path=out_dir, manifest=manifest, warnings=warnings)
    if tar_path is not None:
        result.tar = write_tar(out_dir, tar_path)
    for w in warnings:
        log.warning("%s", w)
    return result
