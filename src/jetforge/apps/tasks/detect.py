"""``jetforge app detect``: any detector model, tracked and counted per class in a fixed-camera video.

The detector is :class:`~jetforge.vision.decoded_detector.DecodedDetector`: an ONNX (or engine) with its output
decoder (from its sidecar, or ``--decoder`` for one without), so a YOLO v5/v8, SSD, EfficientNMS or torchvision export
runs as it is.  ``--classes person,car`` keeps those of the model's classes (default: all); each kept class is
tracked and counted on its own (:mod:`jetforge.apps.tasks.class_tracks`: one tracker per class, the people preset's
thresholds for every class, lines and zones counted per class).

Pipeline stages (:class:`DetectTask`): preprocess (the frame, or nothing on a frame ``--detect-every`` skips) ->
infer (the detector, one call for the batch) -> postprocess (per class: tracker, line crossings, zone occupancy) ->
annotate (tracks with class and id, trails, lines and zones with their counts).  Per frame the event holds the kept
``detections`` (``[x1, y1, x2, y2, score, class]``), ``tracks`` (each with its ``class``), ``objects`` (tracks in
frame per class), ``counts`` (line -> class -> forward/backward), ``occupancy`` (zone -> class -> tracks inside) and,
on a crossing, ``events`` (``line_cross`` with its ``class``).  A still photo of a folder is counted at once, without
tracks (:mod:`jetforge.apps.tasks.photos`).  The GPU path (``--decode gpu``) feeds the same session whole batches and
decodes their outputs on the host with the same decoder; a model whose outputs hold one image without a batch axis
(the ``torchvision`` layout) has none (:meth:`DetectTask.gpu_model` says so).

The people app (``apps/tasks/people.py``) is this task restricted to the class ``person`` of its person detector.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from jetforge.apps.pipeline.stages import GpuModel, Item, Status, Task, draw_banner, draw_status
from jetforge.apps.tasks.base import App
from jetforge.apps.tasks.class_tracks import ClassInput, ClassStep, ClassTracking
from jetforge.apps.tasks.photos import draw_photo, is_photo, photo_objects_event
from jetforge.apps.video.sources.base import Frame
from jetforge.config import COUNT, NON_NEGATIVE, NON_NEGATIVE_NUMBER
from jetforge.errors import ConfigError
from jetforge.runtime.session.base import threads_argtype
from jetforge.vision.counting import LineCounter, Zone, parse_line, parse_zone
from jetforge.vision.detections import Detections
from jetforge.vision.tracking import TrackerOptions, tracker_options as tracker_preset

# The showcase geometry on OpenCV's vtest.avi (768x576): a line across the walkway between the
# lamp post and the right-hand road, and a zone over the crossing area in the middle of the frame.
VTEST_LINE = "walkway=360,140,360,420"
VTEST_ZONE = "crossing=330,180,560,180,600,330,330,330"


def class_name(labels: Sequence[str], index: int) -> str:
    """The name of class ``index`` (``class<N>`` for a model whose classes are unnamed or past its list)."""
    return labels[index] if 0 <= index < len(labels) else "class%d" % index


class DetectTask(Task):
    """Detection + per-class tracking, line counts and zone occupancy, one set of trackers per stream.

    ``classes``: the class names to track (None: every class the detector finds, each from its first detection);
    ``one_class``: every detection is this class whatever its index (a one-class detector such as HOG).
    """

    name = "detect"

    def __init__(self, detector: Any, classes: Optional[Sequence[str]] = None, lines: Sequence[LineCounter] = (),
                 zones: Sequence[Zone] = (), tracker_options: Optional[TrackerOptions] = None, streams: int = 1,
                 draw_detections: bool = False, detect_every: int = 1, one_class: Optional[str] = None) -> None:
        if detect_every < 1:
            raise ConfigError("--detect-every must be 1 or more, got %d" % detect_every,
                              hint="1 runs the detector on every frame")
        self.detector = detector
        self.model_label = getattr(detector, "label", type(detector).__name__)
        self.status_label = self.model_label
        if detect_every > 1:
            self.status_label += ", every %d frames" % detect_every
        self.detect_every = int(detect_every)
        self._to_confidence = getattr(detector, "to_confidence", lambda s: np.asarray(s, dtype=np.float64))
        self.labels = tuple(getattr(detector, "labels", ()) or ())
        self.one_class = one_class
        self.wanted: Optional[Set[str]] = set(classes) if classes is not None else None
        self.tracker_options = tracker_options or tracker_preset("people")
        fixed = [one_class] if one_class else list(classes or ())
        self.tracking = ClassTracking(fixed, streams, self.tracker_options, lines, zones)
        self.draw_detections = draw_detections

    # -- stages ---------------------------------------------------------------------------
    def preprocess(self, frame: Frame) -> Optional[np.ndarray]:
        """The frame, or None on a frame the detector skips (``detect_every``)."""
        return frame.image if frame.index % self.detect_every == 0 else None

    def infer(self, inputs: List[Optional[np.ndarray]]) -> List[Optional[Detections]]:
        images = [x for x in inputs if x is not None]
        if hasattr(self.detector, "detect_batch"):
            found = iter(self.detector.detect_batch(images))
        else:
            found = iter([self.detector(image) for image in images])
        return [next(found) if x is not None else None for x in inputs]

    def classes_of(self, dets: Detections) -> List[str]:
        """The class name of each detection."""
        if self.one_class:
            return [self.one_class] * len(dets)
        return [class_name(self.labels, int(c)) for c in dets.classes]  # type: ignore[union-attr]

    def split(self, dets: Detections) -> Tuple[Detections, List[str], Dict[str, ClassInput]]:
        """(the kept detections, their class names, per tracked class its boxes and confidences); classes not
        asked for are dropped here, before the tracker and the event."""
        names = self.classes_of(dets)
        keep = np.array([self.wanted is None or n in self.wanted for n in names], bool)
        kept = Detections(dets.boxes[keep], dets.scores[keep], dets.classes[keep], dets.labels)  # type: ignore
        names = [n for n, k in zip(names, keep) if k]
        for n in names:
            self.tracking.add(n)
        conf = np.asarray(self._to_confidence(kept.scores), dtype=np.float64)
        per_class: Dict[str, ClassInput] = {}
        for name in self.tracking.classes:
            rows = [i for i, n in enumerate(names) if n == name]
            per_class[name] = (kept.boxes[rows], conf[rows])
        return kept, names, per_class

    def postprocess(self, item: Item) -> Dict[str, Any]:
        dets: Optional[Detections] = item.output
        if is_photo(item.frame):  # a still photo: its own detections, no track to wait for (tasks/photos.py)
            return self.photo_event(dets, item.stream)
        if dets is None:  # a skipped frame: the tracks move on their prediction
            kept, names, steps = None, [], self.tracking.step(item.stream, None)
        else:
            kept, names, per_class = self.split(dets)
            steps = self.tracking.step(item.stream, [per_class[c] for c in self.tracking.classes])
        return self.event(item.stream, kept, names, steps)

    def photo_event(self, dets: Optional[Detections], stream: int) -> Dict[str, Any]:
        kept, names = (None, []) if dets is None else self.split(dets)[:2]
        event = photo_objects_event(kept, names, self._to_confidence, self.tracker_options.new_track)
        for name, state in zip(self.tracking.classes, self.tracking.states[stream]):
            state.peak = max(state.peak, event["objects"].get(name, 0))
        return event

    def event(self, stream: int, kept: Optional[Detections], names: Sequence[str],
              steps: Sequence[ClassStep]) -> Dict[str, Any]:
        """The frame's event (module docstring)."""
        classes, states = self.tracking.classes, self.tracking.states[stream]
        tracks = [dict({"class": c}, **t.to_dict()) for c, step in zip(classes, steps) for t in step.tracks]
        event: Dict[str, Any] = {
            "detections": None if kept is None else [row + [n] for row, n in zip(kept.to_list(), names)],
            "tracks": tracks,
            "objects": {c: len(step.tracks) for c, step in zip(classes, steps)},
            "counts": {line.name: {c: {"forward": s.lines[k].forward, "backward": s.lines[k].backward}
                                   for c, s in zip(classes, states)}
                       for k, line in enumerate(self.tracking.lines)},
            "occupancy": {zone.name: {c: step.occupancy[zone.name] for c, step in zip(classes, steps)}
                          for zone in self.tracking.zones},
        }
        crossings = [dict(e, **{"class": c}) for c, step in zip(classes, steps) for e in step.crossings]
        if crossings:
            event["events"] = crossings
        return event

    def annotate(self, image: np.ndarray, item: Item, status: Status) -> None:
        import cv2

        if (item.event or {}).get("photo"):
            draw_photo(image, item.event)  # type: ignore[arg-type]
            return
        if self.draw_detections and item.output is not None:
            for b in item.output.boxes:
                cv2.rectangle(image, (int(b[0]), int(b[1])), (int(b[2]), int(b[3])), (160, 160, 160), 1)
        tracks = (item.event or {}).get("tracks", [])
        self.tracking.draw(image, item.stream, tracks, self.track_label)
        draw_banner(image, self.banner(item.stream, item.event or {}), 0.6)
        draw_status(image, status)

    def track_label(self, track: Dict[str, Any]) -> str:
        return "%s #%d" % (track.get("class", ""), track["id"])

    def banner(self, stream: int, event: Dict[str, Any]) -> str:
        objects = event.get("objects") or {}
        head = "  ".join("%s %d" % (c, n) for c, n in objects.items() if n) or "nothing tracked"
        if self.tracking.states[stream] and self.tracking.states[stream][0].lines:
            head += "  |  crossed %d" % self.tracking.crossed(stream)
        return head + "  |  tracks so far %d" % self.tracking.ids_issued(stream)

    def warmup(self, frame: Frame) -> None:
        self.infer([frame.image])

    def gpu_model(self) -> Optional[GpuModel]:
        """The GPU path: the detector's session fed whole batches, each batch's outputs decoded on the host by the
        same decoder (:meth:`DecodedDetector.decode`).  None for a detector without a session, and for the
        ``torchvision`` layout, whose outputs hold one image without a batch axis (run it with --decode cpu)."""
        from jetforge.vision.decoded_detector import UNBATCHED_DECODERS

        d = self.detector
        if getattr(d, "session", None) is None or not hasattr(d, "decode"):
            return None
        if d.decoder.name in UNBATCHED_DECODERS:
            return None
        every = self.detect_every

        def to_outputs(outputs: Dict[str, np.ndarray], frames: List[Any]) -> List[Any]:
            found = d.decode([outputs[n] for n in d.output_names], [(f.height, f.width) for f in frames])
            return [None if f.index % every else det for f, det in zip(frames, found)]

        return GpuModel(d.session, d.contract, to_outputs)

    def summary(self) -> Dict[str, Any]:
        streams = [{"tracks": self.tracking.ids_issued(s), "classes": self.tracking.summary(s)}
                   for s in range(len(self.tracking.states))]
        return {"detector": self.model_label, "detect_every": self.detect_every,
                "classes": sorted(self.wanted) if self.wanted is not None else "all", "streams": streams}

    def info(self) -> Dict[str, Any]:
        d = self.detector
        decoder = getattr(d, "decoder", None)
        settings = {"model": str(getattr(d, "model_path", "")), "decoder": getattr(decoder, "name", None),
                    "model_classes": len(self.labels), "score_threshold": getattr(d, "score_threshold", None),
                    "detect_every": self.detect_every}
        return {"task": self.name, "model": self.model_label,
                "backend": d.describe() if hasattr(d, "describe") else type(d).__name__,
                "detector": settings, "tracker": vars(self.tracker_options)}

    def report_lines(self) -> List[str]:
        out = []
        for s in range(len(self.tracking.states)):
            pre = "stream %d  " % s if len(self.tracking.states) > 1 else ""
            for c, st in self.tracking.summary(s).items():
                out.append("%-9s %s%d distinct tracks, at most %d in one frame" % (c, pre, st["tracks"],
                                                                                  st["max_in_frame"]))
                for l in st["lines"]:
                    out.append("  line    %s%s: %d forward, %d backward" % (pre, l["name"], l["forward"],
                                                                          l["backward"]))
                for z in st["zones"]:
                    out.append("  zone    %s%s: peak %d inside, %d visitors" % (pre, z["name"], z["peak"],
                                                                              z["visitors"]))
        out.append("detector  %s" % self.model_label)
        return out



def add_counting_arguments(group: Any) -> None:
    """``--line``, ``--zone``, ``--line-margin``: shared by the detect and people apps."""
    group.add_argument("--line", metavar="[NAME=]X1,Y1,X2,Y2", action="append", default=None,
                       help="a counting line in pixels (repeatable; default on vtest.avi: %s)" % VTEST_LINE)
    group.add_argument("--zone", metavar="[NAME=]X1,Y1,X2,Y2,X3,Y3,...", action="append", default=None,
                       help="an occupancy zone polygon in pixels (repeatable; default on vtest.avi: %s)"
                            % VTEST_ZONE)
    group.add_argument("--line-margin", metavar="PX", type=NON_NEGATIVE_NUMBER.argtype, default=10.0,
                       help="a crossing counts once the feet are this many pixels past the line (default 10; "
                            "stops jitter on the line from counting again and again)")


def add_tracking_arguments(group: Any) -> None:
    """``--detect-every``, ``--max-age``: shared by the detect and people apps."""
    group.add_argument("--detect-every", metavar="N", type=COUNT.argtype, default=1,
                       help="run the detector on every N-th frame only, the tracker predicts in between "
                            "(default 1: every frame)")
    group.add_argument("--max-age", metavar="FRAMES", type=NON_NEGATIVE.argtype, default=20,
                       help="frames a lost track is kept to re-identify it after an occlusion (default 20)")


def counting_from_args(args: Any, sources: Sequence[Any],
                       notes: List[str]) -> Tuple[List[LineCounter], List[Zone], TrackerOptions]:
    """The lines, zones and tracker options the flags ask for (vtest.avi's showcase line and zone when neither
    --line nor --zone is given and every source is vtest.avi); a note when nothing is counted."""
    lines, zones = args.line, args.zone
    if lines is None and zones is None:
        if all(Path(str(s.uri)).name == "vtest.avi" for s in sources):
            lines, zones = [VTEST_LINE], [VTEST_ZONE]
        else:
            notes.append("no --line or --zone given: counting what is in frame only")
    counters = [parse_line(t, "line%d" % (i + 1), margin=args.line_margin) for i, t in enumerate(lines or [])]
    areas = [parse_zone(t, "zone%d" % (i + 1)) for i, t in enumerate(zones or [])]
    if args.max_age < 0:
        raise ConfigError("--max-age must be 0 or more, got %d" % args.max_age)
    return counters, areas, tracker_preset("people", max_age=args.max_age)


def selected_classes(spec: Optional[str], labels: Sequence[str], model: str) -> Optional[List[str]]:
    """``--classes`` checked against the model's class names (None: every class).  A model without names takes
    ``class<N>`` names."""
    if spec is None:
        return None
    from jetforge.vision.classes import class_names

    wanted = list(class_names(spec))
    unknown = [n for n in wanted if n not in labels] if labels else [
        n for n in wanted if not (n.startswith("class") and n[5:].isdigit())]
    if unknown:
        known = ", ".join(labels) if labels else "unnamed: class0, class1, ... by index"
        raise ConfigError("--classes names %s, which %s does not detect; its classes: %s"
                          % (", ".join(unknown[:5]), model, known),
                          hint="choose among the model's classes, or give the model its names with jetforge "
                               "export-sidecar" if not labels else "choose among the model's classes")
    return wanted


class DetectApp(App):
    name = "detect"
    description = (
        "Any detector ONNX, tracked and counted per class: line crossings and zone occupancy per class.\n\n"
        "The model's sidecar names its output decoder (YOLO v5/v8, SSD, EfficientNMS, torchvision layouts),\n"
        "its class names and its input; a model from elsewhere gets one with `jetforge export-sidecar`, or runs\n"
        "with --decoder NAME (then as YOLO exports are fed: letterbox, RGB, pixels / 255; classes unnamed).\n"
        "--classes keeps some of the model's classes; each is tracked on its own (ids per class). Coordinates\n"
        "are pixels of the source frame. Without --source: OpenCV's vtest.avi, with its line and zone.")
    examples = """examples:
  jetforge app detect --model ssdlite-person-192 --max-frames 200
  jetforge app detect --model yolov8n.onnx --classes person,car --source street.mp4 --line gate=0,400,1280,400
  jetforge app detect --model yolov8n.onnx --decoder yolov8      # no sidecar yet: classes by index"""
    default_source = ("opencv_samples", "vtest.avi")
    default_out = "jetforge-detect"
    shared_flags = {"decoder": "the layout of the model's outputs, for a model whose sidecar names none",
                    "classes": "the model's classes to track and count (default: all)"}

    def __init__(self) -> None:
        self._detector: Optional[Any] = None

    def add_arguments(self, parser: Any) -> None:
        g = parser.add_argument_group("detect")
        g.add_argument("--model", metavar="DET.onnx", required=True,
                       help="the detector: an ONNX or engine with its sidecar, or a shipped model's name")
        g.add_argument("--threads", metavar="N", type=threads_argtype(1), default=None,
                       help="ONNX Runtime intra-op threads (default: every usable core)")
        add_counting_arguments(g)
        add_tracking_arguments(g)
        g.add_argument("--draw-detections", action="store_true", help="also draw every kept detection in grey")

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        from jetforge.vision.decoded_detector import DecodedDetector

        notes: List[str] = []
        lines, zones, tracker = counting_from_args(args, sources, notes)
        self._detector = detector = DecodedDetector(args.model, decoder=args.decoder,
                                                    threads=getattr(args, "threads", None))
        classes = selected_classes(args.classes, detector.labels, Path(args.model).name)
        if not detector.has_sidecar:
            notes.append("%s has no sidecar: fed as YOLO exports are (letterbox, RGB, pixels / 255), classes unnamed; "
                         "jetforge export-sidecar records its own" % Path(args.model).name)
        task = DetectTask(detector, classes, lines, zones, tracker, streams=len(sources),
                          draw_detections=args.draw_detections, detect_every=args.detect_every)
        notes.append("detector: %s; classes: %s" % (task.model_label, ", ".join(classes) if classes else "all"))
        return task, [Path(args.model)], notes

    def close(self) -> None:
        if self._detector is not None:
            self._detector.close()
        self._detector = None


__all__ = ["DetectApp", "DetectTask", "VTEST_LINE", "VTEST_ZONE", "add_counting_arguments", "add_tracking_arguments",
           "class_name", "counting_from_args", "selected_classes"]
