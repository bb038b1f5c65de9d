"""Clips labelled from real person tracks of the CNN detector: the training and held-out data of the 3D action model.

Where the tracks come from: the CNN person detector (SSDLite-MobileNetV2, exported once next to the cache) and the
ByteTrack-style tracker with the settings the action app uses (:func:`jetforge.vision.tracking.tracker_options`
``"people"``), run once over the video by :func:`jetforge.vision.person_tracks.track_video` -- the tracks
``jetforge app people`` follows, called directly.  :func:`ensure_track_cache` writes every frame's tracks (id,
box) to ``events.jsonl`` in the people app's event format when the cache is missing (so a ``jetforge app people
--no-video --out DIR`` run's events serve as a cache too); :func:`read_track_events` reads it.  The boxes are the
tracker's own (Kalman-filtered) boxes: what ``jetforge app action`` crops at run time.

**The label rule** (:class:`MotionRule`), from the track's boxes over the clip's ``T`` frames only: the
least-squares velocity of the box centre x (``vx``) and of the box bottom y (``vy``), divided by the
window's median box height, in **body heights per second** (the frame rate from the video), and
``speed = hypot(vx, vy)``:

* ``walking left`` / ``walking right``: ``speed >= lateral_min`` and ``|vx| >= dominance * |vy|``; the sign of
  ``vx`` is the direction in the image;
* ``moving, no lateral motion``: ``speed >= vertical_min`` and ``|vy| >= dominance * |vx|``: the box moves up or
  down the image, which with this elevated fixed camera is a person walking away from or toward it;
* ``standing still``: ``speed < still_max``;
* anything else (diagonal motion, speeds between the thresholds) gets no label and is used neither for
  training nor for evaluation.

So the classes are exactly statements about how a person's detector box moves in the image of one
fixed camera; a model's accuracy on them is agreement with this rule on one scene, not a general
action-recognition result.

Split: training clips lie wholly in frames ``[0, train_end)``, held-out clips wholly in ``[heldout_start,
end)``; the frames between are a guard gap, so no held-out frame is in any training clip.  numpy + OpenCV.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import CompressError, InputFileError
from jetforge.fileio import write_text_atomic
from jetforge.progress import progress_bar
from jetforge.runtime.inputs.clip import ClipContract
from jetforge.vision.person_tracks import track_video
from jetforge.vision.person_detectors import open_person_detector
from jetforge.vision.tracking import tracker_options

Tracks = Dict[int, Dict[int, np.ndarray]]

LEFT, RIGHT, AWAY_TOWARD, STILL = "walking left", "walking right", "moving, no lateral motion", "standing still"
LABELS = (LEFT, RIGHT, AWAY_TOWARD, STILL)
#: a horizontally mirrored clip shows the opposite lateral direction; the other classes keep their label
MIRROR = {LEFT: RIGHT, RIGHT: LEFT}


@dataclass
class MotionRule:
    """Thresholds of the label rule, in body heights per second (module docstring)."""

    lateral_min: float = 0.35
    vertical_min: float = 0.20
    still_max: float = 0.10
    dominance: float = 1.5

    def velocity(self, boxes: np.ndarray, fps: float) -> Tuple[float, float]:
        """(vx, vy) of a window's boxes (T, 4) in body heights per second (least-squares slopes)."""
        t = np.arange(len(boxes), dtype=np.float64)
        t -= t.mean()
        denom = float((t * t).sum())
        cx = (boxes[:, 0] + boxes[:, 2]) / 2.0
        bottom = boxes[:, 3]
        height = float(np.median(boxes[:, 3] - boxes[:, 1]))
        if denom == 0 or height <= 0:
            return 0.0, 0.0
        vx = float((t * (cx - cx.mean())).sum() / denom) * fps / height
        vy = float((t * (bottom - bottom.mean())).sum() / denom) * fps / height
        return vx, vy

    def label(self, boxes: np.ndarray, fps: float) -> Optional[str]:
        vx, vy = self.velocity(boxes, fps)
        speed = float(np.hypot(vx, vy))
        if speed < self.still_max:
            return STILL
        if speed >= self.lateral_min and abs(vx) >= self.dominance * abs(vy):
            return RIGHT if vx > 0 else LEFT
        if speed >= self.vertical_min and abs(vy) >= self.dominance * abs(vx):
            return AWAY_TOWARD
        return None


@dataclass
class ClipWindow:
    """One labelled clip: frames ``start .. start + len(boxes) - 1`` of track ``track``."""

    track: int
    start: int
    label: str
    boxes: np.ndarray

    def to_dict(self) -> Dict[str, Any]:
        return {"track": self.track, "start": self.start, "label": self.label,
                "boxes": np.round(self.boxes, 2).tolist()}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ClipWindow":
        return cls(int(d["track"]), int(d["start"]), str(d["label"]), np.asarray(d["boxes"], np.float64))


def track_cache_events(video: Path, detector: Any, max_frames: int = 0) -> Iterator[Dict[str, Any]]:
    """The people app's per-frame events with the tracks of ``video`` (``max_frames``: the first N only; 0: all)."""
    for index, tracks in track_video(video, detector, tracker_options("people"), max_frames=max_frames):
        yield {"type": "people", "stream": 0, "frame": index, "tracks": [t.to_dict() for t in tracks]}


def ensure_track_cache(video: Path, out_dir: Path, max_frames: int = 0, detector_model: Optional[Path] = None,
                       progress: bool = False) -> Path:
    """``out_dir/events.jsonl``, made by :func:`track_cache_events` when missing.

    The detector is ``detector_model`` (an exported person detector with its sidecar: the SSD, or any registered
    output layout's person class, as ``app people --detector-model`` takes it), by default the people app's CNN
    exported from its verified asset into ``out_dir/person_detector.onnx`` (needs torch, as this recipe does).
    """
    events = Path(out_dir) / "events.jsonl"
    if events.is_file():
        return events
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    model = Path(detector_model) if detector_model else _export_person_detector(Path(out_dir))
    with open_person_detector(model) as detector:
        lines = [json.dumps(e) for e in progress_bar(track_cache_events(Path(video), detector, max_frames),
                                                     desc="person tracks", unit="frame", enabled=progress)]
    write_text_atomic(events, "".join(line + "\n" for line in lines))
    return events


def _export_person_detector(folder: Path) -> Path:
    """The people app's CNN person detector, exported from its verified asset (the weights' hash is checked)."""
    from jetforge.assets import asset_path
    from jetforge.compress.models.ssdlite_export import MODEL_NAME, WEIGHTS_FILE, export_person_detector

    path = folder / "person_detector.onnx"
    export_person_detector(asset_path(MODEL_NAME, WEIGHTS_FILE), path,
                           provenance={"source_model": MODEL_NAME})
    return path


def read_track_events(path: Path) -> Tracks:
    """{track id: {frame: box (4,)}} from the people app's events.jsonl (frames of stream 0)."""
    tracks: Tracks = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as err:
        raise InputFileError("cannot read the track cache %s: %s" % (path, err),
                             hint="make it with jetforge app people --no-video --out DIR") from err
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError as err:
            raise InputFileError("%s is not the people app's events.jsonl (%s)" % (path, err),
                                 hint="make it with jetforge app people --no-video --out DIR") from err
        if event.get("type") != "people" or event.get("stream", 0) != 0:
            continue
        frame = int(event["frame"])
        for t in event.get("tracks", []):
            tracks.setdefault(int(t["id"]), {})[frame] = np.asarray(t["box"], np.float64)
    if not tracks:
        raise InputFileError("%s holds no person tracks" % path, hint="run the people app on a video with people")
    return tracks


def make_windows(tracks: Tracks, window: int, stride: int, rule: MotionRule, fps: float,
                 labels: Sequence[str] = LABELS) -> List[ClipWindow]:
    """Every ``stride``-th window of ``window`` consecutive frames of every track (no missing frame), labelled."""
    out: List[ClipWindow] = []
    for tid in sorted(tracks):
        track = tracks[tid]
        frames = sorted(track)
        for start in range(frames[0], frames[-1] - window + 2, stride):
            if any(f not in track for f in range(start, start + window)):
                continue
            boxes = np.stack([track[f] for f in range(start, start + window)])
            label = rule.label(boxes, fps)
            if label is not None and label in labels:
                out.append(ClipWindow(tid, start, label, boxes))
    return out


def split_windows(windows: Sequence[ClipWindow], train_end: int,
                  heldout_start: int) -> Tuple[List[ClipWindow], List[ClipWindow]]:
    """(training clips wholly before ``train_end``, held-out clips wholly from ``heldout_start``)."""
    if heldout_start < train_end:
        raise CompressError("held-out clips must start after the training frames end (train_end %d, heldout_start %d)"
                            % (train_end, heldout_start), hint="leave a guard gap: heldout_start >= train_end")
    train = [w for w in windows if w.start + len(w.boxes) <= train_end]
    held = [w for w in windows if w.start >= heldout_start]
    return train, held


def cut_clips(video: Path, windows: Sequence[ClipWindow], contract: ClipContract, progress: bool = False) -> np.ndarray:
    """uint8 crops of every window in one pass over ``video``: (N, T, H, W) grey or (N, T, H, W, 3) RGB.

    The crops are the contract's (``region`` of the window's boxes, ``crop``), the same calls the app
    makes; :meth:`ClipContract.normalize` turns them into model input."""
    import cv2

    shape = (len(windows), contract.window, contract.crop_h, contract.crop_w) + ((3,) if contract.rgb else ())
    clips = np.zeros(shape, np.uint8)
    by_frame: Dict[int, List[Tuple[int, int]]] = {}
    regions = [contract.region(w.boxes) for w in windows]
    for i, w in enumerate(windows):
        if len(w.boxes) != contract.window:
            raise CompressError("clip %d has %d frames, the contract %d" % (i, len(w.boxes), contract.window),
                                hint="make the windows with the contract's window")
        for k in range(contract.window):
            by_frame.setdefault(w.start + k, []).append((i, k))
    last = max(by_frame) if by_frame else -1
    cap = cv2.VideoCapture(str(video))
    if not cap.isOpened():
        raise InputFileError("cannot decode %s" % video, hint="pass a video OpenCV can read")
    f = 0
    for f in progress_bar(range(last + 1), desc="clips", unit="frame", enabled=progress):
        ok, frame = cap.read()
        if not ok:
            break
        if f in by_frame:
            image = frame if contract.rgb else cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
            for i, k in by_frame[f]:
                clips[i, k] = contract.crop(image, regions[i])
    else:
        f = last + 1
    cap.release()
    if f <= last:
        raise InputFileError("%s ended at frame %d, before the clips' last frame %d" % (video, f, last),
                             hint="use the video the tracks were made from")
    return clips


def label_counts(windows: Sequence[ClipWindow], labels: Sequence[str] = LABELS) -> Dict[str, int]:
    return {lab: sum(1 for w in windows if w.label == lab) for lab in labels}


def rule_dict(rule: MotionRule) -> Dict[str, Any]:
    return dict(asdict(rule), units="body heights per second (box-height-normalised least-squares velocity)")


__all__ = ["AWAY_TOWARD", "ClipWindow", "LABELS", "LEFT", "MIRROR", "MotionRule", "RIGHT", "STILL", "cut_clips",
           "ensure_track_cache", "label_counts", "make_windows", "read_track_events", "rule_dict", "split_windows",
           "track_cache_events"]
