"""MTCNN's three networks (PNet, RNet, ONet) in plain torch, key-for-key compatible with facenet-pytorch.

Zhang et al. 2016, "Joint Face Detection and Alignment using Multi-task Cascaded
Convolutional Networks".  The class definitions follow facenet-pytorch 2.6.0
(``facenet_pytorch/models/mtcnn.py``, MIT licence, Tim Esler), whose weights
(``pnet.pt``, ``rnet.pt``, ``onet.pt``, converted from the authors' Caffe models) are the
jetforge asset ``mtcnn``.  Only the module definitions are reproduced; facenet-pytorch
itself (which needs torchvision and requests) is not used.

Conventions, checked against facenet-pytorch's ``detect_face``:

* input: RGB, NCHW where H is the image rows and W the columns (``imgs.permute(0, 3, 1, 2)``
  of an HxWx3 array: *no* transposition of the image), values ``(x - 127.5) * 0.0078125``;
* the Caffe weights were trained on column-major (transposed) images; facenet-pytorch
  compensates inside RNet and ONet by flattening the last feature map as
  ``permute(0, 3, 2, 1)`` (N, W, H, C) before the first dense layer.  PNet is fully
  convolutional and needs nothing;
* outputs: PNet ``reg`` (N, 4, H', W') box offsets (x1, y1, x2, y2) and ``prob`` (N, 2, H', W')
  softmax over (non-face, face); RNet ``reg`` (N, 4), ``prob`` (N, 2); ONet ``reg`` (N, 4),
  ``landmarks`` (N, 10) as five x then five y in box-relative units, ``prob`` (N, 2).

:func:`export_mtcnn_onnx` writes ``pnet.onnx`` (dynamic batch, height and width),
``rnet.onnx`` (N x 3 x 24 x 24) and ``onet.onnx`` (N x 3 x 48 x 48) with sidecars
(task "detect").
"""

import logging
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from jetforge.errors import CompressError, ModelError
from jetforge.fileio import PathLike, atomic_output, require_file, sha256_file
from jetforge.runtime.inputs import Preprocess
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, produced_by, write_sidecar

log = logging.getLogger(__name__)

ASSET = "mtcnn"
WEIGHT_FILES = {"pnet": "pnet.pt", "rnet": "rnet.pt", "onet": "onet.pt"}
# sha256 of the asset files (facenet-pytorch 2.6.0 wheel), as in jetforge/assets/catalog.json
WEIGHT_SHA256 = {
    "pnet": "a2a71925e0b9996a42f63e47efc1ca19043e69558b5c523b978d611dfae49c8f",
    "rnet": "bbb937de72efc9ef83b186c49f5f558467a1d7e3453a8ece0d71a886633f6a86",
    "onet": "165bfbe42940416ccfb977545cf0e976d5bf321f67083ae2aaaa5c764280118d",
}
INPUT_SIZE = {"pnet": None, "rnet": 24, "onet": 48}
OUTPUT_NAMES = {"pnet": ("reg", "prob"), "rnet": ("reg", "prob"), "onet": ("reg", "landmarks", "prob")}
LABELS = ["background", "face"]
OPSET = 17

# (x - 127.5) * 0.0078125 == (x - 127.5) / 128, on RGB pixels.  The size is nominal for PNet (any H, W >= 12).
MTCNN_PREPROCESS = {
    "pnet": Preprocess(height=12, width=12, resize="stretch", color="rgb", scale=1.0, mean=(127.5,),
                       std=(128.0,), interpolation="area"),
    "rnet": Preprocess(height=24, width=24, resize="stretch", color="rgb", scale=1.0, mean=(127.5,),
                       std=(128.0,), interpolation="area"),
    "onet": Preprocess(height=48, width=48, resize="stretch", color="rgb", scale=1.0, mean=(127.5,),
                       std=(128.0,), interpolation="area"),
}


class PNet(nn.Module):
    """Proposal network: fully convolutional, 12x12 receptive field, stride 2."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 10, kernel_size=3)
        self.prelu1 = nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(10, 16, kernel_size=3)
        self.prelu2 = nn.PReLU(16)
        self.conv3 = nn.Conv2d(16, 32, kernel_size=3)
        self.prelu3 = nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, kernel_size=1)
        self.softmax4_1 = nn.Softmax(dim=1)
        self.conv4_2 = nn.Conv2d(32, 4, kernel_size=1)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu2(self.conv2(x))
        x = self.prelu3(self.conv3(x))
        prob = self.softmax4_1(self.conv4_1(x))
        reg = self.conv4_2(x)
        return reg, prob


class RNet(nn.Module):
    """Refinement network on 24x24 crops."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 28, kernel_size=3)
        self.prelu1 = nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(28, 48, kernel_size=3)
        self.prelu2 = nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(48, 64, kernel_size=2)
        self.prelu3 = nn.PReLU(64)
        self.dense4 = nn.Linear(576, 128)
        self.prelu4 = nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.softmax5_1 = nn.Softmax(dim=1)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        x = x.permute(0, 3, 2, 1).contiguous()  # the Caffe weights' transposed (column-major) order
        x = self.prelu4(self.dense4(x.reshape(x.shape[0], -1)))
        prob = self.softmax5_1(self.dense5_1(x))
        reg = self.dense5_2(x)
        return reg, prob


class ONet(nn.Module):
    """Output network on 48x48 crops: box, five landmarks, face probability."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3)
        self.prelu1 = nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        self.prelu2 = nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(64, 64, kernel_size=3)
        self.prelu3 = nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4 = nn.Conv2d(64, 128, kernel_size=2)
        self.prelu4 = nn.PReLU(128)
        self.dense5 = nn.Linear(1152, 256)
        self.prelu5 = nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.softmax6_1 = nn.Softmax(dim=1)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = x.permute(0, 3, 2, 1).contiguous()  # the Caffe weights' transposed (column-major) order
        x = self.prelu5(self.dense5(x.reshape(x.shape[0], -1)))
        prob = self.softmax6_1(self.dense6_1(x))
        reg = self.dense6_2(x)
        landmarks = self.dense6_3(x)
        return reg, landmarks, prob


NETS = {"pnet": PNet, "rnet": RNet, "onet": ONet}


def load_mtcnn_net(name: str, weights: PathLike, verify_hash: bool = True) -> nn.Module:
    """``name`` ("pnet", "rnet", "onet") with the facenet-pytorch weights in ``weights``, in eval mode.

    Loaded with ``weights_only=True`` and ``strict=True``: a file that is not these
    weights is refused, never half-loaded.
    """
    if name not in NETS:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("MTCNN network", name, NETS)
    path = require_file(weights, "MTCNN %s weights" % name, hint="fetch them with `jetforge assets fetch mtcnn`")
    if verify_hash and sha256_file(path) != WEIGHT_SHA256[name]:
        raise ModelError("%s is not facenet-pytorch's %s (sha256 differs from %s...)"
                         % (path, WEIGHT_FILES[name], WEIGHT_SHA256[name][:12]),
                         hint="re-fetch with `jetforge assets fetch mtcnn --force`")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:
        raise ModelError("cannot read MTCNN weights %s: %s" % (path, err), hint="re-fetch the asset") from err
    model = NETS[name]()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CompressError("weights %s do not fit MTCNN %s: %s" % (path, name, str(err).splitlines()[0]))
    return model.eval()


def load_mtcnn(weights_dir: PathLike, verify_hash: bool = True) -> Dict[str, nn.Module]:
    """{"pnet", "rnet", "onet"} -> loaded nets, from a folder holding pnet.pt, rnet.pt, onet.pt."""
    folder = Path(weights_dir)
    return {name: load_mtcnn_net(name, folder / WEIGHT_FILES[name], verify_hash) for name in NETS}


def export_mtcnn_onnx(nets: Mapping[str, nn.Module], out_dir: PathLike,
                      provenance: Optional[Mapping[str, Any]] = None) -> Dict[str, Path]:
    """Write ``pnet.onnx``, ``rnet.onnx``, ``onet.onnx`` (+ ``.json`` sidecars) into ``out_dir``.

    PNet has a dynamic batch, height and width; RNet and ONet a dynamic batch at their
    fixed crop size.  The TorchScript exporter (``dynamo=False``) at opset 17, as
    :func:`jetforge.compress.export.export_onnx` uses (which handles single-output
    models only; these have two or three outputs).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: Dict[str, Path] = {}
    for name in ("pnet", "rnet", "onet"):
        if name not in nets:
            raise CompressError("export_mtcnn_onnx needs the %s network" % name)
        paths[name] = _export_one(name, nets[name], out / ("%s.onnx" % name), provenance or {})
    return paths


def _export_one(name: str, model: nn.Module, path: Path, provenance: Mapping[str, Any]) -> Path:
    model.eval()
    size = INPUT_SIZE[name]
    outputs = OUTPUT_NAMES[name]
    if size is None:
        dummy = torch.zeros(1, 3, 48, 64)
        dynamic: Dict[str, Dict[int, str]] = {"input": {0: "batch", 2: "height", 3: "width"}}
        for o in outputs:
            dynamic[o] = {0: "batch", 2: "out_height", 3: "out_width"}
        in_shape = ["batch", 3, "height", "width"]
        out_shapes = {"reg": ["batch", 4, "out_height", "out_width"], "prob": ["batch", 2, "out_height", "out_width"]}
    else:
        dummy = torch.zeros(2, 3, size, size)
        dynamic = {"input": {0: "batch"}}
        for o in outputs:
            dynamic[o] = {0: "batch"}
        in_shape = ["batch", 3, size, size]
        out_shapes = {"reg": ["batch", 4], "prob": ["batch", 2], "landmarks": ["batch", 10]}
    with atomic_output(path, suffix=".onnx") as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            with torch.no_grad():
                torch.onnx.export(model, (dummy,), str(tmp), input_names=["input"], output_names=list(outputs),
                                  dynamic_axes=dynamic, opset_version=OPSET, do_constant_folding=True,
                                  dynamo=False)
        try:
            import onnx

            onnx.checker.check_model(str(tmp))
        except ImportError:  # pragma: no cover - onnx comes with the export extras
            pass
        except Exception as err:
            raise ModelError("the exported %s fails the ONNX checker: %s" % (path.name, err)) from err
    details: Dict[str, Any] = {"torch": torch.__version__.split("+")[0], "opset": OPSET, "exporter": "torchscript",
                               "weights": WEIGHT_FILES[name], "weights_sha256": WEIGHT_SHA256[name],
                               "weights_source": "facenet-pytorch 2.6.0 (MIT)"}
    details.update(provenance)
    sidecar = ModelSidecar(
        task="detect", model_name="mtcnn_%s" % name,
        inputs=[TensorSpec("input", in_shape, "float32")],
        outputs=[TensorSpec(o, out_shapes[o], "float32") for o in outputs],
        preprocess=MTCNN_PREPROCESS[name], labels=list(LABELS), produced_by=produced_by("export", **details),
        extra={"family": "mtcnn", "stage": name,
               "input_convention": "RGB, NCHW of the HxWx3 image (rows = H), (x - 127.5) * 0.0078125, "
                                   "resampled with area averaging (torch adaptive_avg_pool2d)",
               "outputs": {"reg": "box offsets x1, y1, x2, y2 relative to the box size",
                           "prob": "softmax (background, face)",
                           "landmarks": "x of 5 points then y of 5 points, relative to the box"}})
    write_sidecar(path, sidecar)
    log.info("exported MTCNN %s to %s", name, path)
    return path


__all__ = ["LABELS", "MTCNN_PREPROCESS", "NETS", "ONet", "PNet", "RNet", "WEIGHT_FILES", "WEIGHT_SHA256",
           "export_mtcnn_onnx", "load_mtcnn", "load_mtcnn_net"]
