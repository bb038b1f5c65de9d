"""Put a model's input normalisation into the ONNX graph as explicit nodes, and check the result on real images.

DeepStream's nvinfer (and any pipeline that hands the network 8-bit pixels) applies one scale
factor with per-channel offsets.  A model normalised with a per-channel std (ImageNet's 0.229,
0.224, 0.225) cannot be fed exactly that way.  :func:`normalize_in_model` writes a new model whose
input is the raw pixel value (0-255, in the sidecar's channel order and layout) and whose first
nodes are ``Sub(x, mean / scale)`` then ``Mul(., scale / std)``, per channel, before the
original graph.

The normalisation is *not* folded into the first convolution's weights and bias: a convolution
zero-pads its input, and a zero in normalised space is the channel mean in pixel space, so a
folded model differs from the original along every padded border.  Explicit nodes keep the
original arithmetic; TensorRT fuses them into a scale layer (which the DLA runs).

:func:`check_equivalence` runs both models in ONNX Runtime on real images: the original fed by
the sidecar's preprocessing, the new one fed the same resized frames as raw float pixels.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np

from jetforge.errors import ModelError
from jetforge.fileio import PathLike, atomic_output, check_not_input
from jetforge.optional import require

log = logging.getLogger(__name__)

RAW_INPUT_SUFFIX = "_raw"
# The two ways of computing the input differ in float32 rounding only: (x*a + b) versus (x - m)*k,
# each a few ulp of values below ~3, i.e. ~1e-6 relative; through a network that is a few 1e-5 of
# the output's scale.  1e-4 of the output scale is comfortably above that and far below any real
# preprocessing mistake (a wrong channel order or std moves outputs by whole units).
RELATIVE_TOLERANCE = 1e-4


def identity_preprocess(pre: Any) -> Any:
    """The sidecar preprocessing of the new model: same geometry and colour, no scaling (raw 0-255)."""
    import dataclasses

    return dataclasses.replace(pre, scale=1.0, mean=(0.0,), std=(1.0,))


def normalize_in_model(src: PathLike, dst: PathLike, sidecar: Any) -> Any:
    """Write ``dst``: ``src`` with ``Sub``/``Mul`` normalisation nodes at its input, and its sidecar; returns it."""
    onnx = require("onnx", "writing the normalisation into the model")
    from onnx import helper, numpy_helper

    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.onnx_file import read_onnx
    from jetforge.runtime.sidecar import ModelSidecar, produced_by, write_sidecar

    pre = input_contract(sidecar, "image", purpose="--normalize-in-model (moving the normalisation into the model)")
    check_not_input(dst, [src, str(src) + ".json"])
    model = read_onnx(src, "model to normalise")
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise ModelError("the model has %d inputs; moving the normalisation in needs one image input" % len(inputs))
    name = inputs[0].name
    channels = pre.channels
    mean = np.broadcast_to(np.asarray(pre.mean, dtype=np.float64), (channels,))
    std = np.broadcast_to(np.asarray(pre.std, dtype=np.float64), (channels,))
    shape = (1, channels, 1, 1) if pre.layout == "nchw" else (1, 1, 1, channels)
    offset = (mean / float(pre.scale)).astype(np.float32).reshape(shape)
    factor = (float(pre.scale) / std).astype(np.float32).reshape(shape)
    normalised = name + "_normalized"
    for node in graph.node:  # every consumer of the input now reads the normalised tensor
        for i, inp in enumerate(node.input):
            if inp == name:
                node.input[i] = normalised
    for out in graph.output:
        if out.name == name:
            raise ModelError("the model outputs its input tensor %s unchanged" % name)
    graph.initializer.extend([numpy_helper.from_array(offset, name + "_pixel_mean"),
                              numpy_helper.from_array(factor, name + "_pixel_scale")])
    nodes = [helper.make_node("Sub", [name, name + "_pixel_mean"], [name + "_centered"], name="jetforge_input_sub"),
             helper.make_node("Mul", [name + "_centered", name + "_pixel_scale"], [normalised],
                              name="jetforge_input_mul")]
    for node in reversed(nodes):
        graph.node.insert(0, node)
    onnx.checker.check_model(model)
    with atomic_output(dst, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
    extra = dict(sidecar.extra)
    extra["normalization_in_model"] = {
        "nodes": ["jetforge_input_sub", "jetforge_input_mul"], "input": "raw pixel values 0-255 (%s, %s)"
        % (pre.color, pre.layout), "pixel_mean": [float(v) for v in offset.reshape(-1)],
        "pixel_scale": [float(v) for v in factor.reshape(-1)], "source_model": Path(src).name,
        "source_sha256": sidecar.content_sha256}
    new = ModelSidecar(task=sidecar.task, model_name=sidecar.model_name, inputs=list(sidecar.inputs),
                       outputs=list(sidecar.outputs), preprocess=identity_preprocess(pre), labels=list(sidecar.labels),
                       produced_by=produced_by("export-config", normalized_from=Path(src).name), extra=extra)
    write_sidecar(dst, new)
    return new


@dataclass
class EquivalenceCheck:
    """The original (with its preprocessing) against the normalised model (raw pixels) on real images."""

    images: int
    max_abs_diff: float
    output_scale: float
    relative: float
    top1_agreement: float
    names: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.relative <= RELATIVE_TOLERANCE and self.top1_agreement == 1.0

    def to_dict(self) -> Dict[str, Any]:
        return {"images": self.images, "max_abs_diff": self.max_abs_diff, "output_scale": self.output_scale,
                "relative": self.relative, "tolerance": RELATIVE_TOLERANCE, "top1_agreement": self.top1_agreement,
                "ok": self.ok, "runtime": "onnxruntime (CPU)"}


def network_crops(pre: Any, images: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Frames (BGR uint8) cut and resized to the network input as the sidecar says (still BGR uint8)."""
    return [pre.resize_crop(image) for image in images]


def check_equivalence(original: PathLike, normalised: PathLike, pre: Any, crops: Sequence[np.ndarray],
                      names: Sequence[str] = ()) -> EquivalenceCheck:
    """Run both models in ONNX Runtime on network-size ``crops`` (BGR uint8) and compare every output.

    The original gets the sidecar's colour conversion and normalisation, the new model the same
    pixels as float 0-255: the geometry is applied once, beforehand (:func:`network_crops`), so both
    see exactly the same pixels (OpenCV's resize to the same size is a copy).
    """
    import dataclasses

    from jetforge.runtime.session import open_session

    if not crops:
        raise ModelError("no images to check the normalised model on",
                         hint="give --check-images DIR (real photos or frames), or a bundle with samples")
    same_size = dataclasses.replace(pre, resize="stretch")
    raw = identity_preprocess(same_size)
    a = open_session(original, backend="onnxruntime", verify_sidecar=False)
    b = open_session(normalised, backend="onnxruntime", verify_sidecar=False)
    try:
        diffs, scales, agree = [], [], []
        for crop in crops:
            out_a = a.infer({a.inputs[0].name: same_size.apply(crop)[None]})
            out_b = b.infer({b.inputs[0].name: raw.apply(crop)[None]})
            for spec in a.outputs:
                x, y = out_a[spec.name].astype(np.float64), out_b[spec.name].astype(np.float64)
                diffs.append(float(np.max(np.abs(x - y))))
                scales.append(float(np.max(np.abs(x))))
            first = a.outputs[0].name
            agree.append(float(np.argmax(out_a[first].reshape(-1)) == np.argmax(out_b[first].reshape(-1))))
    finally:
        a.close()
        b.close()
    scale = max(scales) if scales else 0.0
    worst = max(diffs) if diffs else 0.0
    return EquivalenceCheck(images=len(crops), max_abs_diff=worst, output_scale=scale,
                            relative=worst / scale if scale > 0 else worst, top1_agreement=float(np.mean(agree)),
                            names=list(names))


def retarget_cache(data: bytes, input_name: str, pre: Any, source: str = "calibration cache") -> bytes:
    """A calibration cache for the normalised model: the old input scale moves to the normalised tensor.

    The new graph's input carries raw pixels (|x| <= 255), the centred tensor ``x - mean/scale``
    values up to ``max(mean/scale, 255 - mean/scale)``; the normalised tensor is the old input,
    with the old scale.  Scales are amax / 127 (TensorRT's symmetric INT8).
    """
    from jetforge.runtime.tensorrt import calib_cache

    info = calib_cache.parse_calibration_cache(data, source)
    if input_name not in info.scales:
        raise ModelError("the calibration cache has no scale for the input %s" % input_name,
                         hint="recalibrate the model with `jetforge calibrate`")
    offsets = np.broadcast_to(np.asarray(pre.mean, np.float64), (pre.channels,)) / float(pre.scale)
    centred = float(np.max(np.maximum(np.abs(offsets), np.abs(255.0 - offsets))))
    scales = dict(info.scales)
    scales[input_name + "_normalized"] = scales.pop(input_name)
    scales[input_name] = 255.0 / 127.0
    scales[input_name + "_centered"] = centred / 127.0
    return calib_cache.format_calibration_cache(info.version_number, info.algorithm, scales).encode("ascii")


__all__ = ["EquivalenceCheck", "RELATIVE_TOLERANCE", "check_equivalence", "identity_preprocess", "network_crops",
           "normalize_in_model", "retarget_cache"]
