"""Model files the bundled apps need that are made from pretrained weights with torch, once, into the cache.

``jetforge app faces`` runs MTCNN's three nets with ONNX Runtime; they are exported
here from the verified ``mtcnn`` asset (facenet-pytorch's weights) the first time and
reused while their sidecars match the files, these weights and this jetforge.  Only
this module (in ``apps/cli``, which may reach into ``compress`` lazily) touches torch.
"""

import logging
from pathlib import Path
from typing import Optional, Tuple

import jetforge
from jetforge.errors import JetforgeError

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
