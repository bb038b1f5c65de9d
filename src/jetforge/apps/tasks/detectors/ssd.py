"""The CNN person detector of the people and action apps: an exported SSD body (SSDLite-MobileNetV2 by default)
in a ``runtime`` session, decoded and NMS'd on the host by :mod:`jetforge.runtime.detection`.

Why a wrapper: the apps want frames in and pixel boxes out, in the same :class:`~jetforge.runtime.hog.Detections`
type that OpenCV's HOG detector returns, so the tracker, the line counters and the zones do not care which
detector ran.  The scores are already probabilities (sigmoid), so :meth:`SsdPeopleDetector.to_confidence` is the
identity, where HOG's SVM margins need a squashing first.

Speed choices, both measured in ``benchmarks/people_fps.py``:

* ``score_threshold`` is applied *before* NMS (``runtime.detection.postprocess`` is exact for that: greedy NMS
  never lets a lower score suppress a higher one); the model's own 1e-8 threshold sends ~1900 candidates through
  100 NMS rounds, tens of milliseconds on a small CPU, where 0.2 leaves a handful.  0.2 is the tracker's ``low``
  threshold: lower scores would be dropped by the tracker anyway.
* ONNX Runtime's idle worker threads spin-wait by default; on a busy 2-core CPU that spinning takes time from the
  decoder, the tracker and other processes, so the apps open the session with ``spinning=False``.

Torch-free (the device side): the ONNX file is made on a workstation (``jetforge export --model
ssdlite_mobilenet_v2_person``, which the CLI does by itself the first time the app runs there).
"""

from pathlib import Path
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from jetforge.errors import ModelError
from jetforge.runtime.detection import SSDDetector
from jetforge.runtime.hog import Detections

SSD_LABEL = "SSDLite-MobileNetV2 person detector (CNN, 300x300)"  # the port, at the input size of its sidecar
DEFAULT_SCORE_THRESHOLD = 0.2


class SsdPeopleDetector:
    """Frames (BGR, any size) -> person :class:`Detections` in frame pixels, through an exported SSD body.

    ``threads``: the session's intra-op threads (None: jetforge's default); ``spinning``: whether ONNX Runtime's
    idle workers spin-wait (off by default: see the module docstring); ``score_threshold``: scores at or below it
    never enter NMS; ``label``: what the video and the reports call the detector.
    """

    def __init__(self, model_path: Union[str, Path], threads: Optional[int] = None, spinning: Optional[bool] = False,
                 score_threshold: float = DEFAULT_SCORE_THRESHOLD, backend: str = "auto",
                 label: Optional[str] = None) -> None:
        if not 0.0 <= float(score_threshold) < 1.0:
            raise ModelError("the detector's score threshold must be in [0, 1), got %r" % (score_threshold,),
                             hint="e.g. --detector-threshold 0.2")
        options = {"threads": threads}
        if backend in ("auto", "onnxruntime") and str(model_path).endswith(".onnx"):
            options["spinning"] = spinning
        self.model_path = Path(model_path)
        self._ssd = SSDDetector(model_path, backend=backend, **options)
        if list(self._ssd.spec.labels) != ["person"]:
            self._ssd.close()
            raise ModelError("%s detects %s, not people" % (model_path, list(self._ssd.spec.labels)),
                             hint="give a person detector (jetforge export --model ssdlite_mobilenet_v2_person)")
        self.score_threshold = float(score_threshold)
        self.spinning = spinning
        self.label = label or _label_from_sidecar(self._ssd.session.sidecar, self._ssd.preprocess)

    @property
    def session(self) -> Any:
        return self._ssd.session

    def __call__(self, image: np.ndarray) -> Detections:
        return self.detect_batch([image])[0]

    def detect_batch(self, images: Sequence[np.ndarray]) -> List[Detections]:
        """One session call for the whole batch (one frame per stream), boxes mapped back to each frame."""
        if not len(images):
            return []
        found = self._ssd.detect_batch(images, score_threshold=self.score_threshold)
        model_hw = (self._ssd.preprocess.height, self._ssd.preprocess.width)
        out = []
        for image, det in zip(images, found):
            boxes = det.xyxy(self._ssd.preprocess.geometry(image.shape[:2]), model_hw)
            out.append(Detections(np.asarray(boxes, np.float32).reshape(-1, 4), det.scores.astype(np.float32)))
        return out

    @staticmethod
    def to_confidence(scores: np.ndarray) -> np.ndarray:
        """The tracker's (0, 1) confidences: the sigmoid scores as they are."""
        return np.asarray(scores, dtype=np.float64)

    def describe(self) -> str:
        return "%s; host NMS above score %.2f" % (self.session.describe(), self.score_threshold)

    def close(self) -> None:
        self._ssd.close()

    def __enter__(self) -> "SsdPeopleDetector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _label_from_sidecar(sidecar: Any, preprocess: Any) -> str:
    """What the summary calls the model: its sidecar's name and the input size it runs at (a student may be smaller)."""
    name = str(getattr(sidecar, "model_name", "") or "")
    size = "%dx%d" % (preprocess.width, preprocess.height)
    if not name or name == "ssdlite_mobilenet_v2_person":
        return SSD_LABEL.replace("300x300", size)
    return "%s (CNN person detector, %s)" % (name, size)


__all__ = ["DEFAULT_SCORE_THRESHOLD", "SSD_LABEL", "SsdPeopleDetector"]
