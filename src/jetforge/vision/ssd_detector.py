"""SSD detectors over a session: frames in, :class:`~jetforge.vision.detections.Detections` in frame pixels out.

:class:`SSDDetector` is any exported SSD body (``jetforge export``) in a ``runtime`` session, with the input
contract and the SSD block of its sidecar, decoded and NMS'd on the host by :mod:`jetforge.vision.ssd`.
:class:`SsdPeopleDetector` is the CNN person detector of the people and action apps (SSDLite-MobileNetV2 by
default): the same, checked to detect people, with the apps' score threshold, label and session options.

Why a person wrapper: the apps want frames in and pixel boxes out, in the same
:class:`~jetforge.vision.detections.Detections` type that OpenCV's HOG detector returns, so the tracker, the line
counters and the zones do not care which detector ran.  The scores are already probabilities (sigmoid), so
:meth:`SsdPeopleDetector.to_confidence` is the identity, where HOG's SVM margins need a squashing first.

Speed choices, both measured in ``benchmarks/people_app/people_fps.py``:

* ``score_threshold`` is applied *before* NMS (``vision.ssd.postprocess`` is exact for that: greedy NMS
  never lets a lower score suppress a higher one); the model's own 1e-8 threshold sends ~1900 candidates through
  100 NMS rounds, tens of milliseconds on a small CPU, where 0.2 leaves a handful.  0.2 is the tracker's ``low``
  threshold: lower scores would be dropped by the tracker anyway.
* ONNX Runtime's idle worker threads spin-wait by default; on a busy 2-core CPU that spinning takes time from the
  decoder, the tracker and other processes, so the apps open the session with ``spinning=False``.

Torch-free (the device side): the ONNX file is made on a workstation (``jetforge export --model
ssdlite_mobilenet_v2_person``, which the CLI does by itself the first time the app runs there).
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import ModelError
from jetforge.runtime.inputs import input_contract
from jetforge.runtime.model_facts import model_facts
from jetforge.vision.detections import Detections
from jetforge.vision.ssd import SsdOutput, postprocess, spec_from_sidecar

SSD_LABEL = "SSDLite-MobileNetV2 person detector (CNN, 300x300)"  # the port, at the input size of its sidecar
DEFAULT_SCORE_THRESHOLD = 0.2


class SSDDetector:
    """An exported SSD body in a jetforge session, its preprocessing and the host postprocess: frames in, boxes out.

    >>> det = SSDDetector("det.onnx")                          # doctest: +SKIP
    >>> boxes, scores = det.detect(frame_bgr, score_threshold=0.5)  # x1, y1, x2, y2 frame pixels
    """

    def __init__(self, model_path: Any, backend: str = "auto", **session_options: Any) -> None:
        from jetforge.runtime.session import open_session

        self.session = open_session(model_path, backend=backend, **session_options)
        sidecar = model_facts(self.session)  # an ONNX model's or an engine's (embedded) model facts
        try:
            if sidecar is None:
                raise ModelError("%s has no sidecar with its input contract and SSD parameters" % model_path,
                                 hint="export the detector with `jetforge export --model ssdlite_mobilenet_v2_person`")
            self.preprocess = input_contract(sidecar, "image", purpose="the SSD detector")
            self.spec = spec_from_sidecar(sidecar)
        except Exception:
            self.session.close()
            raise
        self.anchors = self.spec.anchors()
        self.input_name = self.session.inputs[0].name

    @property
    def input_hw(self) -> Tuple[int, int]:
        return self.preprocess.height, self.preprocess.width

    def decode_batch(self, frames: Sequence[np.ndarray], score_threshold: float = 0.5) -> List[SsdOutput]:
        """The decoder's own outputs (normalised boxes of the model input) for a batch of frames."""
        x = self.preprocess.batch(frames)
        out = self.session.infer({self.input_name: x})
        enc, logits = (out[t.name] for t in self.session.outputs[:2])
        return postprocess(enc, logits, self.spec, score_threshold=score_threshold, anchors=self.anchors)

    def detect_batch(self, frames: Sequence[np.ndarray], score_threshold: float = 0.5) -> List[Detections]:
        """One session call for the batch; each frame's detections in its own pixels."""
        return [d.to_detections(self.preprocess.geometry(frame.shape[:2]), self.input_hw)
                for frame, d in zip(frames, self.decode_batch(frames, score_threshold))]

    def detect(self, frame: np.ndarray, score_threshold: float = 0.5) -> Tuple[np.ndarray, np.ndarray]:
        """(boxes ``(K, 4)`` x1, y1, x2, y2 in ``frame`` pixels, scores ``(K,)``), best first."""
        det = self.decode_batch([frame], score_threshold)[0]
        return det.xyxy(self.preprocess.geometry(frame.shape[:2]), self.input_hw), det.scores

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "SSDDetector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SsdPeopleDetector:
    """Frames (BGR, any size) -> person :class:`Detections` in frame pixels, through an exported SSD body.

    ``threads``: the session's intra-op threads (None: jetforge's default); ``spinning``: whether ONNX Runtime's
    idle workers spin-wait (off by default: see the module docstring); ``score_threshold``: scores at or below it
    never enter NMS; ``label``: what the video and the reports call the detector.
    """

    def __init__(self, model_path: Union[str, Path], threads: Optional[int] = None, spinning: Optional[bool] = False,
                 score_threshold: float = DEFAULT_SCORE_THRESHOLD, backend: str = "auto",
                 label: Optional[str] = None) -> None:
        check_score_threshold(score_threshold)
        onnx = backend in ("auto", "onnxruntime") and str(model_path).endswith(".onnx")
        # threads/spinning are ONNX Runtime's; another backend (a TensorRT engine) refuses options it lacks
        options: Dict[str, Any] = {"threads": threads, "spinning": spinning} if onnx else {}
        if not onnx and threads is not None:
            options["threads"] = threads  # asked for explicitly: the backend says whether it takes it
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

    @property
    def image_size(self) -> Tuple[int, int]:
        """(height, width) the model reads: its sidecar's SSD contract (a 192 px student says 192x192)."""
        h, w = self._ssd.spec.image_size
        return int(h), int(w)

    def __call__(self, image: np.ndarray) -> Detections:
        return self.detect_batch([image])[0]

    def detect_batch(self, images: Sequence[np.ndarray]) -> List[Detections]:
        """One session call for the whole batch (one frame per stream), boxes mapped back to each frame."""
        if not len(images):
            return []
        return self._ssd.detect_batch(images, score_threshold=self.score_threshold)

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


def check_score_threshold(score_threshold: float) -> float:
    """A person detector's score threshold, which must lie in [0, 1) (one ModelError otherwise): shared with
    :class:`~jetforge.vision.person_detectors.DecodedPersonDetector`, so every layout refuses the same values."""
    if not 0.0 <= float(score_threshold) < 1.0:
        raise ModelError("the detector's score threshold must be in [0, 1), got %r" % (score_threshold,),
                         hint="e.g. --detector-threshold 0.2")
    return float(score_threshold)


def _label_from_sidecar(sidecar: Any, preprocess: Any) -> str:
    """What the summary calls the model: its sidecar's name and the input size it runs at (a student may be smaller)."""
    name = str(getattr(sidecar, "model_name", "") or "")
    size = "%dx%d" % (preprocess.width, preprocess.height)
    if not name or name == "ssdlite_mobilenet_v2_person":
        return SSD_LABEL.replace("300x300", size)
    return "%s (CNN person detector, %s)" % (name, size)


__all__ = ["DEFAULT_SCORE_THRESHOLD", "SSDDetector", "SSD_LABEL", "SsdPeopleDetector", "check_score_threshold"]
