"""MTCNN face detection (PNet -> RNet -> ONet) in numpy + OpenCV over three sessions, without torch.

This is facenet-pytorch 2.6.0's ``detect_face`` (``MTCNN(keep_all=True).detect``), step by
step: the same image pyramid, proposal decoding, NMS variants (:func:`jetforge.vision.boxes.nms`: its ``"iou"``
rule is ``torchvision.ops.nms`` on these boxes, its ``"min"`` rule facenet's ``"Min"``), box regression, squaring and
clipping, the same area resampling (torch's ``adaptive_avg_pool2d``, reproduced exactly with
cumulative sums), and the same thresholds.  The three networks are the ONNX files written by
``jetforge.compress.models.mtcnn.export_mtcnn_onnx`` (the real facenet-pytorch weights).

The input contract comes from the networks' sidecars (:mod:`jetforge.runtime.inputs`): PNet's is
the ``image_pyramid`` kind (window, smallest face, pyramid factor, colour and normalisation), RNet's
and ONet's the ``image`` kind (crop size and the same normalisation); nothing here restates them.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from jetforge.config import Bound
from jetforge.errors import ConfigError, ModelError
from jetforge.runtime.inputs import AreaSampler, ImagePyramid, Preprocess, input_contract
from jetforge.vision.boxes import nms

THRESHOLDS = (0.6, 0.7, 0.7)  # facenet-pytorch's PNet, RNet, ONet face-probability thresholds
MODEL_FILES = {"pnet": "pnet.onnx", "rnet": "rnet.onnx", "onet": "onet.onnx"}
OUTPUTS = {"pnet": ["reg", "prob"], "rnet": ["reg", "prob"], "onet": ["reg", "landmarks", "prob"]}
EXPORT_HINT = "export the nets with jetforge.compress.models.mtcnn.export_mtcnn_onnx (`jetforge app faces` does)"


@dataclass
class Faces:
    """Faces found in one image: ``boxes`` (N, 4) x1, y1, x2, y2 in pixels, ``scores`` (N,),
    ``landmarks`` (N, 5, 2) as (x, y) of left eye, right eye, nose, left and right mouth corner."""

    boxes: np.ndarray
    scores: np.ndarray
    landmarks: np.ndarray

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    @classmethod
    def empty(cls) -> "Faces":
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0, 5, 2), np.float32))


# ------------------------------------------------------------------------------------------------
# The numeric building blocks (pure numpy; each mirrors one function of facenet-pytorch)
# ------------------------------------------------------------------------------------------------

def generate_boxes(reg: np.ndarray, prob: np.ndarray, scale: float, threshold: float) -> np.ndarray:
    """PNet output map (reg 4xH'xW', face prob H'xW') -> (K, 9): x1, y1, x2, y2, score, 4 offsets."""
    mask = prob >= threshold
    ys, xs = np.nonzero(mask)
    score = prob[ys, xs]
    offsets = reg[:, ys, xs].T
    bb = np.stack([xs, ys], axis=1).astype(np.float32)
    q1 = np.floor((2 * bb + 1) / np.float32(scale))
    q2 = np.floor((2 * bb + 12) / np.float32(scale))
    return np.concatenate([q1, q2, score[:, None], offsets], axis=1).astype(np.float32)


def square(boxes: np.ndarray) -> np.ndarray:
    """facenet-pytorch ``rerec``: make boxes square around their centre (side = the longer side)."""
    out = boxes.copy()
    h = out[:, 3] - out[:, 1]
    w = out[:, 2] - out[:, 0]
    side = np.maximum(w, h)
    out[:, 0] = out[:, 0] + w * 0.5 - side * 0.5
    out[:, 1] = out[:, 1] + h * 0.5 - side * 0.5
    out[:, 2] = out[:, 0] + side
    out[:, 3] = out[:, 1] + side
    return out


def regress(boxes: np.ndarray, reg: np.ndarray) -> np.ndarray:
    """facenet-pytorch ``bbreg``: move the edges by ``reg`` times the (+1-pixel) box size."""
    out = boxes.copy()
    w = out[:, 2] - out[:, 0] + 1
    h = out[:, 3] - out[:, 1] + 1
    out[:, 0] = boxes[:, 0] + reg[:, 0] * w
    out[:, 1] = boxes[:, 1] + reg[:, 1] * h
    out[:, 2] = boxes[:, 2] + reg[:, 2] * w
    out[:, 3] = boxes[:, 3] + reg[:, 3] * h
    return out


def crop_boxes(sampler: AreaSampler, hw: Tuple[int, int], boxes: np.ndarray,
               contract: Preprocess) -> Tuple[np.ndarray, np.ndarray]:
    """facenet-pytorch ``pad`` + crop + area resize: (N, C, h, w) network inputs and the kept mask.

    Box corners are truncated to integers and clipped to the image (1-based, as facenet-pytorch
    does); a crop is the part inside the image, stretched to the network's input size and
    normalised as its sidecar's ``image`` contract says.
    """
    h, w = hw
    ib = np.trunc(boxes[:, :4]).astype(np.int64)
    x = np.maximum(ib[:, 0], 1)
    y = np.maximum(ib[:, 1], 1)
    ex = np.minimum(ib[:, 2], w)
    ey = np.minimum(ib[:, 3], h)
    ok = (ey > y - 1) & (ex > x - 1)
    crops = [sampler.resize(int(y[k]) - 1, int(ey[k]), int(x[k]) - 1, int(ex[k]), contract.height, contract.width)
             for k in np.nonzero(ok)[0]]
    if not crops:
        return np.zeros((0,) + contract.input_shape, np.float32), ok
    return contract.normalize(np.stack(crops)), ok


# ------------------------------------------------------------------------------------------------
# The detector
# ------------------------------------------------------------------------------------------------

def _contracts(sessions: Dict[str, Any]) -> Tuple[ImagePyramid, Dict[str, Preprocess]]:
    """PNet's pyramid and RNet's/ONet's crop contracts, from the sessions' sidecars."""
    pyramid = input_contract(getattr(sessions["pnet"], "sidecar", None), "image_pyramid", purpose="MTCNN's PNet")
    crops: Dict[str, Preprocess] = {}
    for name in ("rnet", "onet"):
        c = input_contract(getattr(sessions[name], "sidecar", None), "image", purpose="MTCNN's %s" % name)
        if c.resize != "stretch" or c.color != pyramid.color or c.layout != "nchw":  # type: ignore[attr-defined]
            raise ModelError("the %s sidecar's input (%s) is not a stretched %s NCHW crop like PNet's pyramid"
                             % (name, c.describe(), pyramid.color), hint=EXPORT_HINT)
        crops[name] = c  # type: ignore[assignment]
    return pyramid, crops


class FaceDetector:
    """MTCNN over three sessions (``infer(feeds) -> dict``, ``inputs``/``outputs`` specs and a ``sidecar``).

    ``detect(image)`` takes an HxWx3 uint8 BGR frame (as OpenCV decodes it) or, with
    ``rgb=True``, an RGB one, and returns :class:`Faces` sorted largest first, like
    facenet-pytorch's ``MTCNN(keep_all=True).detect``.  ``min_face_size`` and ``factor``
    override the pyramid of PNet's sidecar (None: the sidecar's).
    """

    def __init__(self, pnet: Any, rnet: Any, onet: Any, min_face_size: Optional[float] = None,
                 thresholds: Sequence[float] = THRESHOLDS, factor: Optional[float] = None) -> None:
        if len(thresholds) != 3 or any(not 0.0 <= t <= 1.0 for t in thresholds):
            raise ConfigError("thresholds must be three probabilities (PNet, RNet, ONet), got %r" % (thresholds,))
        self.sessions = {"pnet": pnet, "rnet": rnet, "onet": onet}
        for name, s in self.sessions.items():
            got = [t.name for t in s.outputs]
            if sorted(got) != sorted(OUTPUTS[name]):
                raise ModelError("%s does not look like MTCNN %s: outputs %s, expected %s"
                                 % (getattr(s, "path", name), name, got, OUTPUTS[name]), hint=EXPORT_HINT)
        pyramid, self.crop_inputs = _contracts(self.sessions)
        if min_face_size is not None:  # a face smaller than PNet's window has no pyramid level; NaN, none at all
            Bound(float, pyramid.window, why="PNet's %d-pixel window is the smallest face it sees"
                  % pyramid.window).check(min_face_size, "min_face_size (--min-face)")
        if factor is not None and not 0.0 < factor < 1.0:
            raise ConfigError("the pyramid factor must be between 0 and 1, got %r" % factor)
        import dataclasses

        self.pyramid = dataclasses.replace(pyramid, min_size=pyramid.min_size if min_face_size is None
                                           else float(min_face_size),
                                           factor=pyramid.factor if factor is None else float(factor))
        self.thresholds = tuple(float(t) for t in thresholds)
        self.last_counts: Dict[str, int] = {}

    @property
    def min_face_size(self) -> float:
        return self.pyramid.min_size

    @property
    def factor(self) -> float:
        return self.pyramid.factor

    @classmethod
    def from_dir(cls, model_dir: Any, threads: Optional[int] = None, **kwargs: Any) -> "FaceDetector":
        """Open the three nets (with their sidecars) from ``model_dir``: ``NET.engine`` where ``jetforge build``
        wrote one (its sidecar carries the net's input contract), else ``NET.onnx``.  ``threads`` is ONNX
        Runtime's and applies to ONNX nets only."""
        from jetforge.runtime.session import open_session

        folder = Path(model_dir)
        sessions = []
        for net in ("pnet", "rnet", "onet"):
            engine = folder / (Path(MODEL_FILES[net]).stem + ".engine")
            if engine.is_file():
                sessions.append(open_session(engine))
            else:
                sessions.append(open_session(folder / MODEL_FILES[net], **({} if threads is None else
                                                                            {"threads": threads})))
        return cls(*sessions, **kwargs)

    def close(self) -> None:
        for s in self.sessions.values():
            close = getattr(s, "close", None)
            if close is not None:
                close()

    def describe(self) -> str:
        s = self.sessions["pnet"]
        return "MTCNN x3 on %s" % (s.describe() if hasattr(s, "describe") else type(s).__name__)

    def _run(self, name: str, batch: np.ndarray) -> Dict[str, np.ndarray]:
        return self.sessions[name].infer({self.sessions[name].inputs[0].name: batch})

    def detect(self, image: np.ndarray, rgb: bool = False) -> Faces:
        if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ModelError("face detection needs an HxWx3 uint8 image, got %s"
                             % (getattr(image, "shape", type(image).__name__),))
        sampler = self.pyramid.sampler(image, rgb)
        hw = image.shape[:2]
        boxes = self._proposals(image, rgb, sampler)
        if boxes.shape[0] == 0:
            return Faces.empty()
        boxes = self._refine(sampler, hw, boxes)
        if boxes.shape[0] == 0:
            return Faces.empty()
        return self._output(sampler, hw, boxes)

    def _proposals(self, image: np.ndarray, rgb: bool, sampler: AreaSampler) -> np.ndarray:
        """Stage 1: PNet over the pyramid, NMS 0.5 within each scale, 0.7 across; regressed, squared boxes."""
        per_scale = []
        for scale, data in self.pyramid.levels(image, rgb, sampler):
            out = self._run("pnet", data)
            found = generate_boxes(out["reg"][0], out["prob"][0, 1], scale, self.thresholds[0])
            per_scale.append(found[nms(found[:, :4], found[:, 4], 0.5)])
        boxes = np.concatenate(per_scale, axis=0) if per_scale else np.zeros((0, 9), np.float32)
        boxes = boxes[nms(boxes[:, :4], boxes[:, 4], 0.7)]
        self.last_counts = {"pnet": int(boxes.shape[0])}
        if boxes.shape[0] == 0:
            return boxes
        regw = boxes[:, 2] - boxes[:, 0]
        regh = boxes[:, 3] - boxes[:, 1]
        boxes = np.stack([boxes[:, 0] + boxes[:, 5] * regw, boxes[:, 1] + boxes[:, 6] * regh,
                          boxes[:, 2] + boxes[:, 7] * regw, boxes[:, 3] + boxes[:, 8] * regh, boxes[:, 4]], axis=1)
        return square(boxes)

    def _refine(self, sampler: AreaSampler, hw: Tuple[int, int], boxes: np.ndarray) -> np.ndarray:
        """Stage 2: RNet on its crops; kept boxes regressed, NMS 0.7, squared."""
        crops, ok = crop_boxes(sampler, hw, boxes, self.crop_inputs["rnet"])
        boxes = boxes[ok]
        if boxes.shape[0] == 0:
            return boxes
        out = self._run("rnet", crops)
        score = out["prob"][:, 1]
        keep = score > self.thresholds[1]
        boxes = np.concatenate([boxes[keep, :4], score[keep, None]], axis=1)
        offsets = out["reg"][keep]
        pick = nms(boxes[:, :4], boxes[:, 4], 0.7)
        boxes = square(regress(boxes[pick], offsets[pick]))
        self.last_counts["rnet"] = int(boxes.shape[0])
        return boxes

    def _output(self, sampler: AreaSampler, hw: Tuple[int, int], boxes: np.ndarray) -> Faces:
        """Stage 3: ONet on its crops: scores, landmarks, final boxes, "Min" NMS, largest first."""
        crops, ok = crop_boxes(sampler, hw, boxes, self.crop_inputs["onet"])
        boxes = boxes[ok]
        if boxes.shape[0] == 0:
            return Faces.empty()
        out = self._run("onet", crops)
        score = out["prob"][:, 1]
        keep = score > self.thresholds[2]
        boxes = np.concatenate([boxes[keep, :4], score[keep, None]], axis=1)
        lm = out["landmarks"][keep]
        offsets = out["reg"][keep]
        bw = boxes[:, 2] - boxes[:, 0] + 1
        bh = boxes[:, 3] - boxes[:, 1] + 1
        px = bw[:, None] * lm[:, :5] + boxes[:, 0:1] - 1
        py = bh[:, None] * lm[:, 5:10] + boxes[:, 1:2] - 1
        points = np.stack([px, py], axis=2)
        boxes = regress(boxes, offsets)
        pick = nms(boxes[:, :4], boxes[:, 4], 0.7, overlap="min")
        boxes, points = boxes[pick], points[pick]
        self.last_counts["onet"] = int(boxes.shape[0])
        # select_largest (facenet-pytorch's default): largest box first
        # (stable, largest first: faces of equal area keep the NMS order on every CPU)
        order = np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable")
        boxes, points = boxes[order], points[order]
        return Faces(boxes[:, :4].astype(np.float32), boxes[:, 4].astype(np.float32), points.astype(np.float32))


__all__ = ["EXPORT_HINT", "FaceDetector", "Faces", "MODEL_FILES", "OUTPUTS", "THRESHOLDS", "crop_boxes",
           "generate_boxes", "regress", "square"]
