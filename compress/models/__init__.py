"""Model definitions in plain torch, and loading of their real pretrained weights.

The weights come from :mod:`jetforge.apps.assets` (PyPI/Debian packages, verified
by hash).  ``compress`` may not import ``apps`` (see docs/CONVENTIONS.md), so the
caller resolves the file and passes it in::

    from jetforge.apps.assets import asset_path
    from jetforge.compress.models import PRETRAINED, load_pretrained
    spec = PRETRAINED["mobilenet_v2"]
    model = load_pretrained("mobilenet_v2", asset_path(spec.asset, spec.filename))
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict

from jetforge.errors import CompressError, ModelError, UnknownNameError
from jetforge.fileio import PathLike, require_file, sha256_file
from jetforge.optional import require
from jetforge.runtime.preprocess import IMAGENET_TFLITE, IMAGENET_TORCHVISION, Preprocess


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
    torch = require("torch", "loading pretrained weights")
    spec = get_pretrained_spec(name)
    path = require_file(weights, "weights file for %s" % name,
                        hint="fetch it with `jetforge assets fetch %s`" % spec.asset)
    if verify_hash and sha256_file(path) != spec.sha256:
        raise ModelError("%s is not the expected %s weights (sha256 differs from %s...)" % (path, name, spec.sha256[:12]),
                         hint="re-fetch with `jetforge assets fetch %s --force`" % spec.asset)
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:
        raise ModelError("cannot read weights %s: %s" % (path, err), hint="re-fetch the asset") from err
    model = build(name)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CompressError("weights %s do not fit the %s architecture: %s" % (path, name, str(err).splitlines()[0]))
    return model.eval()


__all__ = ["PRETRAINED", "PretrainedSpec", "build", "get_pretrained_spec", "load_pretrained"]
