"""The sidecar of a detector ONNX made elsewhere, written once: its decoder, class names and input contract.

``jetforge export-sidecar det.onnx --decoder yolov8 --classes coco80`` calls :func:`write_detector_sidecar`: the
model's tensors are read from the ONNX file itself (:mod:`jetforge.runtime.onnx_wire`, no ``onnx`` package), the
outputs are checked against the decoder's layout and the class count (one line naming the decoders that do fit
otherwise), and the sidecar records task ``detect``, the labels, an ``image`` input contract (letterbox or stretch to
the model's input size, colour order, ``(x * scale - mean) / std``) and ``extra.decoder``.  Every consumer then reads
the model the same way (:func:`jetforge.vision.decode.decoder_for`).  Torch-free, Python 3.8.
"""

from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from jetforge.errors import ConfigError, InputFileError, ModelError
from jetforge.fileio import PathLike
from jetforge.runtime.inputs.image import Preprocess
from jetforge.runtime.onnx_wire import read_graph_facts
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, produced_by, sidecar_path, write_sidecar
from jetforge.vision.decode import DECODERS, DecoderOptions, check_layout, decoder_block
from jetforge.vision.decode.base import static_dim

# YOLO-family exports take RGB in [0, 1] (pixels / 255), letterboxed with grey 114
YOLO_INPUT = {"color": "rgb", "scale": 1.0 / 255.0, "mean": (0.0,), "std": (1.0,)}


def input_size(shape: Sequence[Any], size: Optional[Tuple[int, int]], model: str) -> Tuple[int, int, str]:
    """(height, width, layout) of an image input of ``shape`` (NCHW or NHWC); ``size`` for dynamic sides."""
    if len(shape) != 4:
        raise ModelError("%s's input has rank %d; a detector's image input is [N, 3, H, W] or [N, H, W, 3]"
                         % (model, len(shape)), hint="export the detector with a 4-D image input")
    layout = "nhwc" if static_dim(shape[3]) == 3 and static_dim(shape[1]) != 3 else "nchw"
    h, w = (shape[1], shape[2]) if layout == "nhwc" else (shape[2], shape[3])
    if size is not None:
        if static_dim(h) not in (None, size[0]) or static_dim(w) not in (None, size[1]):
            raise ConfigError("--size %dx%d differs from the model's fixed input %sx%s" % (size[0], size[1], h, w),
                              hint="drop --size: the model fixes its input size")
        return size[0], size[1], layout
    if static_dim(h) is None or static_dim(w) is None:
        raise ConfigError("%s's input size is dynamic (%s x %s)" % (model, h, w),
                          hint="give the size the model runs at, e.g. --size 640x640")
    return int(h), int(w), layout


def detector_sidecar(model_path: PathLike, decoder: str, labels: Sequence[str], resize: str = "letterbox",
                     size: Optional[Tuple[int, int]] = None, color: str = "rgb", scale: float = 1.0 / 255.0,
                     mean: Sequence[float] = (0.0,), std: Sequence[float] = (1.0,),
                     options: Optional[DecoderOptions] = None,
                     params: Optional[Dict[str, Any]] = None) -> ModelSidecar:
    """The checked sidecar of the detector ONNX at ``model_path`` (module docstring); nothing is written."""
    DECODERS.get(decoder)  # an unknown name is one line with the close matches
    if decoder == "ssd-tf":
        raise ConfigError("ssd-tf reads the extra.ssd block jetforge export writes; it cannot be written here",
                          hint="export the SSD with `jetforge export`, or use ssd-torchvision for a torchvision SSD")
    path = Path(model_path)
    facts = read_graph_facts(path)
    if len(facts.inputs) != 1:
        raise ModelError("%s has %d inputs; a detector takes one image" % (path.name, len(facts.inputs)))
    inputs = [TensorSpec(t["name"], list(t["shape"]), t["dtype"]) for t in facts.inputs]
    outputs = [TensorSpec(t["name"], list(t["shape"]), t["dtype"]) for t in facts.outputs]
    check_layout(decoder, [o.shape for o in outputs], len(labels), path.name)
    height, width, layout = input_size(inputs[0].shape, size, path.name)
    try:
        contract = Preprocess(height=height, width=width, resize=resize, color=color, scale=float(scale),
                              mean=tuple(float(m) for m in mean), std=tuple(float(s) for s in std), layout=layout)
    except ValueError as err:
        raise ConfigError("the input contract is not valid: %s" % err) from None
    block = decoder_block(decoder, options, params)
    return ModelSidecar(task="detect", model_name=path.stem, inputs=inputs, outputs=outputs, input=contract,
                        labels=list(labels), extra={"decoder": block},
                        produced_by=produced_by("export-sidecar", decoder=decoder, source=path.name))


def write_detector_sidecar(model_path: PathLike, decoder: str, labels: Sequence[str], force: bool = False,
                           **kwargs: Any) -> Tuple[Path, ModelSidecar]:
    """Write :func:`detector_sidecar` next to the model (``MODEL.onnx.json``), atomically; an existing sidecar is
    kept unless ``force`` (it may hold facts only its writer knew)."""
    target = sidecar_path(model_path)
    if target.exists() and not force:
        raise InputFileError("%s already has a sidecar %s" % (Path(model_path).name, target.name),
                             hint="pass --force to replace it")
    sidecar = detector_sidecar(model_path, decoder, labels, **kwargs)
    return write_sidecar(model_path, sidecar), sidecar


__all__ = ["YOLO_INPUT", "detector_sidecar", "input_size", "write_detector_sidecar"]
