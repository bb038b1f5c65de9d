"""Person detectors of any registered output layout: the SSD's own detector, or the ``person`` class of any other.

The people and action apps, per-track clip calibration, the action recipe's track cache and ``demo --compare`` take
"a person detector" (``--detector-model``).  :func:`open_person_detector` picks how to run one from its sidecar:

* a sidecar with an SSD block (the port, its students, ``ssdlite-person-192``) -- and any model whose facts cannot be
  read or whose sidecar names no output decoder -- goes to :class:`~jetforge.vision.ssd_detector.SsdPeopleDetector`,
  exactly as before this module existed (so its events and its error messages are unchanged);
* a sidecar naming another output decoder (``extra.decoder``: YOLO v5/v8, EfficientNMS, torchvision layouts; the
  shipped ``yolov8-person-192``) goes to :class:`DecodedPersonDetector`: ``app detect``'s
  :class:`~jetforge.vision.decoded_detector.DecodedDetector` (the same decoding, NMS and way back to the frame)
  keeping only the model's ``person`` class, at the caller's score threshold (the people app's
  ``--detector-threshold``, as ``demo --compare`` runs every person detector).

Why a model must *name* its person class: a multi-class model's ``person`` is wherever its labels put it, and a model
whose classes are unnamed (a hand-written sidecar without labels) says nothing about what it finds -- taking its class
0 as people would silently track cars in a model whose class 0 is a car.  Such a model is refused, one-class or not,
with the one command that names its classes (``jetforge export-sidecar M --decoder NAME --classes person``; the
command always writes names, so only a hand-edited sidecar gets here).

Torch-free, numpy only, Python 3.8 (the device side).
"""

from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import JetforgeError, ModelError
from jetforge.vision.decoded_detector import DecodedDetector
from jetforge.vision.detections import Detections
from jetforge.vision.ssd_detector import DEFAULT_SCORE_THRESHOLD, SsdPeopleDetector, check_score_threshold

PERSON = "person"  # the class name a person detector's labels must hold


def person_class(labels: Sequence[str], model: str, decoder: str = "NAME") -> int:
    """The index of ``person`` in ``labels``; a ModelError naming the model's classes and the fix otherwise."""
    labels = list(labels)
    if PERSON in labels:
        return labels.index(PERSON)
    if not labels:
        raise ModelError("%s's classes are unnamed, so none of them is known to be a person" % model,
                         hint="name them once: jetforge export-sidecar %s --decoder %s --classes person (a one-class "
                              "person detector), or its full class list" % (model, decoder))
    shown = ", ".join(labels[:8]) + (", ... (%d classes)" % len(labels) if len(labels) > 8 else "")
    raise ModelError("%s detects %s, not people: its classes have no %r" % (model, shown, PERSON),
                     hint="give a person detector, a model whose sidecar labels include person (e.g. the shipped "
                          "ssdlite-person-192 or yolov8-person-192); its own classes are tracked by jetforge app "
                          "detect --model %s" % model)


class DecodedPersonDetector:
    """Frames (BGR, any size) -> the ``person`` :class:`Detections` of a detector of any registered output layout.

    The person-detector interface of :class:`~jetforge.vision.ssd_detector.SsdPeopleDetector` (``__call__``,
    ``detect_batch``, ``to_confidence``, ``describe``, ``label``, ``image_size``, ``score_threshold``, ``session``,
    ``model_path``, ``spinning``, ``close``) over :class:`~jetforge.vision.decoded_detector.DecodedDetector`, plus
    :meth:`decode` for the GPU path's batch outputs.  ``score_threshold`` replaces the sidecar's decoder threshold.
    """

    def __init__(self, model_path: Union[str, Path], threads: Optional[int] = None, spinning: Optional[bool] = False,
                 score_threshold: float = DEFAULT_SCORE_THRESHOLD, backend: str = "auto") -> None:
        self.detector = DecodedDetector(model_path, threads=threads, spinning=spinning, backend=backend,
                                        score_threshold=check_score_threshold(score_threshold))
        try:
            self.person = person_class(self.detector.labels, str(model_path), self.detector.decoder.name)
        except ModelError:
            self.detector.close()
            raise
        self.model_path = self.detector.model_path
        self.spinning = spinning
        self.label = self.detector.label
        self.status_label = "CNN person detector (%s layout)" % self.detector.decoder.name  # the video's status bar

    @property
    def session(self) -> Any:
        return self.detector.session

    @property
    def score_threshold(self) -> float:
        return self.detector.score_threshold

    @property
    def image_size(self) -> Tuple[int, int]:
        """(height, width) the model reads: its input contract."""
        return self.detector.contract.height, self.detector.contract.width

    def __call__(self, image: np.ndarray) -> Detections:
        return self.detect_batch([image])[0]

    def detect_batch(self, images: Sequence[np.ndarray]) -> List[Detections]:
        """The detector's batch call (one session call per batch), each frame's person detections only."""
        return [d.of_class(self.person) for d in self.detector.detect_batch(images)]

    def decode(self, outputs: Sequence[np.ndarray], frames_hw: Sequence[Tuple[int, int]]) -> List[Detections]:
        """A batch's raw outputs (:meth:`DecodedDetector.decode`) -> each frame's person detections."""
        return [d.of_class(self.person) for d in self.detector.decode(outputs, frames_hw)]

    def to_confidence(self, scores: np.ndarray) -> np.ndarray:
        return self.detector.to_confidence(scores)

    def describe(self) -> str:
        return "%s; class %r only" % (self.detector.describe(), PERSON)

    def close(self) -> None:
        self.detector.close()

    def __enter__(self) -> "DecodedPersonDetector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def is_ssd_person_model(model_path: Union[str, Path]) -> bool:
    """Whether :func:`open_person_detector` runs ``model_path`` as the SSD (module docstring): its sidecar has an
    SSD block, names no output decoder, or cannot be read here (the SSD detector's own error then says why)."""
    from jetforge.runtime.model_facts import model_facts
    from jetforge.vision.decode import DECODER_EXTRA_KEY
    from jetforge.vision.ssd import SSD_EXTRA_KEY

    try:
        facts = model_facts(Path(model_path), verify_hash=False)  # the session verifies the hash when it opens
    except JetforgeError:
        return True
    extra = facts.extra if facts is not None else {}
    return SSD_EXTRA_KEY in extra or DECODER_EXTRA_KEY not in extra


def open_person_detector(model_path: Union[str, Path], threads: Optional[int] = None,
                         spinning: Optional[bool] = False, score_threshold: float = DEFAULT_SCORE_THRESHOLD,
                         backend: str = "auto") -> Any:
    """The person detector of ``model_path``: :class:`SsdPeopleDetector` for an SSD, :class:`DecodedPersonDetector`
    for another registered layout (module docstring); the same options either way."""
    kind = SsdPeopleDetector if is_ssd_person_model(model_path) else DecodedPersonDetector
    return kind(model_path, threads=threads, spinning=spinning, score_threshold=score_threshold, backend=backend)


__all__ = ["DecodedPersonDetector", "PERSON", "is_ssd_person_model", "open_person_detector", "person_class"]
