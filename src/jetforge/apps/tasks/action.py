"""``jetforge app action``: clip-based action recognition per tracked person, top-k over time.

What it recognizes, exactly: the shipped model ``action-mobilenet3d`` (``assets/shipped/action-mobilenet3d/``,
its card: ``jetforge models show action-mobilenet3d``), a pruned 3D MobileNetV2 distilled from an ImageNet-inflated
one by the recipe ``recipes/action_mobilenet3d.yaml`` (``jetforge.compress.action.action3d``), tells from 8 RGB crops (0.8 s at 10 fps, 112x112) of one
person tracked by the CNN person detector whether the person's box moves **left** or **right** in
the image ("walking left/right"), **up or down the image without lateral motion** (toward or away
from the camera), or **stays still** -- in a fixed elevated camera view like OpenCV's vtest.avi.
Its labels came from the CNN detector's tracks of vtest.avi by a velocity rule
(``jetforge.compress.action.track_clips``); its held-out accuracy is in the sidecar
(``extra.evaluation``): agreement with that rule on one scene, not a general action recognizer.
Another clip model (grey or RGB crops, any window; its sidecar's ``clip`` input says which) runs with ``--model``.

Pipeline (:class:`ActionTask`): a people detector (the ``people`` app's) -> the shared
tracker (:mod:`jetforge.vision.tracking`, its ``people`` preset) -> per track a sliding window of its boxes and the stream's frames -> every
``stride`` frames, the window's clip (fixed region: union of the boxes, enlarged) goes
through the action model (ONNX Runtime, all ready tracks of a frame in one batch) ->
per-track probabilities averaged over the last ``smooth`` windows -> top-k over time.

The clip contract (region, crop size, normalisation) is the ``clip`` input kind,
``jetforge.runtime.inputs.ClipContract``, shared with training; the sidecar carries its numbers.  Torch-free.
"""

import collections
import logging
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.pipeline.stages import Item, Status, Task, draw_banner, draw_label, draw_status
from jetforge.apps.tasks.base import App
from jetforge.apps.tasks.people import add_detector_arguments, make_person_detector
from jetforge.assets.shipped_files import shipped_model_file
from jetforge.config import COUNT
from jetforge.errors import ConfigError, ModelError
from jetforge.runtime.inputs import ClipContract, input_contract
from jetforge.runtime.model_facts import model_facts
from jetforge.runtime.session.base import threads_argtype
from jetforge.vision.hog import HogPeopleDetector, score_to_unit
from jetforge.vision.tracking import Tracker, TrackerOptions, tracker_options as tracker_preset

log = logging.getLogger(__name__)

MOBILENET3D_MODEL = shipped_model_file("action-mobilenet3d")  # made by the recipe, measured (its card)
DEFAULT_MODEL = MOBILENET3D_MODEL


class _TrackState:
    def __init__(self, history: int) -> None:
        self.boxes: Dict[int, np.ndarray] = {}  # sampled step -> box
        self.probs: Deque[np.ndarray] = collections.deque(maxlen=history)
        self.total = None  # type: Optional[np.ndarray]
        self.windows = 0
        self.last_step = -10 ** 9
        self.top1 = ""
        self.first_frame = -1
        self.last_frame = -1


class ActionTask(Task):
    """People detection + tracking + a temporal action model over sliding windows per track."""

    name = "action"

    def __init__(self, session: Any, detector: Optional[Any] = None, streams: int = 1, fps: Sequence[float] = (),
                 stride: int = 2, smooth: int = 4, top_k: int = 3, max_gap: int = 2,
                 tracker_options: Optional[TrackerOptions] = None) -> None:
        if stride < 1 or smooth < 1 or top_k < 1:
            raise ConfigError("stride, smooth and top-k must be at least 1")
        self.session = session
        sc = model_facts(session)  # the same facts from an ONNX model, an engine or a bundle's model
        if sc is None or sc.task != "action":
            raise ModelError("%s is not an action model (its sidecar must say task \"action\")"
                             % getattr(session, "path", "the model"),
                             hint="train and export one with `jetforge distill --config recipes/action_mobilenet3d.yaml`")
        self.contract: ClipContract = input_contract(sc, "clip", purpose="the action app")  # type: ignore
        self.labels = list(sc.labels)
        self.input_name = session.inputs[0].name
        self.output_name = session.outputs[0].name
        self.detector = detector or HogPeopleDetector(min_score=0.3, tighten=False)
        self.model_label = "%s (%s) on %s" % (sc.model_name, ", ".join(self.labels),
                                              getattr(self.detector, "label", type(self.detector).__name__))
        self.status_label = "%s + %s (ONNX Runtime)" % (
            "HOG" if isinstance(self.detector, HogPeopleDetector) else "CNN people", sc.model_name)
        self._to_confidence = getattr(self.detector, "to_confidence", score_to_unit)
        # the people preset: the tracks the bundled model was trained on
        self.tracker_options = tracker_options or tracker_preset("people")
        self.trackers = [Tracker(self.tracker_options) for _ in range(streams)]
        # frames are sampled to the rate the model was trained at (vtest: 10 fps)
        self.steps = [max(1, int(round((f or self.contract.fps_trained) / self.contract.fps_trained)))
                      for f in (list(fps) + [0.0] * streams)[:streams]]
        self.stride = int(stride)
        self.smooth = int(smooth)
        self.top_k = min(int(top_k), len(self.labels))
        self.max_gap = int(max_gap)
        self.grays: List[Dict[int, np.ndarray]] = [dict() for _ in range(streams)]  # sampled frames the clips read
        self.states: List[Dict[int, _TrackState]] = [dict() for _ in range(streams)]
        self.windows_run = 0

    # -- stages ---------------------------------------------------------------------------
    def preprocess(self, frame: Any) -> np.ndarray:
        return frame.image

    def infer(self, inputs: List[np.ndarray]) -> List[Any]:
        return [self.detector(image) for image in inputs]

    def warmup(self, frame: Any) -> None:
        self.infer([frame.image])
        t = self.contract
        self.session.infer({self.input_name: np.zeros((1,) + tuple(t.input_shape), np.float32)})

    def postprocess(self, item: Item) -> Dict[str, Any]:
        import cv2

        s = item.stream
        frame = item.frame
        dets = item.output
        tracks = self.trackers[s].update(dets.boxes, self._to_confidence(dets.scores))
        step = self.steps[s]
        sampled = frame.index % step == 0
        k = frame.index // step  # index on the sampled time line
        T = self.contract.window
        if sampled:
            # an RGB model reads the BGR frame (copied: the sink draws on frame.image later), a grey one its grey
            self.grays[s][k] = frame.image.copy() if self.contract.rgb else cv2.cvtColor(frame.image,
                                                                                          cv2.COLOR_BGR2GRAY)
            for old in [i for i in self.grays[s] if i <= k - T]:
                del self.grays[s][old]
        states = self.states[s]
        ready: List[Tuple[int, np.ndarray]] = []
        for t in tracks:
            st = states.get(t.id)
            if st is None:
                st = states[t.id] = _TrackState(self.smooth)
                st.first_frame = frame.index
            st.last_frame = frame.index
            if not sampled:
                continue
            st.boxes[k] = np.asarray(t.box, np.float64)
            for old in [i for i in st.boxes if i <= k - T]:
                del st.boxes[old]
            if k - st.last_step < self.stride:
                continue
            boxes = self._window_boxes(st.boxes, k)
            if boxes is None or any((k - T + 1 + i) not in self.grays[s] for i in range(T)):
                continue
            st.last_step = k
            grays = [self.grays[s][k - T + 1 + i] for i in range(T)]
            ready.append((t.id, self.contract.clip(grays, boxes)))
        events: List[Dict[str, Any]] = []
        if ready:
            logits = self.session.infer({self.input_name: np.stack([c for _, c in ready])})[self.output_name]
            self.windows_run += len(ready)
            for (tid, _), row in zip(ready, logits):
                p = _softmax(row)
                st = states[tid]
                st.probs.append(p)
                st.total = p if st.total is None else st.total + p
                st.windows += 1
                top1 = self.labels[int(np.mean(st.probs, axis=0).argmax())]
                if top1 != st.top1:
                    events.append({"type": "action_change", "track": tid, "from": st.top1 or None, "to": top1,
                                   "p": round(float(np.mean(st.probs, axis=0).max()), 4)})
                    st.top1 = top1
        out_tracks = []
        for t in tracks:
            d = t.to_dict()
            st = states.get(t.id)
            if st is not None and st.probs:
                avg = np.mean(st.probs, axis=0)
                d["action"] = st.top1
                d["top"] = self._top(avg)
                d["windows"] = st.windows
            else:
                d["action"] = None  # not enough frames of this track yet
            out_tracks.append(d)
        event: Dict[str, Any] = {"tracks": out_tracks, "people": len(tracks), "windows_classified": len(ready)}
        if events:
            event["events"] = events
        return event

    def _window_boxes(self, boxes: Dict[int, np.ndarray], k: int) -> Optional[np.ndarray]:
        T = self.contract.window
        steps = [i for i in range(k - T + 1, k + 1) if i in boxes]
        if not steps or steps[0] != k - T + 1 or steps[-1] != k or T - len(steps) > self.max_gap:
            return None
        known = np.array([boxes[i] for i in steps])
        t = np.arange(k - T + 1, k + 1)
        return np.stack([np.interp(t, steps, known[:, c]) for c in range(4)], axis=1)

    def _top(self, probs: np.ndarray) -> List[Dict[str, Any]]:
        order = np.argsort(-probs, kind="stable")[:self.top_k]
        return [{"label": self.labels[int(i)], "p": round(float(probs[i]), 4)} for i in order]

    def annotate(self, image: np.ndarray, item: Item, status: Status) -> None:
        import cv2

        tracks = (item.event or {}).get("tracks", [])
        for t in tracks:
            x1, y1, x2, y2 = [int(round(v)) for v in t["box"]]
            colour = _ACTION_COLOURS.get(t.get("action") or "", (200, 200, 200))
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
            text = "#%d %s" % (t["id"], ("%s %.0f%%" % (t["action"], 100 * t["top"][0]["p"])) if t.get("action")
                               else "...")
            draw_label(image, text, (x1, max(12, y1 - 4)), colour)
        head = "people %d  |  action: %s (labels derived from tracks)" % (len(tracks), ", ".join(self.labels))
        draw_banner(image, head, 0.5)
        draw_status(image, status)

    # -- results --------------------------------------------------------------------------
    def track_summaries(self, stream: int = 0, min_windows: int = 1) -> List[Dict[str, Any]]:
        """Per track: top-k of the probabilities averaged over all its windows (top-k over time)."""
        out = []
        for tid, st in sorted(self.states[stream].items()):
            if st.windows < min_windows or st.total is None:
                continue
            out.append({"track": tid, "frames": [st.first_frame, st.last_frame], "windows": st.windows,
                        "top": self._top(st.total / st.windows)})
        return out

    def summary(self) -> Dict[str, Any]:
        sc = model_facts(self.session)
        per_stream = []
        for s in range(len(self.trackers)):
            tracks = self.track_summaries(s)
            counts = collections.Counter(t["top"][0]["label"] for t in tracks)
            per_stream.append({"tracks": self.trackers[s].ids_issued, "tracks_classified": len(tracks),
                               "top1_per_track": dict(counts), "track_actions": tracks,
                               "frame_step": self.steps[s]})
        return {"model": sc.model_name, "labels": self.labels, "windows_classified": self.windows_run,
                "what_it_recognizes": (sc.extra.get("evaluation") or {}).get("what"),
                "held_out": {k: v for k, v in (sc.extra.get("evaluation") or {}).items() if k != "what"},
                "streams": per_stream}

    def info(self) -> Dict[str, Any]:
        return {"task": self.name, "model": self.model_label,
                "backend": "%s; people: %s" % (self.session.describe(), self.detector.describe()
                                               if hasattr(self.detector, "describe") else "OpenCV HOG on the CPU"),
                "action_model": str(self.session.path), "window": self.contract.window, "stride": self.stride,
                "smooth": self.smooth, "tracker": vars(self.tracker_options)}

    def report_lines(self) -> List[str]:
        out = []
        summ = self.summary()
        for s, st in enumerate(summ["streams"]):
            pre = "stream %d  " % s if len(self.trackers) > 1 else ""
            out.append("action    %s%d tracks, %d classified; top-1 per track: %s" % (
                pre, st["tracks"], st["tracks_classified"],
                ", ".join("%s x%d" % kv for kv in sorted(st["top1_per_track"].items())) or "-"))
        ev = summ["held_out"]  # the recipe's evaluation block (jetforge.compress.action: accuracy, clips, ...)
        if ev and "accuracy" in ev:
            out.append("model     %s; held-out accuracy %.3f vs majority baseline %.3f (%d clips)" % (
                summ["model"], ev["accuracy"], ev.get("majority_baseline", 0.0), ev.get("clips", 0)))
        out.append("note      recognizes only: %s" % (summ["what_it_recognizes"] or ", ".join(self.labels)))
        return out


_ACTION_COLOURS = {"walking left": (255, 160, 0), "walking right": (0, 200, 255),
                   "moving, no lateral motion": (0, 220, 0), "standing still": (200, 0, 200)}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


class ActionApp(App):
    """``jetforge app action``."""

    name = "action"
    description = (
        "Clip-based action recognition: people are detected (a CNN person detector: the SSDLite port by default,\n"
        "--detector-model any person detector of a registered layout, e.g. yolov8-person-192; --detector hog:\n"
        "OpenCV HOG) and tracked; for each track a sliding window of 8 frames (0.8 s at 10 fps; faster sources\n"
        "are sampled down) is cropped at a fixed region and classified by a 3D CNN (a pruned 3D MobileNetV2) through ONNX\n"
        "Runtime; probabilities are averaged over the last windows and over each track's life (top-k over time).\n\n"
        "The bundled model recognizes ONLY how a person's box moves in a fixed elevated camera view like\n"
        "vtest.avi: walking left, walking right, moving without lateral motion (toward/away from the camera),\n"
        "standing still. It was trained by recipes/action_mobilenet3d.yaml on labels derived from the CNN\n"
        "detector's tracks of vtest.avi's frames 0-519 by a velocity rule (no labelled action data exists\n"
        "offline); its held-out accuracy (frames 545-794) is in the model's sidecar.\n"
        "Without --source: OpenCV's vtest.avi.")
    examples = """examples:
  jetforge app action --max-frames 150
  jetforge app action --model runs/action_mobilenet3d/student.onnx --source street.mp4"""
    default_source = ("opencv_samples", "vtest.avi")
    default_out = "jetforge-action"

    def __init__(self) -> None:
        self._session: Any = None
        self._detector: Any = None

    def add_arguments(self, parser: Any) -> None:
        g = parser.add_argument_group("action")
        g.add_argument("--model", metavar="FILE", default=None,
                       help="action model (.onnx + sidecar with a clip input; default: the shipped 3D MobileNetV2, "
                            "action-mobilenet3d)")
        g.add_argument("--stride", metavar="N", type=COUNT.argtype, default=2,
                       help="classify each track every N sampled frames (default 2)")
        g.add_argument("--smooth", metavar="N", type=COUNT.argtype, default=4,
                       help="average the last N windows of a track for its current action (default 4)")
        g.add_argument("--top-k", metavar="K", type=COUNT.argtype, default=3,
                       help="classes listed per track (default 3)")
        # The CNN is the default: the bundled 3D model was trained on its tracks (the clip region is built from the
        # track's boxes).
        add_detector_arguments(g, default="ssd")
        g.add_argument("--threads", metavar="N", type=threads_argtype(1), default=None,
                       help="ONNX Runtime intra-op threads (default: every usable core)")

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        from jetforge.runtime.session import open_session

        model = Path(args.model) if args.model else DEFAULT_MODEL
        opts = {"threads": args.threads} if args.threads else {}
        self._session = open_session(model, **opts)
        self._detector, detector_files = make_person_detector(args, hog_min_score=0.3, hog_tighten=False,
                                                              sources=sources)
        task = ActionTask(self._session, self._detector,
                          streams=len(sources), fps=[s.fps for s in sources], stride=args.stride,
                          smooth=args.smooth, top_k=args.top_k)
        notes = ["action model recognizes only: %s" % ", ".join(task.labels),
                 "its labels were derived from person tracks by a motion rule (see the model's sidecar and recipe); "
                 "no pretrained action model or labelled action video is available offline"]
        return task, [model] + detector_files, notes

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if getattr(self._detector, "close", None) is not None:
            self._detector.close()
        self._detector = None

    def report_lines(self, task: Any) -> List[str]:
        return task.report_lines()


__all__ = ["ActionApp", "ActionTask", "DEFAULT_MODEL", "MOBILENET3D_MODEL"]
