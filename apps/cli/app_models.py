"""Model files the bundled apps need that are made from pretrained weights with torch, once, into the cache.

``jetforge app faces`` runs MTCNN's three nets with ONNX Runtime; they are exported
here from the verified ``mtcnn`` asset (facenet-pytorch's weights) the first time and
reused while their sidecars match the files, these weights and this jetforge.  Only
this module (in ``apps/cli``, which may reach into ``compress`` lazily) touches torch.
"""

import logging
from pathlib import Path
from typing import Any, List, Optional, Tuple

import jetforge
from jetforge.errors import InputFileError, JetforgeError

log = logging.getLogger(__name__)

MTCNN_FILES = {"pnet": "pnet.onnx", "rnet": "rnet.onnx", "onet": "onet.onnx"}
MTCNN_WEIGHTS = {"pnet": "pnet.pt", "rnet": "rnet.pt", "onet": "onet.pt"}


def mtcnn_dir(models_dir: Optional[Path] = None) -> Path:
    from jetforge.apps.assets import cache_root

    return Path(models_dir) if models_dir else cache_root() / "models" / "mtcnn"


def mtcnn_is_current(folder: Path) -> bool:
    from jetforge.apps.assets import get_spec
    from jetforge.runtime.sidecar import read_sidecar

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
    from jetforge.apps.assets import asset_path
    from jetforge.compress.models.mtcnn import export_mtcnn_onnx, load_mtcnn

    weights = asset_path("mtcnn", "pnet.pt").parent
    log.info("exporting MTCNN (PNet, RNet, ONet) to %s (once; later runs reuse it)", folder)
    export_mtcnn_onnx(load_mtcnn(weights), folder)
    return folder, True


__all__ = ["ensure_mtcnn_models", "mtcnn_dir", "mtcnn_is_current"]


def load_torch_model(spec: str) -> Tuple[Any, dict]:
    """The torch model named or stored at ``spec`` (eval mode) and what is known about it (task, labels, preprocess).

    ``spec`` is a pretrained name (weights from the asset cache), a torchvision architecture (random weights,
    with a warning) or a ``.pt`` file holding a whole pickled module.  Shared by ``prune`` and ``export``.
    """
    from jetforge.compress.models import PRETRAINED, load_pretrained

    if spec in PRETRAINED:
        from jetforge.apps.assets import asset_path
        from jetforge.apps.labels import load_labels

        p = PRETRAINED[spec]
        model = load_pretrained(spec, asset_path(p.asset, p.filename))
        labels: List[str] = []
        try:
            labels = list(load_labels(p.labels))
        except Exception as err:  # labels are a convenience for the sidecar, not needed to prune
            log.warning("no labels for %s: %s", spec, err)
        return model, {"task": "classify", "name": spec, "labels": labels, "preprocess": p.preprocess,
                       "input_shape": tuple(p.input_shape)}
    path = Path(spec)
    if path.suffix in (".pt", ".pth"):
        if not path.is_file():
            raise InputFileError("model file %s does not exist" % path, hint="check the path")
        import torch

        # A whole pickled module (torch.save(model)): only load files you trust.
        model = torch.load(str(path), map_location="cpu", weights_only=False)
        if not isinstance(model, torch.nn.Module):
            raise InputFileError("%s holds a %s, not a torch module" % (path, type(model).__name__),
                                 hint="save the whole model with torch.save(model, path), not its state dict")
        return model.eval(), {"name": path.stem}
    from jetforge.optional import require

    torchvision = require("torchvision", "building torchvision architectures to prune")
    try:
        model = torchvision.models.get_model(spec, weights=None)
    except ValueError:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("model", spec, list(PRETRAINED) + list(torchvision.models.list_models()),
                               hint="name mobilenet_v2, a torchvision architecture, or a .pt file") from None
    log.warning("%s has random weights (no pretrained weights are available offline); the pruned structure "
                "and speed are meaningful, its accuracy is not", spec)
    return model.eval(), {"name": spec}
