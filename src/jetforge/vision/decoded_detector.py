"""Any detector ONNX (or engine) read through its output decoder: frames in, :class:`Detections` in frame pixels out.

:class:`DecodedDetector` is the detector of ``jetforge app detect``: a ``runtime`` session, the model's ``image``
input contract and the output decoder its sidecar names (:func:`jetforge.vision.decode.decoder_for`: SSD, YOLO v5/v8,
EfficientNMS, torchvision layouts), or the one ``decoder=`` names (``--decoder``) for a model whose sidecar names
none.  Decoding, thresholds, NMS and the way back to the frame are the decoder's, so the boxes are the reference
decoder's boxes whichever app or path asks.

A model with no sidecar at all (an ONNX straight from another tool) runs only with ``decoder=``: its input is then
taken as YOLO's export convention (letterbox, RGB, pixels / 255, at the model's fixed input size) and its classes
are unnamed (``Detections.labels`` empty: the apps call them by index).  Why not refuse it: trying a downloaded
YOLO export should take one flag; ``jetforge export-sidecar`` records the real contract and names once.

Torch-free, numpy only, Python 3.8 (the device side).
"""

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import ConfigError, ModelError
from jetforge.runtime.inputs import input_contract
from jetforge.runtime.inputs.image import Preprocess
from jetforge.runtime.model_facts import model_facts
from jetforge.vision.decode import DECODER_EXTRA_KEY, OutputDecoder, decoder_for, matching_decoders
from jetforge.vision.detections import Detections
from jetforge.vision.ssd import SSD_EXTRA_KEY

#: decoders whose outputs hold one image without a batch axis: the model runs frame by frame, never batched
UNBATCHED_DECODERS = ("torchvision",)


class DecodedDetector:
    """Frames (BGR, any size) -> :class:`Detections` through a detector model and its output decoder.

    ``decoder``: the decoder's name for a model whose sidecar names none (or to override it); ``threads``/
    ``spinning``: ONNX Runtime's session options (idle workers do not spin by default, as the people detector's);
    ``score_threshold``: the caller's score threshold instead of the sidecar's (``demo --compare`` runs every
    person detector at the people app's).
    """

    def __init__(self, model_path: Union[str, Path], decoder: Optional[str] = None, threads: Optional[int] = None,
                 spinning: Optional[bool] = False, backend: str = "auto",
                 score_threshold: Optional[float] = None) -> None:
        from jetforge.runtime.session import open_session

        self.model_path = Path(model_path)
        onnx = backend in ("auto", "onnxruntime") and self.model_path.suffix.lower() == ".onnx"
        options: Dict[str, Any] = {"threads": threads, "spinning": spinning} if onnx else {}
        self.session = open_session(self.model_path, backend=backend, **options)
        try:
            self.contract, self.decoder, self.has_sidecar = _contract_and_decoder(self.session, self.model_path,
                                                                                  decoder)
            if score_threshold is not None:  # DecoderOptions checks it is in [0, 1)
                self.decoder.options = replace(self.decoder.options, score_threshold=float(score_threshold))
        except Exception:
            self.session.close()
            raise
        self.input_name = self.session.inputs[0].name
        self.output_names = [t.name for t in self.session.outputs]
        first = self.session.inputs[0].shape[0] if self.session.inputs[0].shape else 1
        fixed = first if isinstance(first, int) and first > 0 else None
        self.max_batch = 1 if self.decoder.name in UNBATCHED_DECODERS else fixed  # None: any batch
        self.spinning = spinning
        name = getattr(model_facts(self.session), "model_name", "") or self.model_path.stem
        self.label = "%s (%s decoder, %dx%d)" % (name, self.decoder.name, self.contract.width,
                                                 self.contract.height)

    @property
    def labels(self) -> Tuple[str, ...]:
        """The model's class names in index order (empty: unnamed classes)."""
        return tuple(self.decoder.labels)

    @property
    def score_threshold(self) -> float:
        return float(self.decoder.options.score_threshold)

    def __call__(self, image: np.ndarray) -> Detections:
        return self.detect_batch([image])[0]

    def detect_batch(self, images: Sequence[np.ndarray]) -> List[Detections]:
        """One session call per batch (per frame for a model of fixed batch 1); boxes in each frame's pixels."""
        if not len(images):
            return []
        step = self.max_batch or len(images)
        found: List[Detections] = []
        for i in range(0, len(images), step):
            chunk = list(images[i:i + step])
            out = self.session.infer({self.input_name: self.contract.batch(chunk)})
            found += self.decode([out[n] for n in self.output_names], [im.shape[:2] for im in chunk])
        return found

    def decode(self, outputs: Sequence[np.ndarray], frames_hw: Sequence[Tuple[int, int]]) -> List[Detections]:
        """A batch's raw outputs (model output order, images along axis 0; padding rows past ``len(frames_hw)``
        ignored) -> one :class:`Detections` per frame: what the GPU path calls on its batch outputs."""
        n = len(frames_hw)
        whole = self.decoder.name in UNBATCHED_DECODERS  # no batch axis: the outputs are the one frame's
        cut = [np.asarray(o) if whole else np.asarray(o)[:n] for o in outputs]
        return self.decoder.decode_frames(cut, self.contract, [tuple(hw)[:2] for hw in frames_hw])

    @staticmethod
    def to_confidence(scores: np.ndarray) -> np.ndarray:
        """The tracker's confidences: the decoder's scores, clipped to [0, 1] (layouts whose scores are
        probabilities pass unchanged; the others were refused negative values by the decoder, or are clipped)."""
        return np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)

    def describe(self) -> str:
        o = self.decoder.options
        return "%s; %s decoder, score > %.2f, %s NMS at IoU %.2f" % (
            self.session.describe(), self.decoder.name, o.score_threshold,
            "class-agnostic" if o.class_agnostic else "per-class", o.iou_threshold)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "DecodedDetector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _contract_and_decoder(session: Any, path: Path, decoder: Optional[str]) -> Tuple[Preprocess, OutputDecoder, bool]:
    """(input contract, decoder, whether the model has a sidecar) of an opened detector."""
    facts = model_facts(session)
    if decoder is None and (facts is None or not {DECODER_EXTRA_KEY, SSD_EXTRA_KEY} & set(facts.extra)):
        fits = matching_decoders([list(t.shape) for t in session.outputs], (len(facts.labels) or None) if facts else None)
        raise ModelError("%s names no output decoder (%s)" % (
            path.name, "it has no sidecar" if facts is None else "its sidecar has no extra.decoder block"),
            hint="write its sidecar once: jetforge export-sidecar %s --decoder %s --classes LIST, or pass "
                 "--decoder NAME (its outputs fit: %s)" % (path.name, fits[0] if fits else "NAME",
                                                            ", ".join(fits) or "no registered decoder"))
    if facts is not None:
        contract = input_contract(facts, "image", purpose="the detect app")
        return contract, decoder_for(facts, name=decoder), True
    contract = _foreign_contract(session, path)
    found = decoder_for(None, name=decoder, output_specs=session.outputs, input_hw=(contract.height, contract.width))
    return contract, found, False


def _foreign_contract(session: Any, path: Path) -> Preprocess:
    """YOLO's export convention at the model's fixed input size (module docstring)."""
    from jetforge.vision.decode.sidecar_write import YOLO_INPUT, input_size

    try:
        height, width, layout = input_size(list(session.inputs[0].shape), None, path.name)
    except ConfigError as err:
        raise ConfigError(err.message, hint="write its sidecar with the size it runs at: jetforge export-sidecar %s "
                                            "--decoder NAME --classes LIST --size HxW" % path.name) from None
    return Preprocess(height=height, width=width, resize="letterbox", layout=layout, **YOLO_INPUT)  # type: ignore


__all__ = ["DecodedDetector", "UNBATCHED_DECODERS"]
