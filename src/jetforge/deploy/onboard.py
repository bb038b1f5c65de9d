"""``jetforge build BUNDLE --target auto`` on the board: detect, pick the INT8 source, build through the engine cache.

1. The bundle (folder or tar) is opened and verified against its manifest.
2. The target comes from ``--target NAME`` or, with ``auto``, from :func:`jetforge.targets.detect.detect`
   (device tree and L4T release on a Jetson, the GPU name elsewhere).  The TensorRT version is the
   installed one (``import tensorrt``); without TensorRT, the JetPack release's or ``--tensorrt``.
3. The bundle must have been prepared for that (target, TensorRT version); otherwise
   :class:`~jetforge.deploy.bundle.BundleNotPreparedError` names what it was prepared for.
4. The calibration cache stamped for that TensorRT, or the Q/DQ model, is chosen by
   :func:`~jetforge.runtime.tensorrt.int8_source.choose_int8_source`; the plan is made with the bundle's options.
5. With TensorRT: the engine comes from the :class:`~jetforge.runtime.tensorrt.engine_cache.EngineCache`
   (built once, then loaded).  Without TensorRT: nothing is built; the result says so and names the
   ONNX Runtime fallback (``jetforge bench BUNDLE/model.onnx``), and the CLI exits with
   :data:`EXIT_NO_TENSORRT`.
"""

import dataclasses
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from jetforge.deploy.bundle import (PATH_OPTIONS, PRECISIONS, Bundle, BundleError, BundleNotPreparedError,
                                    layer_precisions_from_file, open_bundle)
from jetforge.errors import TargetError
from jetforge.fileio import PathLike, atomic_output
from jetforge.runtime.tensorrt.int8_source import choose_int8_source
from jetforge.runtime.tensorrt.version import TensorRTVersion
from jetforge.runtime.tensorrt.version import version_text as trt_version_string

log = logging.getLogger(__name__)

#: Exit code of ``jetforge build BUNDLE`` where TensorRT is not installed (no engine; ONNX Runtime fallback).
EXIT_NO_TENSORRT = 3
NO_TENSORRT = "TensorRT is not installed here"


@dataclass
class Board:
    """The machine the build runs on, as far as it can be told."""

    target: Any                         # jetforge.targets.Target or None
    how: str
    tensorrt_installed: Optional[str]   # version of `import tensorrt`, None without it
    tensorrt_version: Optional[str]     # the version to build for (installed, else JetPack's, else --tensorrt)
    device_name: str
    jetpack: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target.name if self.target is not None else None, "how": self.how,
                "tensorrt_installed": self.tensorrt_installed, "tensorrt_version": self.tensorrt_version,
                "device_name": self.device_name, "jetpack": self.jetpack}


def installed_tensorrt() -> Optional[str]:
    """The version of JetPack/desktop TensorRT (``import tensorrt``), or None where it is absent."""
    from jetforge.runtime.tensorrt.library import installed_version

    return installed_version()


def detect_board(target: Optional[str] = "auto", tensorrt: Optional[str] = None,
                 installed: Optional[str] = "probe", detection: Any = None) -> Board:
    """Resolve ``target`` (a name or ``auto``) and the TensorRT version; ``installed="probe"`` imports TensorRT."""
    from jetforge.targets import get_target

    if installed == "probe":
        installed = installed_tensorrt()
    det = detection
    if det is None and (target in (None, "auto")):
        from jetforge.targets.detect import detect

        det = detect()
    if target in (None, "auto"):
        resolved = det.target
        how = det.how
    else:
        resolved = get_target(str(target))
        how = "--target %s" % target
    jetpack = det.jetpack if det is not None else None
    version = installed
    if tensorrt and installed and not TensorRTVersion.parse(tensorrt).same_release(TensorRTVersion.parse(installed)):
        raise TargetError("--tensorrt %s differs from the installed TensorRT %s" % (tensorrt, installed),
                          hint="drop --tensorrt: engines are built with the installed TensorRT")
    if version is None:
        version = tensorrt or (jetpack.tensorrt if jetpack is not None else None)
    if version is None and resolved is not None and target not in (None, "auto"):
        default = getattr(resolved, "default_tensorrt", "any")
        version = None if default == "any" else default   # a named Jetson target: its newest JetPack's
    name = ""
    if det is not None:
        name = det.model or (det.gpu_names[0] if det.gpu_names else "")
    if not name and resolved is not None:
        name = resolved.display_name
    return Board(target=resolved, how=how, tensorrt_installed=installed, tensorrt_version=version,
                 device_name=name or "unknown", jetpack=jetpack.jetpack if jetpack is not None else None)


@dataclass
class Selection:
    """The plan for this board and what it was made from."""

    plan: Any
    onnx: Path
    int8_source: Optional[str]
    cache: Optional[Path]
    options: Any
    notes: List[str] = field(default_factory=list)


def check_prepared(bundle: Bundle, target_name: str, tensorrt: str) -> None:
    """Refuse a (target, TensorRT) the bundle was not prepared for, naming what it was prepared for."""
    m = bundle.manifest
    version = trt_version_string(tensorrt)
    ok = ["%s/TensorRT %s" % (p.target, p.tensorrt) for p in m.prepared if p.ok]
    if target_name not in m.target_names:
        raise BundleNotPreparedError(
            "bundle %s was prepared for %s, not for this board (%s)" % (m.name, ", ".join(ok), target_name),
            hint="re-create the bundle on the workstation with --target %s" % target_name)
    rows = m.prepared_for(target_name, version)
    if not rows:
        raise BundleNotPreparedError(
            "bundle %s was not prepared for TensorRT %s on %s (prepared: %s)" % (m.name, version, target_name,
                                                                                   ", ".join(ok)),
            hint="re-create the bundle with --tensorrt %s (and a calibration cache for it), or use a board with "
                 "the JetPack it was prepared for" % version)
    if not rows[0].ok:
        raise BundleNotPreparedError(
            "bundle %s cannot build on %s with TensorRT %s: %s" % (m.name, target_name, version, rows[0].reason),
            hint="re-create the bundle with what it names (e.g. --calib for TensorRT %s)" % version)


def select(bundle: Bundle, target: Any, tensorrt: str, overrides: Optional[Dict[str, Any]] = None) -> Selection:
    """The build plan for ``target``/``tensorrt`` from the bundle's options (``overrides`` win)."""
    from jetforge.runtime.tensorrt.plan import load_build_options, make_plan

    base = dict(bundle.manifest.build_options)
    named = [key for key in PATH_OPTIONS if base.get(key) is not None]
    if named:  # verify_bundle refuses these too; never let a manifest choose where the builder reads or writes
        raise BundleError("bundle %s sets the build option %s, which names a path: options from a bundle may not"
                          % (bundle.manifest.name, named[0]), hint="re-create the bundle with `jetforge bundle create`")
    base.update(overrides or {})
    options = load_build_options(base=base)
    device = "dla" if options.dla_core is not None else "gpu"
    versions = [c["tensorrt"] for c in bundle.manifest.calibration]
    source, why = choose_int8_source(tensorrt, device, options.precision, versions, bundle.qdq is not None)
    notes = [why] if why else []
    if source is None and why and options.precision == "int8":
        raise BundleNotPreparedError("bundle %s has no INT8 source for this build: %s" % (bundle.manifest.name, why),
                                     hint="re-create the bundle with --calib (a cache for TensorRT %s) or --qdq"
                                          % trt_version_string(tensorrt))
    cache = bundle.cache_path(tensorrt) if source == "cache" else None
    onnx = bundle.qdq if source == "qdq" else bundle.onnx
    assert onnx is not None
    options = dataclasses.replace(options, tensorrt_version=trt_version_string(tensorrt),
                                  calibration_cache=str(cache) if cache else None)
    precisions = bundle.file_path("precisions")
    if source == "cache" and precisions is not None and not options.layer_precisions:
        options.layer_precisions = layer_precisions_from_file(precisions)
        notes.append("%d layer(s) kept in FP16 from %s" % (len(options.layer_precisions), PRECISIONS))
    plan = make_plan(onnx, target, options)
    return Selection(plan=plan, onnx=onnx, int8_source=source, cache=cache, options=options, notes=notes)


def engine_key(bundle: Bundle, board: Board, selection: Selection) -> Any:
    from jetforge.runtime.tensorrt.engine_cache import EngineKey
    from jetforge.config import to_dict

    opts = to_dict(selection.options)
    opts.pop("calibration_cache", None)     # a path: its content is part of the bundle hash
    opts.pop("tensorrt_version", None)      # in the key on its own
    opts.pop("timing_cache", None)
    cc = "%d.%d" % board.target.compute_capability
    return EngineKey(bundle_hash=bundle.manifest.bundle_hash, onnx_sha256=selection.plan.onnx_sha256,
                     tensorrt_version=str(board.tensorrt_installed or board.tensorrt_version),
                     device_name=board.device_name, compute_capability=cc, dla_core=selection.plan.dla_core,
                     build_options=opts, target=board.target.name)


def default_builder(plan: Any, engine_path: Path) -> Any:
    from jetforge.runtime.tensorrt.builder import build_engine

    return build_engine(plan, engine_path)


def build_bundle(path: PathLike, target: Optional[str] = "auto", tensorrt: Optional[str] = None,
                 overrides: Optional[Dict[str, Any]] = None, plan_only: bool = False,
                 cache: Any = None, builder: Optional[Callable[[Any, Path], Any]] = None,
                 board: Optional[Board] = None, output: Optional[PathLike] = None) -> Dict[str, Any]:
    """Build (or load from the engine cache) the engine of a bundle on this machine; see the module docstring.

    Returns a JSON-friendly result.  ``result["tensorrt"]`` is False where TensorRT is missing: then
    ``result["fallback"]`` names the ONNX model that ``jetforge bench`` runs on ONNX Runtime instead.
    ``builder(plan, engine_path)`` defaults to the TensorRT builder; ``board`` to :func:`detect_board`.
    """
    from jetforge.runtime.tensorrt.engine_cache import EngineCache

    bundle = open_bundle(path)
    board = board or detect_board(target, tensorrt)
    result: Dict[str, Any] = {"bundle": str(bundle.path), "bundle_name": bundle.manifest.name,
                              "bundle_hash": bundle.manifest.bundle_hash, "board": board.to_dict(),
                              "tensorrt": board.tensorrt_installed is not None, "engine": None, "cache": None,
                              "plan": None, "fallback": None, "notes": []}
    fallback = {"backend": "onnxruntime", "model": str(bundle.onnx),
                "reason": "%s: no TensorRT engine; `jetforge bench %s` measures the ONNX model on ONNX Runtime, "
                          "not TensorRT" % (NO_TENSORRT, bundle.onnx)}
    if board.target is None:
        if board.tensorrt_installed is None and not plan_only:
            result["fallback"] = fallback
            result["notes"].append("no target detected (%s)" % board.how)
            return result
        raise TargetError("cannot tell which board this is (%s)" % board.how,
                          hint="pass --target NAME (one of the bundle's: %s)"
                               % ", ".join(bundle.manifest.target_names))
    if board.tensorrt_version is None:
        if board.tensorrt_installed is None and not plan_only:
            result["fallback"] = fallback
            result["notes"].append("TensorRT version unknown: %s is not a Jetson with a known JetPack" % board.target.name)
            return result
        raise TargetError("no TensorRT version for %s: TensorRT is not installed and no JetPack was detected"
                          % board.target.name, hint="pass --tensorrt VERSION (one the bundle was prepared for)")
    check_prepared(bundle, board.target.name, board.tensorrt_version)
    selection = select(bundle, board.target, board.tensorrt_version, overrides)
    result["plan"] = selection.plan.to_dict()
    result["int8_source"] = selection.int8_source
    result["onnx"] = str(selection.onnx)
    result["notes"].extend(selection.notes)
    if plan_only:
        return result
    if board.tensorrt_installed is None:
        result["fallback"] = fallback
        return result
    engines = cache if cache is not None else EngineCache()
    key = engine_key(bundle, board, selection)
    build = builder or default_builder
    resolved = engines.get_or_build(key, lambda engine_path: build(selection.plan, engine_path))
    result.update(resolved.to_dict())
    result["engine_sidecar"] = str(resolved.engine) + ".json"
    if output is not None:
        out = Path(output)
        for src, dst in ((resolved.engine, out), (Path(str(resolved.engine) + ".json"), Path(str(out) + ".json"))):
            with atomic_output(dst) as tmp:
                shutil.copyfile(str(src), str(tmp))
        result["copied_to"] = str(out)
    return result
