"""THE model-input contract: registered input kinds, each built from the model's sidecar.

>>> from jetforge.runtime.inputs import input_contract
>>> contract = input_contract(read_sidecar("model.onnx"), "image", purpose="calibration")  # doctest: +SKIP
>>> x = contract.apply(frame)            # numpy path: one HxWx3 uint8 BGR frame -> one input tensor
>>> fast = contract.fused(); x = fast(frame)   # the fused OpenCV path (the apps' fast path)

Kinds (:data:`INPUT_KINDS`): ``image`` (:class:`Preprocess`), ``clip`` (:class:`ClipContract`),
``image_pyramid`` (:class:`ImagePyramid`); see :mod:`jetforge.runtime.inputs.base` for the
interface and docs/architecture.md for where to add a kind.
"""

from jetforge.runtime.inputs.base import (INPUT_KINDS, InputContract, contract_from_dict, contract_to_dict,
                                          input_contract)
from jetforge.runtime.inputs.image import (IMAGENET_TFLITE, IMAGENET_TORCHVISION, FusedImage, ImageInput,
                                           Preprocess, ResizePlan, known_presets, normalize_pixels)
from jetforge.runtime.inputs.clip import ClipContract, ClipInput, FusedClip
from jetforge.runtime.inputs.pyramid import AreaSampler, FusedPyramid, ImagePyramid, area_resize

__all__ = ["AreaSampler", "ClipContract", "ClipInput", "FusedClip", "FusedImage", "FusedPyramid", "IMAGENET_TFLITE",
           "IMAGENET_TORCHVISION", "INPUT_KINDS", "ImageInput", "ImagePyramid", "InputContract", "Preprocess",
           "ResizePlan", "area_resize", "contract_from_dict", "contract_to_dict", "input_contract", "known_presets",
           "normalize_pixels"]
