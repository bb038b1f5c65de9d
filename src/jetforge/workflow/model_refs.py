"""Model names and files resolved into what the tasks and commands run: where the commands reach torch.

The bundled apps run ONNX models with ONNX Runtime; the ONNX files are exported here, the first time,
from verified assets, and reused while their sidecars match the files, the weights and this jetforge:
torchvision's MobileNetV2 for ``jetforge app classify`` / ``jetforge demo --app classify``
(:func:`ensure_default_model`) and MTCNN's three nets for ``jetforge app faces``
(:func:`ensure_mtcnn_models`).  :func:`prepare_app_models` fills an app's model option before the app
builds its task, so tasks never import the CLI or torch.

``export`` and ``prune`` take an architecture name with ``--weights`` (a state dict, read
weights-only) and ``--prune-plan`` (:func:`load_torch_model`; the flags are
:func:`jetforge.cli.arguments.add_model_flags`); a model *file* that can run code when loaded (a pickled
module, a ``.pt2`` archive) needs ``--trust-pickle`` (see :mod:`jetforge.compress.checkpoint`).
This module (in ``workflow``, which may reach into ``compress`` lazily) is where the commands touch torch.
"""

import importlib
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import jetforge
from jetforge.apps.labels import load_labels
from jetforge.assets import asset_path, cache_root, get_spec
from jetforge.errors import ConfigError, JetforgeError
from jetforge.optional import is_available
from jetforge.runtime.sidecar import read_sidecar, sidecar_path

log = logging.getLogger(__name__)

MTCNN_FILES = {"pnet": "pnet.onnx", "rnet": "rnet.onnx", "onet": "onet.onnx"}
MTCNN_WEIGHTS = {"pnet": "pnet.pt", "rnet": "rnet.pt", "onet": "onet.pt"}


def mtcnn_dir(models_dir: Optional[Path] = None) -> Path:
    return Path(models_dir) if models_dir else cache_root() / "models" / "mtcnn"


def mtcnn_is_current(folder: Path) -> bool:
    hashes = get_spec("mtcnn").files
    for name, fname in MTCNN_FILES.items():
        path = folder / fname
        if not path.is_file():
            return False
        try:
            made = read_sidecar(path, verify_hash=True).produced_by
        except JetforgeError as err:
            log.info("re-exporting MTCNN: %s", err.one_line())
            return False
        if made.get("weights_sha256") != hashes[MTCNN_WEIGHTS[name]] or made.get("version") != jetforge.__version__:
            return False
    return True


def ensure_mtcnn_models(models_dir: Optional[Path] = None) -> Tuple[Path, bool]:
    """The folder holding pnet/rnet/onet.onnx, exported now if missing or stale; (folder, exported now)."""
    folder = mtcnn_dir(models_dir)
    if mtcnn_is_current(folder):
        return folder, False
    from jetforge.compress.models.mtcnn import export_mtcnn_onnx, load_mtcnn

    weights = asset_path("mtcnn", "pnet.pt").parent
    log.info("exporting MTCNN (PNet, RNet, ONet) to %s (once; later runs reuse it)", folder)
    export_mtcnn_onnx(load_mtcnn(weights), folder)
    return folder, True


# The default classifier: torchvision's MobileNetV2 ImageNet weights, as a jetforge asset.
DEFAULT_MODEL = "mobilenet_v2"
DEFAULT_WEIGHTS = ("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth")


def models_cache_dir() -> Path:
    return cache_root() / "models"


def _weights_sha256() -> str:
    return get_spec(DEFAULT_WEIGHTS[0]).files[DEFAULT_WEIGHTS[1]]


def default_model_path(models_dir: Optional[Path] = None) -> Path:
    return Path(models_dir or models_cache_dir()) / (Path(DEFAULT_WEIGHTS[1]).stem + ".onnx")


def cached_model_is_current(path: Path) -> bool:
    """Whether the cached export can be reused: its sidecar matches its hash, these weights, this jetforge."""
    if not path.is_file() or not sidecar_path(path).is_file():
        return False
    try:
        sidecar = read_sidecar(path, verify_hash=True)
    except JetforgeError as err:
        log.info("re-exporting the cached model: %s", err.one_line())
        return False
    made = sidecar.produced_by
    return made.get("weights_sha256") == _weights_sha256() and made.get("version") == jetforge.__version__


def ensure_default_model(models_dir: Optional[Path] = None) -> Tuple[Path, bool]:
    """The default MobileNetV2 ONNX in the cache, exported now if missing or stale; (path, exported now)."""
    path = default_model_path(models_dir)
    if cached_model_is_current(path):
        return path, False
    # Export needs torch: the one place the apps reach into jetforge.compress.
    from jetforge.compress.export import export_onnx
    from jetforge.compress.models import get_pretrained_spec, load_pretrained

    spec = get_pretrained_spec(DEFAULT_MODEL)
    weights = asset_path(*DEFAULT_WEIGHTS)
    log.info("exporting %s to %s (once; later runs reuse it)", DEFAULT_MODEL, path)
    model = load_pretrained(DEFAULT_MODEL, weights)
    export_onnx(model, path, spec.input_shape, task="classify", model_name=DEFAULT_MODEL,
                labels=load_labels(spec.labels), preprocess=spec.preprocess,
                provenance={"weights": weights.name, "weights_sha256": _weights_sha256(),
                            "weights_source": spec.source})
    return path, True


# The people app's CNN detector: the SSDLite-MobileNetV2 port.  Another person detector (a compressed student) is
# one more entry here, name -> (asset, weights file, "module:exporter"), and becomes the default by changing
# PERSON_DETECTOR; the exporter is called as exporter(weights_path, out_path, provenance=...).
PERSON_DETECTOR = "ssdlite_mobilenet_v2_person"
PERSON_DETECTORS = {
    "ssdlite_mobilenet_v2_person": ("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb",
                                    "jetforge.compress.models.ssdlite_export:export_person_detector"),
}


def person_detector_path(name: str = PERSON_DETECTOR, models_dir: Optional[Path] = None) -> Path:
    return Path(models_dir or models_cache_dir()) / (name + ".onnx")


def ensure_person_detector(name: str = PERSON_DETECTOR, models_dir: Optional[Path] = None) -> Tuple[Path, bool]:
    """The person detector's ONNX body in the cache, exported now if missing or stale; (path, exported now).

    Current means: the sidecar matches the file's hash, the weights' hash and this jetforge version.  Exporting
    reads the weights with torch, so on a machine without torch (a board) a missing export is one clear error
    that says how to bring an exported file instead.
    """
    if name not in PERSON_DETECTORS:
        raise ConfigError("no person detector named %r" % name, hint="known: %s" % ", ".join(sorted(PERSON_DETECTORS)))
    asset, filename, exporter = PERSON_DETECTORS[name]
    weights_sha256 = get_spec(asset).files[filename]
    path = person_detector_path(name, models_dir)
    if _export_is_current(path, weights_sha256):
        return path, False
    if not is_available("torch"):
        raise ConfigError("the person detector %s is not exported yet, and exporting it needs torch, which this "
                          "machine lacks" % name,
                          hint="on a workstation run `jetforge export --model %s --out det.onnx`, copy det.onnx and "
                               "det.onnx.json here and pass --detector-model det.onnx" % name)
    module, attr = exporter.split(":")
    export = getattr(importlib.import_module(module), attr)
    log.info("exporting the person detector %s to %s (once; later runs reuse it)", name, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    export(asset_path(asset, filename), path, provenance={"source_model": name})
    return path, True


def _export_is_current(path: Path, weights_sha256: str) -> bool:
    if not path.is_file() or not sidecar_path(path).is_file():
        return False
    try:
        made = read_sidecar(path, verify_hash=True).produced_by
    except JetforgeError as err:
        log.info("re-exporting %s: %s", path.name, err.one_line())
        return False
    return made.get("weights_sha256") == weights_sha256 and made.get("version") == jetforge.__version__


EXPORTED_NOTE = ("the %s exported in this run, so torch was loaded in this process; "
                 "rerun to measure memory without it")


def prepare_app_models(app_name: str, args: Any) -> List[str]:
    """Fill in the model files an app needs that only the CLI can make (exporting needs torch); notes for the run.

    Tasks never import the CLI: ``jetforge app classify`` without ``--model`` gets the cached MobileNetV2
    export, ``jetforge app faces`` without ``--models`` the MTCNN folder, ``jetforge app people`` (and
    ``action``) with ``--detector ssd`` and no ``--detector-model`` the cached person detector.
    """
    exported = False
    if app_name == "classify" and not getattr(args, "model", None):
        path, exported = ensure_default_model()
        args.model = str(path)
        what = "model was"
    elif app_name == "faces" and not getattr(args, "models", None):
        folder, exported = ensure_mtcnn_models()
        args.models = str(folder)
        what = "MTCNN nets were"
    elif (app_name in ("people", "action") and getattr(args, "detector", None) == "ssd"
          and not getattr(args, "detector_model", None)):
        path, exported = ensure_person_detector()
        args.detector_model = str(path)
        what = "person detector was"
    return [EXPORTED_NOTE % what] if exported else []


TRUST_FLAG = "--trust-pickle"
MODEL_FILE_SUFFIXES = (".pt", ".pth", ".pt2", ".ckpt")


def names_a_file(spec: str) -> bool:
    """Whether ``--model SPEC`` names a model file (by its suffix, or an existing file) rather than an architecture."""
    path = Path(spec)
    return path.suffix.lower() in MODEL_FILE_SUFFIXES or path.is_file()


def load_torch_model(spec: str, weights: Optional[str] = None, prune_plan: Optional[str] = None,
                     trust_pickle: bool = False) -> Tuple[Any, dict]:
    """The torch model ``spec`` names (eval mode) and what is known about it (task, labels, preprocess).

    ``spec`` is an architecture -- a pretrained name (weights from the asset cache unless
    ``weights`` is given), a torchvision name (random weights unless ``weights`` is given) --
    optionally pruned by replaying ``prune_plan``; or a model file, which can run code when
    loaded and so needs ``trust_pickle``: a whole pickled module (``.pt``/``.pth``) or a
    ``torch.export`` archive (``.pt2``).  Every file is read by
    :mod:`jetforge.compress.checkpoint`.  Shared by ``prune`` and ``export``.
    """
    path = Path(spec)
    if names_a_file(spec):
        if weights or prune_plan:
            raise ConfigError("--weights and --prune-plan go with an architecture name, and --model names a file "
                              "(%s)" % spec, hint="--model ARCH --weights %s" % (weights or spec))
        from jetforge.compress.checkpoint import load_model_file

        return load_model_file(path, trusted=trust_pickle, opt_in=TRUST_FLAG)
    from jetforge.compress.models import PRETRAINED, apply_prune_plan, build_architecture, model_from_weights

    meta: Dict[str, Any] = {"name": spec}
    if spec in PRETRAINED:
        meta = _pretrained_meta(spec)
    if weights is not None:
        model = model_from_weights(spec, weights, prune_plan, trusted=trust_pickle, opt_in=TRUST_FLAG)
        return model, _fit_labels(meta, model)
    if spec in PRETRAINED:
        from jetforge.compress.models import load_pretrained

        p = PRETRAINED[spec]
        model = load_pretrained(spec, asset_path(p.asset, p.filename))
    else:
        model = build_architecture(spec)
        log.warning("%s has random weights (give --weights for yours; no pretrained weights are available offline): "
                    "the pruned structure and speed are meaningful, its accuracy is not", spec)
    if prune_plan is not None:
        apply_prune_plan(model, prune_plan)
    return model.eval(), meta


def _pretrained_meta(spec: str) -> Dict[str, Any]:
    from jetforge.compress.models import PRETRAINED

    p = PRETRAINED[spec]
    labels: List[str] = []
    try:
        labels = list(load_labels(p.labels)) if p.labels else []
    except Exception as err:  # labels are a convenience for the sidecar, not needed to prune
        log.warning("no labels for %s: %s", spec, err)
    return {"task": getattr(p, "task", "classify"), "name": spec, "labels": labels, "preprocess": p.preprocess,
            "input_shape": tuple(p.input_shape)}


def _fit_labels(meta: Dict[str, Any], model: Any) -> Dict[str, Any]:
    """Drop the pretrained labels when the loaded weights classify something else (another class count)."""
    import torch

    labels = meta.get("labels")
    if labels:
        heads = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if not heads or heads[-1].out_features != len(labels):
            log.info("%s: the weights have their own classes; the %d pretrained labels are not recorded "
                     "(pass --labels)", meta["name"], len(labels))
            meta = dict(meta, labels=[])
    return meta


__all__ = ["PERSON_DETECTOR", "TRUST_FLAG", "ensure_default_model", "ensure_mtcnn_models", "ensure_person_detector",
           "load_torch_model", "mtcnn_dir", "names_a_file", "mtcnn_is_current", "prepare_app_models"]
