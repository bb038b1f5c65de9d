"""Triton Python-backend model: the SSD detector's host postprocessing (decode + NMS), as jetforge runs it.

``jetforge export-config triton`` copies this file to ``NAME_postprocess/1/model.py`` and the
sidecar's SSD block to ``NAME_postprocess/1/ssd.json``.  It reads the body's raw outputs
(``box_encodings`` ``(N, A, 4)``, ``class_logits`` ``(N, A, classes + 1)``), runs
:func:`jetforge.vision.ssd.postprocess` (the same numpy code jetforge's own runtime and
tests use), and returns the detections padded to the model's ``max_total`` boxes, as TensorRT's
EfficientNMS plugin does: ``num_detections`` ``(N, 1)`` int32, ``detection_boxes`` ``(N, K, 4)``
``[ymin, xmin, ymax, xmax]`` normalised, ``detection_scores`` ``(N, K)``, ``detection_classes``
``(N, K)`` int32 (0 = the first label; the background is not a class here).

Triton's Python needs numpy and jetforge (``pip install --no-deps jetforge-*.whl``: the detection
module imports numpy only).  ``triton_python_backend_utils`` exists only inside Triton, so it is
imported where Triton calls in; :func:`padded_detections` is the whole computation and is what
jetforge's tests run.
"""

import json
import os
from typing import Any, Dict, List, Sequence

import numpy as np

SPEC_FILE = "ssd.json"


def padded_detections(box_encodings: np.ndarray, class_logits: np.ndarray, spec: Any,
                      score_threshold: float) -> Dict[str, np.ndarray]:
    """The four fixed-size output arrays for a batch of raw SSD outputs."""
    from jetforge.vision.ssd import postprocess

    detections = postprocess(box_encodings, class_logits, spec, score_threshold=score_threshold)
    n, k = len(detections), spec.max_total
    out = {"num_detections": np.zeros((n, 1), np.int32), "detection_boxes": np.zeros((n, k, 4), np.float32),
           "detection_scores": np.zeros((n, k), np.float32), "detection_classes": np.zeros((n, k), np.int32)}
    for i, det in enumerate(detections):
        m = len(det)
        out["num_detections"][i, 0] = m
        out["detection_boxes"][i, :m] = det.boxes
        out["detection_scores"][i, :m] = det.scores
        out["detection_classes"][i, :m] = det.classes
    return out


class TritonPythonModel:
    """The class Triton's Python backend instantiates (``initialize``, ``execute``, ``finalize``)."""

    def initialize(self, args: Dict[str, str]) -> None:
        from jetforge.vision.ssd import SSDSpec

        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, SPEC_FILE), "r", encoding="utf-8") as f:
            self.spec = SSDSpec.from_dict(json.load(f))
        config = json.loads(args["model_config"])
        value = config.get("parameters", {}).get("score_threshold", {}).get("string_value", "0.01")
        self.score_threshold = float(value)

    def execute(self, requests: Sequence[Any]) -> List[Any]:
        import triton_python_backend_utils as pb_utils  # provided by Triton's Python backend

        responses = []
        for request in requests:
            enc = pb_utils.get_input_tensor_by_name(request, "box_encodings").as_numpy()
            logits = pb_utils.get_input_tensor_by_name(request, "class_logits").as_numpy()
            arrays = padded_detections(enc, logits, self.spec, self.score_threshold)
            tensors = [pb_utils.Tensor(name, arrays[name]) for name in
                       ("num_detections", "detection_boxes", "detection_scores", "detection_classes")]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self) -> None:
        self.spec = None
